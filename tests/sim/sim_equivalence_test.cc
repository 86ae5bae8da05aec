// Issue 6 acceptance: the simulator runs the real protocol code. A 4-client aggregator run in
// fedmesh-sim and the same configuration run as real processes (fedmesh-aggregator + four
// fedmesh-node over CurveZMQ on loopback) end with the same global model, and the fedmesh-sim
// binary's command line (bad configs exit 2, --plot writes PNGs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>

#include "core/data/data_source.h"
#include "sim/simulation.h"
#include "tests/sim/sim_test_util.h"
#include "storage/aggregator_store.h"
#include "tests/node/process_harness.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using fedmesh::testing::ChildProcess;
using fedmesh::testing::ReadWholeFile;
using fedmesh::testing::RunToCompletion;
using fedmesh::testing::SplitLines;
using fedmesh::testing::WaitUntil;
using std::chrono::seconds;

const std::string kBin = FEDMESH_BINARY_DIR "/bin/";
const fs::path kExampleDir = fs::path(FEDMESH_SOURCE_DIR) / "examples" / "fashion-mnist";

class SimEquivalenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_DATA();
    dir_ = fs::path(::testing::TempDir()) /
           ("fedmesh_simeq_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
            "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "keys" / "allow");
    fs::create_directories(dir_ / "run");
    for (const auto& e : fs::directory_iterator(kExampleDir)) {
      if (e.path().extension() == ".toml") fs::copy_file(e.path(), dir_ / e.path().filename());
    }
  }
  void TearDown() override {
    for (auto& c : children_) c->Kill();
    if (HasFailure()) {
      for (auto& c : children_) std::cout << "==== " << c->name() << " ====\n" << c->Log() << "\n";
      std::cout << "(files kept in " << dir_.string() << ")\n";
    } else if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }
  int Run(const std::vector<std::string>& argv, const std::string& log) {
    auto rc = RunToCompletion(argv, dir_, dir_ / log, seconds(120));
    return rc.value_or(-1);
  }
  ChildProcess* Spawn(const std::string& name, const std::vector<std::string>& argv) {
    auto child = ChildProcess::Spawn(name, argv, dir_, dir_ / (name + ".log"),
                                     {{"OMP_WAIT_POLICY", "passive"}, {"OMP_NUM_THREADS", "1"}});
    if (!child) return nullptr;
    children_.push_back(std::move(child));
    return children_.back().get();
  }

  fs::path dir_;
  std::vector<std::unique_ptr<ChildProcess>> children_;
};

