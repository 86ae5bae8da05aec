// Site data through the real fedmesh-node binary (issue 19): a CSV with text categories,
// text labels and missing cells, a regression CSV, and an .npz dataset train locally to
// the accuracy / R2 their construction allows; malformed files (text in a number column,
// a ragged row, an empty file, a label with one class, wrong npz keys, a corrupt PNG) exit
// with code 2 and a message naming the file, line and column.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/npz.h"
#include "core/rng.h"
#include "tests/node/process_harness.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
const std::string kNode = FEDMESH_BINARY_DIR "/bin/fedmesh-node";

using ProcessResult = fedmesh::testing::ShellResult;
ProcessResult Exec(const std::string& cmd) { return fedmesh::testing::RunShell(cmd); }

// The value of "key": NUMBER in the last line of a metrics file, or NaN.
double LastMetric(const fs::path& metrics, const std::string& key) {
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  const size_t at = last.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  return std::stod(last.substr(at + key.size() + 3));
}

class DataCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("fedmesh_data_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  ProcessResult Node(const std::string& args) {
    return Exec(kNode + " --local-only --threads 1 --metrics " + (dir_ / "m.jsonl").string() +
                " " + args);
  }
  void ExpectExit2(const std::string& args, const std::vector<std::string>& fragments) {
    const ProcessResult r = Node(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    for (const std::string& f : fragments)
      EXPECT_NE(r.output.find(f), std::string::npos) << "output lacks \"" << f << "\":\n" << r.output;
  }
  fs::path dir_;
};

// A bank-like table: the label is "bad" exactly when purpose is "car" and amount > 0.5, or
// purpose is "cash"; categories are text, labels are text, a few cells are missing.
std::string BankCsv(int rows, uint64_t seed) {
  Rng rng(seed);
  const char* purposes[] = {"car", "furniture", "cash", "education"};
  std::ostringstream out;
  out << "id,purpose,amount,age,risk\n";
  for (int i = 0; i < rows; ++i) {
    const std::string purpose = purposes[rng.UniformInt(4)];
    const double amount = rng.Uniform(0, 1), age = rng.Uniform(0, 1);
    const bool bad = purpose == "cash" || (purpose == "car" && amount > 0.5);
    out << i << "," << purpose << "," << amount << "," << (i % 37 == 5 ? "NA" : std::to_string(age))
        << "," << (bad ? "bad" : "good") << "\n";
  }
  return out.str();
}

TEST_F(DataCli, CategoricalCsvWithTextLabelsAndMissingCellsTrains) {
  const std::string train = Write("bank/train.csv", BankCsv(1500, 1));
  const std::string test = Write("bank/test.csv", BankCsv(400, 2));
  const std::string common = " --data csv:" + train + " --test-data csv:" + test +
                             " --label-column risk --label-values good,bad"
                             " --features purpose,amount,age --categorical purpose --model mlp"
                             " --hidden 16 --epochs 15 --lr 0.1 --momentum 0.9";
  // Missing cells are an error by default, naming the file, line and column.
  ExpectExit2(common, {train, "line 7", "column \"age\"", "missing", "drop"});
  const ProcessResult r = Node(common + " --missing drop");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(LastMetric(dir_ / "m.jsonl", "test_accuracy"), 0.95) << r.output;
  EXPECT_GE(LastMetric(dir_ / "m.jsonl", "test_auc"), 0.97) << r.output;
}

// --missing impute_mean alone: missing numbers become this site's training means (the
// train file has 1500 / 37 rounded up = 41 of them, the test file 11).
TEST_F(DataCli, ImputeMeanLocallyUsesTheSitesOwnMeans) {
  const std::string train = Write("bank/train.csv", BankCsv(1500, 1));
  const std::string test = Write("bank/test.csv", BankCsv(400, 2));
  const ProcessResult r = Node(" --data csv:" + train + " --test-data csv:" + test +
                               " --label-column risk --label-values good,bad"
                               " --features purpose,amount,age --categorical purpose --model mlp"
                               " --hidden 16 --epochs 15 --lr 0.1 --momentum 0.9 --missing impute_mean");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("imputed 52 missing cells with this site's training means"), std::string::npos)
      << r.output;
  EXPECT_GE(LastMetric(dir_ / "m.jsonl", "test_accuracy"), 0.95) << r.output;
}

// A column missing in every training row has no mean to impute: exit 2 naming the file and
// the column (before, it was filled with 0 and trained on).
TEST_F(DataCli, ImputeMeanRefusesAColumnWithNoValueAtAll) {
  std::string csv = "amount,age,risk\n";
  for (int i = 0; i < 60; ++i) csv += std::to_string(i % 7) + ",NA," + (i % 3 ? "good" : "bad") + "\n";
  const std::string train = Write("bank/empty_age.csv", csv);
  ExpectExit2(" --data csv:" + train + " --label-column risk --label-values good,bad"
              " --features amount,age --model logreg --epochs 1 --missing impute_mean",
              {train, "feature 'age' is missing in all", "impute_mean"});
}

// Without --test-data the site holds out 20% of its rows per class (--test-fraction) and
// scores on them; with --test-fraction 0 there is nothing to score on: exit 2.
TEST_F(DataCli, HeldOutRowsAreTheTestSetWithoutTestData) {
  const std::string train = Write("bank/all.csv", BankCsv(1500, 5));
  const std::string common = " --data csv:" + train +
                             " --label-column risk --label-values good,bad --missing drop"
                             " --features purpose,amount,age --categorical purpose --model mlp"
                             " --hidden 16 --epochs 15 --lr 0.1 --momentum 0.9";
  const ProcessResult r = Node(common);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(LastMetric(dir_ / "m.jsonl", "test_accuracy"), 0.95) << r.output;
  // 1500 rows less the dropped ones (every 37th has a missing age), 80/20.
  const double trained = LastMetric(dir_ / "m.jsonl", "train_samples");
  EXPECT_GT(trained, 0.79 * 1459) << r.output;
  EXPECT_LT(trained, 0.81 * 1459) << r.output;
  ExpectExit2(common + " --test-fraction 0", {"no test split", "--test-fraction"});
}

