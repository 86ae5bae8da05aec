// CsvTable (core/data/csv_table.h): rows kept as written, an id column read with its
// errors naming file, line and column, and rows written back in a chosen order.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/data/csv_table.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class CsvTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("csv_table_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  static std::string Read(const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

TEST_F(CsvTableTest, ReadsIdsAndWritesChosenRowsAsWritten) {
  const std::string p = Write("t.csv", "\xEF\xBB\xBFid, age ,score\r\nc-7, 41,0.5\r\n\r\nc-2,39 ,x\nc-9,50,1e3\n");
  auto t = ReadCsvTable(p);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->names, (std::vector<std::string>{"id", "age", "score"}));
  EXPECT_EQ(t->line_of_row, (std::vector<size_t>{2, 4, 5}));
  auto ids = CsvColumn(*t, "id", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<std::string>{"c-7", "c-2", "c-9"}));
  const std::vector<uint64_t> order = {2, 0};
  ASSERT_TRUE(WriteCsvRows(*t, order, (dir_ / "out.csv").string()).ok());
  EXPECT_EQ(Read((dir_ / "out.csv").string()), "id, age ,score\nc-9,50,1e3\nc-7, 41,0.5\n");
  EXPECT_EQ(WriteCsvRows(*t, std::vector<uint64_t>{3}, (dir_ / "x.csv").string()).code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(fs::exists(dir_ / "x.csv"));
}

TEST_F(CsvTableTest, BadTablesAndColumnsNameFileLineAndColumn) {
  auto err = [&](const std::string& text, const std::string& column = "id") {
    const std::string p = Write("bad.csv", text);
    auto t = ReadCsvTable(p);
    if (!t.ok()) return t.status().message();
    return CsvColumn(*t, column, true).status().message();
  };
  EXPECT_THAT(err("id,a\n1,2\n3\n"), HasSubstr("bad.csv line 3: has 1 cells but the header names 2 columns"));
  EXPECT_THAT(err("id,a\n1,2\n1,3\n"), HasSubstr("bad.csv line 3: column \"id\" value \"1\" appears again (first on line 2)"));
  EXPECT_THAT(err("id,a\n,2\n"), HasSubstr("bad.csv line 2: column \"id\" is empty"));
  EXPECT_THAT(err("id,a\n1,2\n", "customer"), HasSubstr("column \"customer\" is not in the header of"));
  EXPECT_THAT(err("id,a\n1,2\n", "customer"), HasSubstr("available columns: id, a"));
  EXPECT_THAT(err("id,id\n1,2\n"), HasSubstr("column name \"id\" appears twice"));
  EXPECT_THAT(err(""), HasSubstr("has no header"));
  EXPECT_EQ(ReadCsvTable((dir_ / "none.csv").string()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace fedmesh
