// examples/breast_cancer/split.sh (issue 19): the 569 patients of the Wisconsin data go to
// five hospitals, all of them once; MALIGNANT_SHARES sets the case mix (run.sh's gives the
// small clinic 3 malignant cases in 44 patients), and shares that are not five numbers from
// 0 to 1 adding up to 1 exit 2 saying which, before any file is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/node/process_harness.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using fedmesh::testing::ReadWholeFile;
using fedmesh::testing::RunShell;
using fedmesh::testing::SplitLines;

constexpr char kCsv[] = "/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv";

class BreastCancerSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kCsv)) GTEST_SKIP() << "no breast cancer CSV (apt-get install python3-sklearn)";
    dir_ = fs::temp_directory_path() / ("fedmesh-bc-split-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fedmesh::testing::ShellResult Split(const std::string& shares) {
    return RunShell("MALIGNANT_SHARES='" + shares + "' bash " + std::string(FEDMESH_SOURCE_DIR) +
                    "/examples/breast_cancer/split.sh " + dir_.string());
  }
  // Patients and malignant cases in hospital-h.csv.
  std::pair<int, int> Count(int h) {
    const auto lines = SplitLines(ReadWholeFile(dir_ / ("hospital-" + std::to_string(h) + ".csv")));
    int patients = 0, malignant = 0;
    for (size_t i = 1; i < lines.size(); ++i) {
      ++patients;
      if (lines[i].ends_with(",malignant")) ++malignant;
    }
    return {patients, malignant};
  }
  fs::path dir_;
};

TEST_F(BreastCancerSplitTest, EveryPatientGoesToOneHospitalWithTheCaseMixAsked) {
  for (const std::string& shares : {std::string(""), std::string("0.47 0.25 0.15 0.115 0.015")}) {
    SCOPED_TRACE("MALIGNANT_SHARES='" + shares + "'");
    fs::remove_all(dir_);
    const auto r = Split(shares);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    int patients = 0, malignant = 0;
    for (int h = 1; h <= 5; ++h) {
      const auto [p, m] = Count(h);
      patients += p;
      malignant += m;
    }
    EXPECT_EQ(patients, 569);
    EXPECT_EQ(malignant, 212);  // the data's 212 malignant, 357 benign
    if (!shares.empty()) {
      EXPECT_EQ(Count(5), std::make_pair(44, 3));  // run.sh's small clinic
    }
  }
}

TEST_F(BreastCancerSplitTest, BadSharesExitTwoSayingWhichBeforeWritingAnything) {
  const std::pair<std::string, std::string> cases[] = {
      {"0.5 0.5", "needs five shares"},
      {"0.5 0.5 0.5 0.5 0.5", "add up to 2.5, not 1"},
      {"a 0.25 0.15 0.115 0.015", "share 1 (\"a\") is not a number from 0 to 1"},
      {"0.47 0.25 0.15 -0.1 0.23", "share 4 (\"-0.1\") is not a number"},
  };
  for (const auto& [shares, message] : cases) {
    SCOPED_TRACE(shares);
    const auto r = Split(shares);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "hospital-1.csv"));
  }
}

}  // namespace
}  // namespace fedmesh