TEST_F(DataCli, RegressionCsvTrainsWithMse) {
  Rng rng(3);
  auto table = [&](int rows) {
    std::ostringstream out;
    out << "a,b,target\n";
    for (int i = 0; i < rows; ++i) {
      const double a = rng.Uniform(-1, 1), b = rng.Uniform(-1, 1);
      out << a << "," << b << "," << 2 * a - b + 0.05 * rng.Uniform(-1, 1) << "\n";
    }
    return out.str();
  };
  const std::string train = Write("train.csv", table(800)), test = Write("test.csv", table(200));
  const ProcessResult r = Node("--data csv:" + train + " --test-data csv:" + test +
                               " --label-column target --regression --num-classes 1 --loss mse"
                               " --model logreg --epochs 10 --lr 0.05");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(LastMetric(dir_ / "m.jsonl", "test_r2"), 0.99) << r.output;
  EXPECT_LE(LastMetric(dir_ / "m.jsonl", "test_rmse"), 0.1) << r.output;
}

TEST_F(DataCli, NpzDatasetTrains) {
  // Two Gaussian blobs in 4-D.
  Rng rng(4);
  auto blobs = [&](const std::string& name, int n) {
    NpzArray x{"x", graph::DType::kFloat32, {n, 4}, {}, {}};
    NpzArray y{"y", graph::DType::kInt64, {n}, {}, {}};
    for (int i = 0; i < n; ++i) {
      const int label = i % 2;
      for (int f = 0; f < 4; ++f) x.f.push_back(float((label ? 1.0 : -1.0) + 0.7 * rng.Normal()));
      y.i.push_back(label);
    }
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(WriteNpzFile(path, {x, y}).ok());
    return path;
  };
  const std::string train = blobs("train.npz", 600), test = blobs("test.npz", 200);
  const ProcessResult r = Node("--data npz:" + train + " --test-data npz:" + test +
                               " --model logreg --epochs 5 --lr 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(LastMetric(dir_ / "m.jsonl", "test_accuracy"), 0.95) << r.output;
}

// A learning rate that makes the model diverge: the run stops in the first epoch with one
// sentence naming the learning rate, and no model file is written (before, the run ended
// with exit 0, NaN metrics and a saved model no reader would load; with a binary label the
// AUC's tie loop then never ended on NaN scores and the run hung).
TEST_F(DataCli, ADivergedRunStopsAndWritesNoModel) {
  Rng rng(5);
  std::ostringstream table;
  table << "a,b,y\n";
  for (int i = 0; i < 200; ++i) table << rng.Uniform(-1, 1) << "," << rng.Uniform(-1, 1) << "," << i % 2 << "\n";
  const std::string csv = Write("div.csv", table.str());
  const fs::path out = dir_ / "diverged.onnx";
  const ProcessResult r = Node("--data csv:" + csv + " --label-column y --model logreg --epochs 3 --lr 3e38"
                               " --save-model " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training diverged in epoch 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lr 3e+38"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("epoch 2/3"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(DataCli, MalformedDataExitsWithCode2NamingTheProblem) {
  const std::string good = Write("good.csv", "a,b,y\n1,2,0\n3,4,1\n");
  const std::string text = Write("text.csv", "a,b,y\n1,2,0\n3,four,1\n");
  ExpectExit2("--data csv:" + text + " --test-data csv:" + good + " --label-column y",
              {text, "line 3", "\"four\"", "column \"b\""});
  const std::string ragged = Write("ragged.csv", "a,b,y\n1,2,0\n3,1\n");
  ExpectExit2("--data csv:" + ragged + " --test-data csv:" + good + " --label-column y",
              {ragged, "line 3", "expected 3 fields"});
  const std::string empty = Write("empty.csv", "");
  ExpectExit2("--data csv:" + empty + " --test-data csv:" + good + " --label-column y",
              {empty, "no header"});
  ExpectExit2("--data csv:" + good + " --test-data csv:" + good + " --label-column label",
              {"label column \"label\"", "available columns: a, b, y"});
  const std::string one = Write("one.csv", "a,b,y\n1,2,1\n3,4,1\n");
  ExpectExit2("--data csv:" + one + " --test-data csv:" + good + " --label-column y",
              {one, "single class"});
  const std::string keys = (dir_ / "keys.npz").string();
  ASSERT_TRUE(WriteNpzFile(keys, {NpzArray{"data", graph::DType::kFloat32, {1, 1}, {1.0f}, {}}}).ok());
  ExpectExit2("--data npz:" + keys + " --test-data npz:" + keys, {keys, "arrays named x and y"});
  // A corrupt PNG among the images of a class.
  Write("img/cat/a.png", "\x89PNG\r\n\x1a\n this is not the rest of a PNG");
  Write("img/dog/b.png", "");
  const std::string img = (dir_ / "img").string();
  ExpectExit2("--data images:" + img + " --test-data images:" + img, {"a.png"});
  ExpectExit2("--data parquet:x.parquet", {"unknown data source", "npz:PATH"});
}

}  // namespace
}  // namespace fedmesh
