// Tests for core/data/csv_reader: the accepted dialect parsed to exact values, and each
// rejected input reported with the right code, its line number and the offending cell.
#include "core/data/csv_reader.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace fedmesh {
namespace {

CsvOptions Label(const std::string& column, int num_classes = 0) {
  CsvOptions o;
  o.label_column = column;
  o.num_classes = num_classes;
  return o;
}

void ExpectError(const Status& s, StatusCode code, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(s.code(), code) << "expected " << StatusCodeName(code) << ", got " << s.ToString();
  for (const std::string& f : fragments) {
    EXPECT_NE(s.message().find(f), std::string::npos)
        << "message \"" << s.message() << "\" lacks \"" << f << "\"";
  }
}

Status ParseError(const std::string& text, const CsvOptions& options = Label("y")) {
  return ParseCsv(text, options, "site.csv").status();
}

TEST(CsvReaderTest, ParsesFeaturesAndLabelInAnyColumn) {
  // Label in the middle; CRLF; spaces around cells; trailing newline; '+' and exponents.
  const std::string text =
      "age, y ,income\r\n"
      "31, 1, 2.5\r\n"
      " -4.25 ,0,+1e3\r\n"
      "0,2,-0.125\r\n";
  Result<Dataset> ds = ParseCsv(text, Label("y"), "site.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->sample_shape, (std::vector<int>{2}));
  EXPECT_EQ(ds->num_classes, 3);  // inferred: max label 2 + 1
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(ds->features, (std::vector<float>{31.0f, 2.5f, -4.25f, 1000.0f, 0.0f, -0.125f}));
}

TEST(CsvReaderTest, ExplicitNumClassesIsKept) {
  Result<Dataset> ds = ParseCsv("a,label\n1,0\n2,1\n", Label("label", 5), "x");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->num_classes, 5);
}

TEST(CsvReaderTest, ToleratesNoFinalNewlineBlankLinesAndBom) {
  Result<Dataset> ds = ParseCsv("\xEF\xBB\xBFx,y\n1,0\n\n  \n2,1", Label("y"), "x");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ds->features, (std::vector<float>{1.0f, 2.0f}));
}

TEST(CsvReaderTest, IntegralDecimalLabelsAreAccepted) {
  // pandas writes an int column with missing values as floats: "3.0" is class 3.
  Result<Dataset> ds = ParseCsv("x,y\n1,3.0\n", Label("y"), "x");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{3}));
}

TEST(CsvReaderTest, TabDelimiter) {
  CsvOptions o = Label("y");
  o.delimiter = '\t';
  Result<Dataset> ds = ParseCsv("a\ty\tb\n1.5\t1\t2\n", o, "x.tsv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, (std::vector<float>{1.5f, 2.0f}));
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{1}));
}

TEST(CsvReaderTest, RaggedRowGivesLineAndFieldCounts) {
  ExpectError(ParseError("a,b,y\n1,2,0\n1,2\n"), StatusCode::kCorruption,
              {"site.csv line 3", "expected 3 fields", "got 2"});
  ExpectError(ParseError("a,b,y\n1,2,0,9\n"), StatusCode::kCorruption,
              {"line 2", "expected 3", "got 4"});
}

TEST(CsvReaderTest, NonNumericCellIsQuotedWithColumn) {
  ExpectError(ParseError("a,b,y\n1,2,0\n\n1,abc,1\n"), StatusCode::kCorruption,
              {"line 4", "\"abc\"", "column \"b\"", "not a number"});
  ExpectError(ParseError("a,y\n1.5x,0\n"), StatusCode::kCorruption, {"line 2", "\"1.5x\""});
  ExpectError(ParseError("a,y\n,0\n"), StatusCode::kCorruption, {"line 2", "empty"});
}

