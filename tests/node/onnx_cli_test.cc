// ONNX models through the real binaries (issue 18): fedmesh-node --local-only --model
// FILE.onnx trains and --save-model writes ONNX and .npz back out (the ONNX scores what
// fedmesh printed); bad model files (truncated, an unsupported op, NaN weights, a tensor
// claiming 2 GiB, an input shape the data does not fit) exit with code 2 and a sentence
// naming the problem, in fedmesh-node, fedmesh-model and fedmesh-aggregator alike.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/backend.h"
#include "core/data/fashion_mnist.h"
#include "core/env.h"
#include "core/graph/graph_model.h"
#include "core/model.h"
#include "core/npz.h"
#include "core/onnx/onnx_reader.h"
#include "core/onnx/onnx_writer.h"
#include "core/trainer.h"
#include "onnx/onnx_pb.h"
#include "storage/aggregator_store.h"
#include "storage/node_store.h"
#include "tests/node/process_harness.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
const std::string kBin = FEDMESH_BINARY_DIR "/bin/";
const std::string kFixtures = std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/";

using ProcessResult = fedmesh::testing::ShellResult;
ProcessResult Exec(const std::string& cmd) { return fedmesh::testing::RunShell(cmd); }

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

class OnnxCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("fedmesh_onnx_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // A bad file from the resnet fixture, edited as a ModelProto.
  fs::path Edited(const std::string& name, const std::function<void(::onnx::ModelProto&)>& edit) {
    ::onnx::ModelProto m;
    EXPECT_TRUE(m.ParseFromString(Slurp(kFixtures + "resnet_bn/model_train.onnx")));
    edit(m);
    const fs::path p = dir_ / name;
    Write(p, m.SerializeAsString());
    return p;
  }
  // Every binary that reads a model refuses `file` with exit code 2 and `what` in its words.
  void ExpectRefused(const fs::path& file, const std::string& what) {
    SCOPED_TRACE(file.filename().string());
    ProcessResult node = Exec(kBin + "fedmesh-node --local-only --threads 1 --epochs 1 --num-partitions 60 "
                    "--model " + file.string());
    EXPECT_EQ(node.exit_code, 2) << node.output;
    EXPECT_NE(node.output.find(what), std::string::npos) << node.output;
    ProcessResult inspect = Exec(kBin + "fedmesh-model inspect " + file.string());
    EXPECT_EQ(inspect.exit_code, 2) << inspect.output;
    EXPECT_NE(inspect.output.find(what), std::string::npos) << inspect.output;
  }
  fs::path dir_;
};

TEST_F(OnnxCli, TruncatedFileIsRefused) {
  const std::string bytes = Slurp(kFixtures + "resnet_bn/model_train.onnx");
  const fs::path p = dir_ / "truncated.onnx";
  Write(p, bytes.substr(0, bytes.size() / 2));
  ExpectRefused(p, "not a valid ONNX model");
  // The aggregator refuses it at config load, naming the key.
  ProcessResult agg = Exec(kBin + "fedmesh-aggregator --config " + FEDMESH_SOURCE_DIR +
                 "/examples/fashion-mnist/aggregator.toml --set model.onnx=" + p.string());
  EXPECT_EQ(agg.exit_code, 2) << agg.output;
  EXPECT_NE(agg.output.find("[model] onnx"), std::string::npos) << agg.output;
  EXPECT_NE(agg.output.find("not a valid ONNX model"), std::string::npos) << agg.output;
}

TEST_F(OnnxCli, UnsupportedOpIsNamedWithTheNode) {
  const fs::path p = Edited("hardswish.onnx", [](::onnx::ModelProto& m) {
    for (auto& n : *m.mutable_graph()->mutable_node())
      if (n.op_type() == "Relu") {
        n.set_op_type("HardSwish");
        break;
      }
  });
  ExpectRefused(p, "op type 'HardSwish' is not supported");
}

TEST_F(OnnxCli, NanWeightsAreRefused) {
  const fs::path p = Edited("nan.onnx", [](::onnx::ModelProto& m) {
    auto* t = m.mutable_graph()->mutable_initializer(0);
    std::string raw = t->raw_data();
    const float nan = NAN;
    std::memcpy(raw.data() + 4, &nan, 4);
    t->set_raw_data(raw);
  });
  ExpectRefused(p, "holds a non-finite value");
}

