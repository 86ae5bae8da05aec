// fedmesh-node --local-only as a user runs it: the real binary, real Fashion-MNIST.
// Bad input must exit non-zero (2) with one clear sentence; good input must learn.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/data/fashion_mnist.h"
#include "tests/node/process_harness.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;

using RunResult = fedmesh::testing::ShellResult;

RunResult RunNode(const std::string& args, const std::string& env = "") {
  return fedmesh::testing::RunShell(env + " " FEDMESH_BINARY_DIR "/bin/fedmesh-node " + args);
}

fs::path TempDir(const std::string& name) {
  fs::path d = fs::path(::testing::TempDir()) / ("fedmesh_node_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

bool HaveFashionMnist() { return LoadFashionMnist(DataSplit::kTest).ok(); }

// The value of "key" in the last JSON line of a metrics file (-1 when absent).
double LastMetric(const fs::path& file, const std::string& key) {
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line)) if (!line.empty()) last = line;
  const std::string pat = "\"" + key + "\":";
  const size_t at = last.find(pat);
  if (at == std::string::npos) return -1;
  return std::atof(last.c_str() + at + pat.size());
}

const char* kLocal = "--local-only --threads 1 ";

TEST(FedmeshNodeCli, HelpListsTheFlags) {
  auto r = RunNode("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--local-only", "--model", "--data", "--partition", "--alpha",
                           "--num-partitions", "--index", "--epochs", "--batch", "--lr",
                           "--momentum", "--threads", "--seed", "--metrics"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  }
}

TEST(FedmeshNodeCli, UnknownModelIsRejected) {
  auto r = RunNode(std::string(kLocal) + "--model resnet");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown model 'resnet'; known models: logreg, mlp, cnn"), std::string::npos) << r.output;
}

TEST(FedmeshNodeCli, UnknownEngineIsRejected) {
  auto r = RunNode(std::string(kLocal) + "--model cnn --engine graphs");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--engine: engine 'graphs' is not one of auto, graph, layers"), std::string::npos)
      << r.output;
}