TEST(CsvReaderTest, NanAndInfAreRejected) {
  ExpectError(ParseError("a,y\n1,0\nnan,1\n"), StatusCode::kCorruption, {"line 3", "NaN"});
  ExpectError(ParseError("a,y\n-inf,1\n"), StatusCode::kCorruption, {"line 2", "infinite"});
  ExpectError(ParseError("a,y\n1e39,1\n"), StatusCode::kCorruption, {"line 2", "float32"});
}

TEST(CsvReaderTest, LabelsMustBeNonNegativeIntegers) {
  ExpectError(ParseError("a,y\n1,-1\n"), StatusCode::kCorruption,
              {"line 2", "\"-1\"", "non-negative integer"});
  ExpectError(ParseError("a,y\n1,0\n2,1.5\n"), StatusCode::kCorruption, {"line 3", "\"1.5\""});
  ExpectError(ParseError("a,y\n1,cat\n"), StatusCode::kCorruption, {"line 2", "\"cat\""});
  ExpectError(ParseError("a,y\n1,100000\n"), StatusCode::kCorruption, {"line 2", "remap"});
  ExpectError(ParseError("a,y\n1,0\n1,3\n", Label("y", 3)), StatusCode::kCorruption,
              {"line 3", "num_classes 3"});
}

TEST(CsvReaderTest, EmptyFileAndHeaderOnly) {
  ExpectError(ParseError(""), StatusCode::kCorruption, {"site.csv", "no header"});
  ExpectError(ParseError("a,y\n"), StatusCode::kCorruption, {"site.csv", "no data rows"});
  ExpectError(ParseError("a,y\r\n\r\n"), StatusCode::kCorruption, {"no data rows"});
}

TEST(CsvReaderTest, HeaderProblems) {
  ExpectError(ParseError("a,b,a,y\n1,2,3,0\n"), StatusCode::kCorruption,
              {"line 1", "\"a\"", "twice", "columns 1 and 3"});
  ExpectError(ParseError("a,,y\n1,2,0\n"), StatusCode::kCorruption, {"line 1", "column 2"});
  ExpectError(ParseError("y\n0\n"), StatusCode::kCorruption, {"feature column"});
}

TEST(CsvReaderTest, UnknownLabelColumnListsAvailableColumns) {
  ExpectError(ParseError("age,income,target\n1,2,0\n", Label("label")),
              StatusCode::kInvalidArgument,
              {"\"label\"", "available columns: age, income, target"});
}

TEST(CsvReaderTest, QuotedFieldsAreNotSupported) {
  ExpectError(ParseError("a,y\n\"1\",0\n"), StatusCode::kCorruption,
              {"line 2", "quoted fields are not supported"});
  ExpectError(ParseError("\"a\",y\n1,0\n"), StatusCode::kCorruption,
              {"line 1", "quoted fields are not supported"});
}

TEST(CsvReaderTest, BadOptionsAreInvalidArgument) {
  EXPECT_EQ(ParseError("a,y\n1,0\n", Label("")).code(), StatusCode::kInvalidArgument);
  CsvOptions o = Label("y");
  o.delimiter = '"';
  EXPECT_EQ(ParseError("a,y\n1,0\n", o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseError("a,y\n1,0\n", Label("y", -1)).code(), StatusCode::kInvalidArgument);
}

TEST(CsvReaderTest, ReadCsvFromFile) {
  std::string tmpl = ::testing::TempDir() + "/csv_reader_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/bank.csv";
  {
    std::ofstream out(path, std::ios::binary);
    out << "balance,default\n100.5,0\n-3,1\n";
  }
  Result<Dataset> ds = ReadCsv(path, Label("default"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, (std::vector<float>{100.5f, -3.0f}));
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ds->num_classes, 2);

  {
    std::ofstream out(path, std::ios::binary);
    out << "balance,default\n100.5,0\nx,1\n";
  }
  ExpectError(ReadCsv(path, Label("default")).status(), StatusCode::kCorruption,
              {path + " line 3"});
  ExpectError(ReadCsv(dir + "/none.csv", Label("default")).status(), StatusCode::kNotFound,
              {dir + "/none.csv"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fedmesh