TEST_F(OnnxCli, TensorClaimingTwoGibibytesIsRefused) {
  const fs::path p = Edited("huge.onnx", [](::onnx::ModelProto& m) {
    auto* t = m.mutable_graph()->mutable_initializer(0);
    t->clear_dims();
    t->add_dims(int64_t{1} << 29);  // 2 GiB of float32 claimed, 288 bytes held
  });
  ExpectRefused(p, "claims 536870912 elements");
}

TEST_F(OnnxCli, InputShapeTheDataDoesNotFitIsRefused) {
  // The tabular model takes 20 features; Fashion-MNIST has 784 per sample.
  ProcessResult node = Exec(kBin + "fedmesh-node --local-only --threads 1 --epochs 1 --num-partitions 60 "
                  "--model " + kFixtures + "tabular_mlp/model_train.onnx");
  EXPECT_EQ(node.exit_code, 2) << node.output;
  EXPECT_NE(node.output.find("expects [20]"), std::string::npos) << node.output;
}

// Import, train one epoch, export: the exported ONNX and .npz hold the trained model, and
// the exported ONNX, read back, scores exactly the test accuracy fedmesh printed.
TEST_F(OnnxCli, TrainsAnImportedModelAndSavesItBack) {
  if (!LoadFashionMnist(DataSplit::kTest).ok()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const fs::path metrics = dir_ / "m.jsonl", onnx_out = dir_ / "trained.onnx",
                 npz_out = dir_ / "trained.npz";
  const std::string common = kBin + "fedmesh-node --local-only --threads 2 --epochs 1 "
                             "--num-partitions 6 --batch 32 --lr 0.05 --momentum 0.9 --model " +
                             kFixtures + "resnet_bn/model_train.onnx ";
  ProcessResult r = Exec(common + "--metrics " + metrics.string() + " --save-model " + onnx_out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ProcessResult r2 = Exec(common + "--save-model " + npz_out.string());
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const std::string line = Slurp(metrics);
  const size_t at = line.find("\"test_accuracy\":");
  ASSERT_NE(at, std::string::npos) << line;
  const double printed = std::atof(line.c_str() + at + 16);
  EXPECT_GT(printed, 0.6);

  auto g = onnx::ReadOnnxFile(onnx_out.string());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->opset, 17);
  for (const auto& n : g->nodes)
    if (n.op_type == "BatchNormalization") {
      EXPECT_EQ(n.outputs.size(), 1u);
    }
  auto backend = MakeCpuBackend(2);
  auto model = Model::CreateFromGraph("exported", backend.get(), std::move(*g));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  SystemEnv env(1);
  Trainer trainer(model->get(), TrainerOptions{}, &env);
  auto ev = trainer.Evaluate(LoadFashionMnist(DataSplit::kTest).value());
  ASSERT_TRUE(ev.ok());
  EXPECT_NEAR(ev->accuracy, printed, 1e-4);

  // Same seed, same run: the .npz holds the same trained tensors, by name.
  auto arrays = ReadNpzFile(npz_out.string());
  ASSERT_TRUE(arrays.ok()) << arrays.status().ToString();
  ASSERT_EQ(arrays->size(), 28u);  // 20 parameters + 8 running statistics
  const graph::GraphModel& gm = *(*model)->graph_model();
  for (const NpzArray& a : *arrays) {
    bool found = false;
    for (const auto* slots : {&gm.param_slots(), &gm.state_slots()})
      for (const auto& s : *slots)
        if (s.name == a.name) {
          found = true;
          ASSERT_EQ(a.f.size(), s.size) << a.name;
          EXPECT_EQ(a.dims, s.dims) << a.name;
          for (size_t i = 0; i < s.size; ++i)
            ASSERT_EQ(a.f[i], gm.params()[s.offset + i]) << a.name << "[" << i << "]";
        }
    EXPECT_TRUE(found) << a.name;
  }
}

// The built-in mlp, trained with the layer code, saves as ONNX too and scores the same.
TEST_F(OnnxCli, BuiltinModelSavesAsOnnx) {
  if (!LoadFashionMnist(DataSplit::kTest).ok()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const fs::path metrics = dir_ / "mlp.jsonl", out = dir_ / "mlp.onnx";
  ProcessResult r = Exec(kBin + "fedmesh-node --local-only --threads 2 --epochs 1 --num-partitions 10 "
                         "--model mlp --hidden 64 --metrics " + metrics.string() +
                         " --save-model " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string line = Slurp(metrics);
  const double printed = std::atof(line.c_str() + line.find("\"test_accuracy\":") + 16);
  auto g = onnx::ReadOnnxFile(out.string());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto backend = MakeCpuBackend(1);
  auto model = Model::CreateFromGraph("mlp", backend.get(), std::move(*g));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  SystemEnv env(1);
  Trainer trainer(model->get(), TrainerOptions{}, &env);
  auto ev = trainer.Evaluate(LoadFashionMnist(DataSplit::kTest).value());
  ASSERT_TRUE(ev.ok());
  EXPECT_NEAR(ev->accuracy, printed, 1e-4);
}

// fedmesh-model export opens its store read-only: a missing --db is refused, not created;
// a file that is not a fedmesh store is named and left as it was (it used to become an
// SQLite database); aggregator and node stores export and stay byte for byte the same.
TEST_F(OnnxCli, ExportNeverCreatesOrChangesItsStore) {
  const std::string out = " --out " + (dir_ / "x.npz").string();
  const fs::path missing = dir_ / "nope.db";
  ProcessResult r = Exec(kBin + "fedmesh-model export --db " + missing.string() + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--db " + missing.string() + " does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(missing));

  const fs::path empty = dir_ / "empty.toml";
  Write(empty, "");
  r = Exec(kBin + "fedmesh-model export --db " + empty.string() + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--db " + empty.string() + " is not a fedmesh store"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is an empty database"), std::string::npos) << r.output;
  const fs::path text = dir_ / "notes.txt";
  Write(text, "not a database at all, but long enough to fill SQLite's 100-byte header check......"
              "..................................................................................");
  const std::string text_before = Slurp(text);
  r = Exec(kBin + "fedmesh-model export --db " + text.string() + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--db " + text.string() + " is not a fedmesh store"), std::string::npos) << r.output;
  EXPECT_EQ(Slurp(text), text_before);
  EXPECT_EQ(fs::file_size(empty), 0u);
  EXPECT_FALSE(fs::exists(dir_ / "x.npz"));

  // "%20" in the name is taken as written (no URI decoding).
  const fs::path agg_db = dir_ / "agg%20store.db", node_db = dir_ / "node.db";
  const std::vector<float> global = {0.5f, -1.25f, 3.0f}, local = {7.0f, 8.0f};
  {
    auto agg = AggregatorStore::Open(agg_db.string());
    ASSERT_TRUE(agg.ok()) << agg.status().ToString();
    ASSERT_TRUE((*agg)->SaveModel(1, global).ok());
    auto node = NodeStore::Open(node_db.string());
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    NodeCheckpoint cp;
    cp.model_version = 1;
    cp.model = local;
    ASSERT_TRUE((*node)->SaveCheckpoint(cp).ok());
  }
  for (const auto& [db, want] : {std::pair{agg_db, global}, std::pair{node_db, local}}) {
    SCOPED_TRACE(db.string());
    const std::string before = Slurp(db);
    const fs::path npz = dir_ / (db.stem().string() + ".npz");
    r = Exec(kBin + "fedmesh-model export --db " + db.string() + " --out " + npz.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto arrays = ReadNpzFile(npz.string());
    ASSERT_TRUE(arrays.ok()) << arrays.status().ToString();
    ASSERT_EQ(arrays->size(), 1u);
    EXPECT_EQ((*arrays)[0].f, want);
    EXPECT_EQ(Slurp(db), before);
    EXPECT_FALSE(fs::exists(db.string() + "-wal"));
    EXPECT_FALSE(fs::exists(db.string() + "-shm"));
  }
  // The node store is refused as an aggregator's with --round, naming the file as given.
  r = Exec(kBin + "fedmesh-model export --db " + node_db.string() + " --round 1" + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--round and --best are for aggregator stores"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fedmesh