TEST(FedmeshNodeCli, NegativeLearningRateIsRejected) {
  auto r = RunNode(std::string(kLocal) + "--lr -0.1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("learning rate must be a positive number"), std::string::npos) << r.output;
}

TEST(FedmeshNodeCli, IndexOutsidePartitionsIsRejected) {
  auto r = RunNode(std::string(kLocal) + "--num-partitions 4 --index 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("index 4 is outside [0, 4)"), std::string::npos) << r.output;
}

TEST(FedmeshNodeCli, MissingDatasetSaysHowToInstallIt) {
  auto r = RunNode(std::string(kLocal), "FEDMESH_DATA_DIR=/nonexistent/fmnist");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("Fashion-MNIST not found"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dataset-fashion-mnist"), std::string::npos) << r.output;
}

TEST(FedmeshNodeCli, CorruptIdxHeaderIsRejected) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  const fs::path d = TempDir("corrupt");
  const fs::path src = "/usr/share/datasets/fashion-mnist";
  for (const char* f : {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    fs::copy_file(src / f, d / f);
  }
  // A plain (uncompressed) file whose magic number is wrong.
  std::ofstream(d / "train-images-idx3-ubyte.gz", std::ios::binary) << std::string("\x00\x00\x08\x09garbage", 11);
  auto r = RunNode(std::string(kLocal), "FEDMESH_DATA_DIR=" + d.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("train-images-idx3-ubyte.gz"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("IDX file"), std::string::npos) << r.output;
}

// Errors and log lines go to stderr (as fedmesh-aggregator's): stdout stays empty.
TEST(FedmeshNodeCli, ErrorsAndLogsGoToStderr) {
  const std::string bin = FEDMESH_BINARY_DIR "/bin/fedmesh-node";
  for (const std::string args : {"--config /nonexistent/node.toml", "--epochs 1",
                                 "--local-only --model nosuch"}) {
    const RunResult out = fedmesh::testing::RunShell("sh -c '" + bin + " " + args + " 2>/dev/null'");
    EXPECT_EQ(out.exit_code, 2) << args;
    EXPECT_EQ(out.output, "") << args << ": stdout has " << out.output;
    const RunResult err = fedmesh::testing::RunShell("sh -c '" + bin + " " + args + " >/dev/null'");
    EXPECT_EQ(err.exit_code, 2) << args;
    EXPECT_NE(err.output.find("error"), std::string::npos) << args << ": stderr has " << err.output;
  }
}

TEST(FedmeshNodeCli, BadFlagsAndMissingModeAreRejected) {
  EXPECT_EQ(RunNode("--local-only --no-such-flag").exit_code, 2);
  EXPECT_EQ(RunNode("--local-only --epochs abc").exit_code, 2);
  auto r = RunNode("--epochs 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--local-only"), std::string::npos) << r.output;
  r = RunNode(std::string(kLocal) + "--hidden 256,x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--hidden"), std::string::npos) << r.output;
  r = RunNode(std::string(kLocal) + "--partition zipf --num-partitions 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("zipf"), std::string::npos) << r.output;
}

TEST(FedmeshNodeCli, MetricsFileThatCannotBeWrittenIsRejected) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
  auto r = RunNode(std::string(kLocal) + "--model logreg --metrics /nonexistent/dir/m.jsonl");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cannot open metrics file"), std::string::npos) << r.output;
}

// Acceptance: mlp, 3 epochs, batch 32, lr 0.01, momentum 0.9 reaches >= 0.85.
TEST(FedmeshNodeCli, MlpReachesAccuracyTarget) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const fs::path m = TempDir("mlp") / "metrics.jsonl";
  auto r = RunNode(std::string(kLocal) + "--model mlp --data fashion-mnist --epochs 3 --batch 32 "
                   "--lr 0.01 --momentum 0.9 --metrics " + m.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 3/3"), std::string::npos);
  EXPECT_GE(LastMetric(m, "test_accuracy"), 0.85);
  EXPECT_GT(LastMetric(m, "test_loss"), 0.0);
  EXPECT_GT(LastMetric(m, "samples_per_s"), 0.0);
  EXPECT_EQ(LastMetric(m, "epochs"), 3);
}

// Acceptance: cnn, 2 epochs reaches >= 0.89 (the slowest test: about a minute or two).
TEST(FedmeshNodeCli, CnnReachesAccuracyTarget) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const fs::path m = TempDir("cnn") / "metrics.jsonl";
  auto r = RunNode("--local-only --threads 2 --model cnn --data fashion-mnist --epochs 2 --batch 32 "
                   "--lr 0.01 --momentum 0.9 --metrics " + m.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(LastMetric(m, "test_accuracy"), 0.89);
  EXPECT_EQ(LastMetric(m, "epochs"), 2);
}

// A node trains on its own Dirichlet share only.
TEST(FedmeshNodeCli, PartitionedNodeTrainsOnItsShareOnly) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const fs::path m = TempDir("part") / "metrics.jsonl";
  auto r = RunNode(std::string(kLocal) + "--model logreg --partition dirichlet --alpha 0.1 "
                   "--num-partitions 10 --index 3 --epochs 1 --metrics " + m.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double n = LastMetric(m, "train_samples");
  EXPECT_GT(n, 0);
  EXPECT_LT(n, 60000);
  // Label skew: a local model trained on a few classes is far from the IID result.
  EXPECT_LT(LastMetric(m, "test_accuracy"), 0.8);
}



// Issue 27's acceptance: the Fashion-MNIST mlp under local DP-SGD at epsilon <= 3
// (delta 1e-5) reaches >= 0.80 test accuracy. batch 256 (q = 0.0043), noise multiplier 1.0,
// clip 1, lr 1.0 without momentum: 0.8245 at epsilon 1.56 after 15 epochs on cpu-2c; 8
// epochs here to keep CI short (epsilon about 1.2).
TEST(FedmeshNodeCliDpSgd, FashionMnistMlpAtEpsilonBelowThreeReachesEightyPercent) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const fs::path m = TempDir("dpsgd") / "metrics.jsonl";
  auto r = RunNode("--local-only --model mlp --epochs 8 --batch 256 --lr 1.0 --metrics " +
                   m.string() + " --set privacy.mode=dp-sgd --set privacy.clip=1 "
                   "--set privacy.noise_multiplier=1.0 --set privacy.delta=1e-5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double eps = LastMetric(m, "epsilon");
  EXPECT_GT(eps, 0.5);
  EXPECT_LE(eps, 3.0);
  EXPECT_EQ(LastMetric(m, "dp_steps"), 8 * 235);  // ceil(60000 / 256) per epoch
  EXPECT_GE(LastMetric(m, "test_accuracy"), 0.80);
  EXPECT_NE(r.output.find("privacy: dp-sgd, epsilon"), std::string::npos) << r.output;
}

TEST(FedmeshNodeCliDpSgd, TheBudgetStopsTrainingBeforeItIsExceeded) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const fs::path m = TempDir("dpsgd_budget") / "metrics.jsonl";
  // One epoch at batch 256 spends 0.926, two 0.985: a budget of 0.95 allows one, not two.
  auto r = RunNode("--local-only --threads 1 --model logreg --epochs 5 --batch 256 --lr 1.0 --metrics " +
                   m.string() + " --set privacy.mode=dp-sgd --set privacy.epsilon_budget=0.95");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 2 not started: privacy budget"), std::string::npos) << r.output;
  EXPECT_EQ(LastMetric(m, "epoch"), 1);
  EXPECT_LE(LastMetric(m, "epsilon"), 0.95);
}

TEST(FedmeshNodeCliDpSgd, BadPrivacySettingsExitTwoNamingTheKey) {
  auto r = RunNode(std::string(kLocal) + "--set privacy.mode=dp");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("[privacy] mode"), std::string::npos) << r.output;
  r = RunNode(std::string(kLocal) + "--set privacy.clip=0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("[privacy] clip"), std::string::npos) << r.output;
  r = RunNode(std::string(kLocal) + "--set privacy.delta=2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("[privacy] delta"), std::string::npos) << r.output;
  r = RunNode(std::string(kLocal) + "--set train.lr=0.1");  // has a flag: --lr
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("[privacy]"), std::string::npos) << r.output;
  // BatchNorm mixes a batch's examples: refused before any training, naming the node.
  r = RunNode(std::string(kLocal) + "--model " + FEDMESH_SOURCE_DIR +
              "/tests/fixtures/onnx/resnet_bn/model_train.onnx --set privacy.mode=dp-sgd");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("has BatchNormalization (node '/bn1/BatchNormalization')"),
            std::string::npos) << r.output;
}

TEST(FedmeshNodeCli, BadProgressModeExitsTwo) {
  auto r = RunNode("--config node.toml --progress sometimes");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--progress must be auto, always or never, not \"sometimes\""),
            std::string::npos) << r.output;
}

}  // namespace
}  // namespace fedmesh