// Same seed (7) for the split, the model init and every node's training; node ids are the
// simulator's ("c0000000" ..); everything else as examples/fashion-mnist.
TEST_F(SimEquivalenceTest, SimulatorAndRealProcessesReachTheSameGlobalModel) {
  constexpr int kRounds = 3;
  constexpr uint64_t kSeed = 7;
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(SimClientId(i));
  ASSERT_EQ(Run({kBin + "fedmesh-keys", "gen", "--out", "keys/aggregator"}, "keygen.log"), 0);
  for (const std::string& id : ids) {
    ASSERT_EQ(Run({kBin + "fedmesh-keys", "gen", "--out", "keys/" + id}, "keygen.log"), 0);
    fs::copy_file(dir_ / "keys" / (id + ".pub"), dir_ / "keys" / "allow" / (id + ".pub"));
  }
  ChildProcess* agg = Spawn(
      "aggregator",
      {kBin + "fedmesh-aggregator", "--config", "aggregator.toml", "--set",
       "aggregator.listen=tcp://127.0.0.1:*", "--set", "rounds.total=" + std::to_string(kRounds),
       "--set", "rounds.min_available_clients=4", "--set", "rounds.min_clients=4", "--set",
       "model.seed=" + std::to_string(kSeed), "--set", "eval.dataset="});
  ASSERT_NE(agg, nullptr);
  static const std::regex kListening(R"(listening on (tcp://127\.0\.0\.1:[0-9]+)\n)");
  std::string endpoint;
  WaitUntil([&] {
    std::smatch m;
    const std::string log = agg->Log();
    if (std::regex_search(log, m, kListening)) endpoint = m[1];
    return !endpoint.empty() || !agg->Running();
  }, seconds(60));
  ASSERT_FALSE(endpoint.empty()) << agg->Log();
  for (int i = 0; i < 4; ++i) {
    const std::string& id = ids[i];
    ASSERT_NE(Spawn(id, {kBin + "fedmesh-node", "--config", "node" + std::to_string(i + 1) + ".toml",
                         "--set", "aggregator.endpoint=" + endpoint, "--set", "node.id=" + id,
                         "--set", "node.key=keys/" + id + ".key", "--set", "node.db=run/" + id + ".db",
                         "--set", "train.threads=1", "--set", "data.seed=" + std::to_string(kSeed),
                         "--set", "model.seed=" + std::to_string(kSeed)}),
              nullptr);
  }
  const auto rc = agg->WaitExit(seconds(120));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 120 s";
  ASSERT_EQ(*rc, 0);
  auto store = AggregatorStore::Open((dir_ / "run" / "aggregator.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto latest = (*store)->LatestModel();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  ASSERT_EQ((*latest)->version, static_cast<uint64_t>(kRounds));
  auto real = (*store)->LoadModel(kRounds);
  ASSERT_TRUE(real.ok());

  SimOptions o;  // the simulator with the example's settings
  o.clients = 4;
  o.clients_per_round = 4;
  o.min_clients = 4;
  o.rounds = kRounds;
  o.seed = kSeed;
  o.partition = "dirichlet";
  o.alpha = 0.5;
  o.local_epochs = 1;
  o.trainer.batch_size = 32;
  o.trainer.sgd.lr = 0.05f;
  o.test_samples = 100;
  o.threads = 2;
  auto sim = RunSimulation(o);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  ASSERT_EQ(sim->final_model.size(), real->size());
  double diff = 0, norm = 0, max_abs = 0;
  for (size_t i = 0; i < real->size(); ++i) {
    const double d = double(sim->final_model[i]) - (*real)[i];
    diff += d * d;
    norm += double((*real)[i]) * (*real)[i];
    max_abs = std::max(max_abs, std::abs(d));
  }
  const double rel = std::sqrt(diff / norm);
  std::cout << "[ info ] sim vs real global model after " << kRounds << " rounds: relative L2 "
            << rel << ", max |diff| " << max_abs << "\n";
  // Same code, same inputs, same single-thread BLAS: equal up to float rounding.
  EXPECT_LT(rel, 1e-5);
  // ... and not trivially: the model moved away from its initialisation.
  auto initial = (*store)->LoadModel(0);
  ASSERT_TRUE(initial.ok());
  double moved = 0;
  for (size_t i = 0; i < real->size(); ++i) moved += std::pow(double((*real)[i]) - (*initial)[i], 2);
  EXPECT_GT(std::sqrt(moved / norm), 1e-2);
}

TEST_F(SimEquivalenceTest, CliRejectsBadConfigsWithExitTwo) {
  std::ofstream(dir_ / "bad.toml") << "[sim]\nclients = 5\nclients_per_round = 10\n";
  EXPECT_EQ(Run({kBin + "fedmesh-sim", "--config", "bad.toml"}, "bad.log"), 2);
  EXPECT_NE(ReadWholeFile(dir_ / "bad.log").find("bad.toml"), std::string::npos);
  EXPECT_NE(ReadWholeFile(dir_ / "bad.log").find("clients_per_round"), std::string::npos);
  EXPECT_EQ(Run({kBin + "fedmesh-sim", "--set", "sim.unknown=1"}, "unknown.log"), 2);
  EXPECT_EQ(Run({kBin + "fedmesh-sim", "--config", "missing.toml"}, "missing.log"), 2);
  EXPECT_EQ(Run({kBin + "fedmesh-sim", "--threads", "-3"}, "threads.log"), 2);
  EXPECT_EQ(Run({kBin + "fedmesh-sim", "--set", "faults.crash=1@x"}, "crash.log"), 2);
  EXPECT_NE(ReadWholeFile(dir_ / "crash.log").find("[faults] crash"), std::string::npos);
  std::ofstream(dir_ / "broken.toml") << "[sim\nclients = 5\n";
  EXPECT_EQ(Run({kBin + "fedmesh-sim", "--config", "broken.toml"}, "broken.log"), 2);
  EXPECT_NE(ReadWholeFile(dir_ / "broken.log").find("broken.toml"), std::string::npos);
}

TEST_F(SimEquivalenceTest, CliWritesMetricsAndPlots) {
  if (!fs::exists("/usr/bin/gnuplot")) GTEST_SKIP() << "gnuplot not installed (apt-get install gnuplot-nox)";
  ASSERT_EQ(Run({kBin + "fedmesh-sim", "--set", "sim.clients=10", "--set", "sim.clients_per_round=3",
                 "--set", "sim.rounds=3", "--set", "data.test_samples=500", "--set",
                 "sim.metrics=m.jsonl", "--threads", "1", "--plot", "plots"},
                "sim.log"),
            0)
      << ReadWholeFile(dir_ / "sim.log");
  const auto lines = SplitLines(ReadWholeFile(dir_ / "m.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  for (const char* key : {"\"round\"", "\"sim_time_s\"", "\"test_accuracy\"", "\"test_loss\"",
                          "\"participants\"", "\"dropped\"", "\"bytes_up\"", "\"bytes_down\""}) {
    EXPECT_NE(lines[0].find(key), std::string::npos) << key << " in " << lines[0];
  }
  EXPECT_NE(ReadWholeFile(dir_ / "sim.log").find("round 3/3"), std::string::npos);  // progress
  for (const char* png : {"accuracy_vs_round.png", "accuracy_vs_time.png", "accuracy_vs_bytes.png"}) {
    const std::string bytes = ReadWholeFile(dir_ / "plots" / png);
    ASSERT_GT(bytes.size(), 1000u) << png;
    EXPECT_EQ(bytes.substr(1, 3), "PNG") << png;
  }
}

}  // namespace
}  // namespace fedmesh
