// Real-process federation tests: fedmesh-aggregator and fedmesh-node binaries on loopback
// with CurveZMQ, real Fashion-MNIST, real SQLite stores. Every child runs single-threaded
// (train.threads=1, OMP_WAIT_POLICY=passive), every wait has a deadline, and every child is
// SIGKILLed in TearDown (and by PR_SET_PDEATHSIG if this binary dies). Ports are chosen by
// the kernel (tcp://127.0.0.1:*) and read from the aggregator's "listening on" line.
// On failure the logs of every child are printed and the test's directory is kept
// (FEDMESH_KEEP_TEST_DIRS=1 keeps it after a pass too).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <csignal>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/data/fashion_mnist.h"
#include "core/graph/graph.h"
#include "core/graph/input_normalization.h"
#include "core/model.h"
#include "core/onnx/onnx_reader.h"
#include "core/rng.h"
#include "core/trainer.h"
#include "crypto/key_files.h"
#include "storage/aggregator_store.h"
#include "storage/node_store.h"
#include "tests/node/process_harness.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using fedmesh::testing::ChildProcess;
using fedmesh::testing::JsonNumber;
using fedmesh::testing::SplitLines;
using fedmesh::testing::Clock;
using fedmesh::testing::ReadWholeFile;
using fedmesh::testing::WaitUntil;
using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kBin = FEDMESH_BINARY_DIR "/bin/";
const fs::path kExampleDir = fs::path(FEDMESH_SOURCE_DIR) / "examples" / "fashion-mnist";

bool HaveFashionMnist() {
  static const bool have = LoadFashionMnist(DataSplit::kTest).ok();
  return have;
}

class FederationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) {
      GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("fedmesh_fed_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "keys" / "allow");
    fs::create_directories(dir_ / "run");
    for (const char* name : {"aggregator", "site-1", "site-2", "site-3", "site-4"}) {
      ASSERT_TRUE(GenKey(name)) << "fedmesh-keys gen failed for " << name << ":\n"
                                << ReadWholeFile(dir_ / "keygen.log");
    }
    for (int i = 1; i <= 4; ++i) {
      const std::string pub = "site-" + std::to_string(i) + ".pub";
      fs::copy_file(dir_ / "keys" / pub, dir_ / "keys" / "allow" / pub);
    }
    for (const auto& e : fs::directory_iterator(kExampleDir)) {
      if (e.path().extension() == ".toml") fs::copy_file(e.path(), dir_ / e.path().filename());
    }
    started_ = Clock::now();
  }

  void TearDown() override {
    for (auto& c : children_) c->Kill();
    if (HasFailure()) {
      for (auto& c : children_) {
        std::string log = c->Log();
        if (log.size() > 12000) log = "...\n" + log.substr(log.size() - 12000);
        std::cout << "==== log of " << c->name() << " (pid " << c->pid() << ", "
                  << c->log_path().string() << ") ====\n"
                  << log << "==== end of " << c->name() << " ====\n";
      }
      const std::string metrics = ReadWholeFile(MetricsPath());
      std::cout << "==== metrics ====\n" << metrics << "==== end of metrics ====\n";
      std::cout << "(files kept in " << dir_.string() << ")\n";
    } else if (!dir_.empty() && std::getenv("FEDMESH_KEEP_TEST_DIRS") == nullptr) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }

  double ElapsedS() const {
    return std::chrono::duration<double>(Clock::now() - started_).count();
  }

  bool GenKey(const std::string& name) {
    auto rc = fedmesh::testing::RunToCompletion(
        {kBin + "fedmesh-keys", "gen", "--out", "keys/" + name}, dir_, dir_ / "keygen.log",
        seconds(30));
    return rc.has_value() && *rc == 0;
  }

  ChildProcess* Spawn(const std::string& name, std::vector<std::string> argv,
                      std::map<std::string, std::string> env = {}) {
    env.emplace("OMP_WAIT_POLICY", "passive");
    env.emplace("OMP_NUM_THREADS", "1");
    auto child = ChildProcess::Spawn(name, argv, dir_, dir_ / (name + ".log"), env);
    EXPECT_NE(child, nullptr) << "fork failed for " << name;
    if (!child) return nullptr;
    children_.push_back(std::move(child));
    return children_.back().get();
  }

  // Starts the aggregator (log: <name>.log) and waits for the endpoint it prints.
  // Returns the endpoint, or "" (with a failure recorded) when it did not come up.
  std::string StartAggregator(const std::vector<std::string>& sets,
                              const std::string& listen = "tcp://127.0.0.1:*",
                              const std::string& name = "aggregator") {
    std::vector<std::string> argv = {kBin + "fedmesh-aggregator", "--config", "aggregator.toml",
                                     "--set", "aggregator.listen=" + listen};
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    ChildProcess* agg = Spawn(name, argv);
    if (agg == nullptr) return "";
    aggregator_ = agg;
    static const std::regex kListening(R"(listening on (tcp://127\.0\.0\.1:[0-9]+)\n)");
    std::string endpoint;
    WaitUntil(
        [&] {
          std::smatch m;
          const std::string log = agg->Log();
          if (std::regex_search(log, m, kListening)) endpoint = m[1];
          return !endpoint.empty() || !agg->Running();
        },
        seconds(60));
    EXPECT_FALSE(endpoint.empty()) << name << " did not print its endpoint within 60 s";
    return endpoint;
  }

  ChildProcess* StartNode(int index, const std::string& endpoint,
                          const std::vector<std::string>& sets = {},
                          const std::string& name = "",
                          std::map<std::string, std::string> env = {}) {
    const std::string n = name.empty() ? "site-" + std::to_string(index) : name;
    std::vector<std::string> argv = {kBin + "fedmesh-node",
                                     "--config",
                                     "node" + std::to_string(index) + ".toml",
                                     "--set",
                                     "aggregator.endpoint=" + endpoint,
                                     "--set",
                                     "train.threads=1"};
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    return Spawn(n, argv, std::move(env));
  }

  // Waits until `child`'s log contains `text` (or the child exited). True when found.
  bool WaitForLog(ChildProcess* child, const std::string& text, std::chrono::milliseconds timeout) {
    return WaitUntil(
        [&] { return child->Log().find(text) != std::string::npos || !child->Running(); },
               timeout) &&
           child->Log().find(text) != std::string::npos;
  }

  fs::path MetricsPath() const { return dir_ / "run" / "aggregator-metrics.jsonl"; }

  // `fedmesh-model export` of the store's last global model as ONNX, read back with
  // fedmesh's ONNX reader and evaluated on the Fashion-MNIST test set; -1 on failure.
  double ExportedAccuracy(const std::string& db) {
    auto rc = fedmesh::testing::RunToCompletion(
        {kBin + "fedmesh-model", "export", "--db", db, "--out", "global.onnx"}, dir_,
        dir_ / "export.log", seconds(60));
    EXPECT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "export.log");
    auto g = onnx::ReadOnnxFile((dir_ / "global.onnx").string());
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!g.ok()) return -1;
    auto backend = MakeCpuBackend(1);
    auto model = Model::CreateFromGraph("exported", backend.get(), std::move(*g));
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) return -1;
    SystemEnv env(1);
    Trainer trainer(model->get(), TrainerOptions{}, &env);
    auto eval = trainer.Evaluate(LoadFashionMnist(DataSplit::kTest).value());
    EXPECT_TRUE(eval.ok()) << eval.status().ToString();
    return eval.ok() ? eval->accuracy : -1;
  }

  std::vector<std::string> MetricsLines() const { return SplitLines(ReadWholeFile(MetricsPath())); }

  // Checks that the metrics file has exactly rounds 1..total, in order.
  void ExpectRounds(const std::vector<std::string>& lines, int total) {
    ASSERT_EQ(lines.size(), static_cast<size_t>(total));
    for (int i = 0; i < total; ++i) {
      EXPECT_EQ(JsonNumber(lines[i], "round"), std::optional<double>(i + 1)) << lines[i];
    }
  }

  fs::path dir_;
  Clock::time_point started_;
  std::vector<std::unique_ptr<ChildProcess>> children_;
  ChildProcess* aggregator_ = nullptr;
};

// (a) Four enrolled sites, five rounds: the aggregator finishes by itself and the global
// model learns.
TEST_F(FederationTest, FederationFourNodesLearn) {
  const std::string ep = StartAggregator({"rounds.total=5", "rounds.min_available_clients=4"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) ASSERT_NE(StartNode(i, ep), nullptr);

  ChildProcess* agg = aggregator_;
  const auto rc = agg->WaitExit(seconds(90));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);
  EXPECT_NE(agg->Log().find("federation finished: 5 rounds"), std::string::npos);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 5);
  if (HasFatalFailure()) return;
  for (const auto& l : lines) {
    EXPECT_GE(JsonNumber(l, "received").value_or(-1), 3) << l;  // min_clients
    EXPECT_EQ(JsonNumber(l, "selected").value_or(-1), 4) << l;
    EXPECT_EQ(JsonNumber(l, "rejected").value_or(-1), 0) << l;
  }
  EXPECT_GT(JsonNumber(lines.back(), "test_accuracy").value_or(-1), 0.75) << lines.back();
  std::cout << "[ info ] 5 rounds in " << ElapsedS() << " s; final " << lines.back() << "\n";
  // Issue 18: the built-in mlp's global model exports as ONNX (the store keeps its spec)
  // and scores what the aggregator printed.
  EXPECT_NEAR(ExportedAccuracy("run/aggregator.db"),
              JsonNumber(lines.back(), "test_accuracy").value_or(-1), 1e-4);
}

// Issue 8: five sites aggregate securely (SecAgg+, CurveZMQ, every message through the
// aggregator); site-5 SIGKILLs itself after it sent its masked update, when the unmask
// request arrives. The round completes at the unmasking deadline with the four survivors'
// shares, and, as SecAgg+ defines it, the dropped site's input is IN the sum: its self-mask
// is rebuilt from its neighbours' shares. The new global model equals the old one plus the
// mean of the five clipped changes each site recorded in its own store, and differs from
// the mean of the four survivors' alone.
TEST_F(FederationTest, FederationSecureAggregationSurvivesASiteKilledBeforeUnmasking) {
  ASSERT_TRUE(GenKey("site-5"));
  fs::copy_file(dir_ / "keys" / "site-5.pub", dir_ / "keys" / "allow" / "site-5.pub");
  const double kClip = 10.0;
  const std::string ep = StartAggregator(
      {"rounds.total=1", "rounds.clients_per_round=5", "rounds.min_clients=3",
       "rounds.min_available_clients=5", "secagg.enabled=true", "secagg.clip=10",
       "secagg.bits=24", "secagg.stage_timeout_s=10"});
  ASSERT_FALSE(ep.empty());
  std::vector<ChildProcess*> nodes;
  for (int i = 1; i <= 5; ++i) {
    const std::string id = "site-" + std::to_string(i);
    std::vector<std::string> sets = {"secagg.allow=keys/allow", "data.num_partitions=5",
                                     "data.index=" + std::to_string(i - 1)};
    std::map<std::string, std::string> env;
    if (i == 5) {
      sets.insert(sets.end(), {"node.id=" + id, "node.key=keys/" + id + ".key",
                               "node.db=run/" + id + ".db", "node.metrics=run/" + id + "-metrics.jsonl"});
      env["FEDMESH_FAULT"] = "secagg-kill-before-unmask";
    }
    nodes.push_back(StartNode(std::min(i, 4), ep, sets, id, env));
    ASSERT_NE(nodes.back(), nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(180));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 180 s";
  ASSERT_EQ(*rc, 0);
  ChildProcess* victim = nodes[4];
  const auto victim_rc = victim->WaitExit(seconds(10));
  ASSERT_TRUE(victim_rc.has_value());
  EXPECT_EQ(*victim_rc, 128 + SIGKILL);
  EXPECT_NE(victim->Log().find("round 1: sent the masked update"), std::string::npos);
  EXPECT_NE(victim->Log().find("fault injection: killing this process before unmasking round 1"),
            std::string::npos);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(WaitForLog(nodes[i], "secure aggregation done on this side", seconds(10)))
        << nodes[i]->name();
  }
  const auto lines = MetricsLines();
  ExpectRounds(lines, 1);
  if (HasFatalFailure()) return;
  EXPECT_EQ(JsonNumber(lines[0], "received").value_or(-1), 5) << lines[0];
  EXPECT_EQ(JsonNumber(lines[0], "selected").value_or(-1), 5) << lines[0];
  EXPECT_GT(JsonNumber(lines[0], "test_accuracy").value_or(-1), 0.5) << lines[0];

  // What each site says it contributed, clipped as the protocol does.
  std::vector<std::vector<float>> inputs;
  for (int i = 1; i <= 5; ++i) {
    auto store = NodeStore::Open((dir_ / "run" / ("site-" + std::to_string(i) + ".db")).string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto cp = (*store)->LoadCheckpoint();
    ASSERT_TRUE(cp.ok() && cp->has_value());
    auto it = (*cp)->tensors.find("secagg/last_input");
    ASSERT_NE(it, (*cp)->tensors.end()) << "site-" << i << " recorded no input";
    std::vector<float> x = it->second;
    double norm = 0;
    for (float v : x) norm += double(v) * v;
    norm = std::sqrt(norm);
    if (norm > kClip) {
      for (float& v : x) v = static_cast<float>(v * (kClip / norm));
    }
    inputs.push_back(std::move(x));
  }
  auto agg = AggregatorStore::Open((dir_ / "run" / "aggregator.db").string());
  ASSERT_TRUE(agg.ok()) << agg.status().ToString();
  auto before = (*agg)->LoadModel(0), after = (*agg)->LoadModel(1);
  ASSERT_TRUE(before.ok() && after.ok());
  ASSERT_EQ(before->size(), inputs[0].size());
  double worst_five = 0, worst_four = 0;
  for (size_t k = 0; k < before->size(); ++k) {
    double five = 0, four = 0;
    for (int i = 0; i < 5; ++i) five += inputs[i][k] / 5.0;
    for (int i = 0; i < 4; ++i) four += inputs[i][k] / 4.0;
    const double got = double((*after)[k]) - (*before)[k];
    worst_five = std::max(worst_five, std::abs(got - five));
    worst_four = std::max(worst_four, std::abs(got - four));
  }
  std::cout << "[ info ] largest difference from the mean of all five inputs " << worst_five
            << ", from the four survivors' " << worst_four << "\n";
  // 24 bits over [-10, 10]: 1.2e-6 per coordinate; float rounding of the model adds ~1e-7.
  EXPECT_LT(worst_five, 1e-5);
  EXPECT_GT(worst_four, 1e-3) << "the dropped site's input is part of the sum";
}

// Issue 8, FedBuff between real processes: buffers of 2 updates from 4 sites training
// continuously; 6 models are made, each from 2 updates, and the model learns.
TEST_F(FederationTest, FederationBufferedRoundsLearn) {
  const std::string ep = StartAggregator({"rounds.total=6", "rounds.mode=buffered",
                                          "rounds.buffer_size=2", "rounds.min_clients=2",
                                          "rounds.min_available_clients=4"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  const auto rc = aggregator_->WaitExit(seconds(120));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 120 s";
  ASSERT_EQ(*rc, 0);
  const auto lines = MetricsLines();
  ExpectRounds(lines, 6);
  if (HasFatalFailure()) return;
  for (const auto& l : lines) EXPECT_EQ(JsonNumber(l, "received").value_or(-1), 2) << l;
  EXPECT_GT(JsonNumber(lines.back(), "test_accuracy").value_or(-1), 0.7) << lines.back();
  std::cout << "[ info ] 6 buffered models in " << ElapsedS() << " s; final " << lines.back() << "\n";
}

// (f) Issue 4: every site sends its update as topk:0.01|int8|zstd (its own [codec] chain)
// with error feedback, and the aggregator sends the global model as fp16. The updates shrink
// at least 100x and the federation still learns.
TEST_F(FederationTest, FederationCompressedUpdatesLearn) {
  // With update prediction: from round 2 each task carries the model and p (fp16), and the
  // nodes send top-k of their change minus p, which the aggregator adds back.
  const std::string ep = StartAggregator({"rounds.total=10", "rounds.min_available_clients=4",
                                          "codec.downlink=fp16", "rounds.update_prediction=0.9"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) {
    ASSERT_NE(StartNode(i, ep, {"codec.chain=topk:0.01|int8|zstd"}), nullptr);
  }
  ChildProcess* agg = aggregator_;
  const auto rc = agg->WaitExit(seconds(180));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 180 s";
  ASSERT_EQ(*rc, 0);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 10);
  if (HasFatalFailure()) return;
  constexpr double kMlpParams = 784 * 256 + 256 + 256 * 10 + 10;
  for (const auto& l : lines) {
    const double received = JsonNumber(l, "received").value_or(0);
    EXPECT_GE(received, 3) << l;
    EXPECT_EQ(JsonNumber(l, "rejected").value_or(-1), 0) << l;
    EXPECT_EQ(JsonNumber(l, "bytes_up_raw").value_or(-1), received * 4 * kMlpParams) << l;
    EXPECT_GE(JsonNumber(l, "compression_ratio").value_or(0), 100.0) << l;
    EXPECT_NEAR(JsonNumber(l, "bytes_up_raw").value_or(0) / JsonNumber(l, "bytes_up").value_or(1),
                JsonNumber(l, "compression_ratio").value_or(0), 1e-3) << l;
    // fp16 downlink: half the float32 bytes per task sent.
    EXPECT_EQ(JsonNumber(l, "bytes_down").value_or(-1) * 2, JsonNumber(l, "bytes_down_raw").value_or(0))
        << l;
    // Whole models per round: one per task in round 1, two (model and p) per task after.
    const double models = JsonNumber(l, "bytes_down_raw").value_or(0) / (4 * kMlpParams);
    EXPECT_EQ(models, std::floor(models)) << l;
    if (JsonNumber(l, "round").value_or(0) > 1) {
      EXPECT_EQ(std::fmod(models, 2.0), 0.0) << l;
      EXPECT_GE(models, 2 * received) << l;
    }
  }
  const double first = JsonNumber(lines.front(), "test_accuracy").value_or(-1);
  const double last = JsonNumber(lines.back(), "test_accuracy").value_or(-1);
  EXPECT_GT(last, 0.70) << lines.back();
  EXPECT_GT(last, first) << "accuracy did not rise";
  // Each node says what it sent, round by round, in its own metrics file.
  const std::string node_metrics = ReadWholeFile(dir_ / "run" / "site-1-metrics.jsonl");
  EXPECT_NE(node_metrics.find("\"codec\":\"topk:0.01|int8:256|zstd:3\""), std::string::npos)
      << node_metrics;
  EXPECT_NE(node_metrics.find("\"residual_norm\":"), std::string::npos) << node_metrics;
  std::cout << "[ info ] compressed: 10 rounds in " << ElapsedS() << " s; first " << lines.front()
            << "\n         final " << lines.back() << "\n";
}

// (b) A fifth node whose key is not in the allowlist is refused at the CurveZMQ handshake:
// it never registers nor trains, and the aggregator names its key.
TEST_F(FederationTest, FederationUnenrolledNodeGetsNothing) {
  ASSERT_TRUE(GenKey("site-5"));  // generated, but its .pub is not copied into keys/allow
  auto intruder_key = ReadPublicIdentity((dir_ / "keys" / "site-5.pub").string());
  ASSERT_TRUE(intruder_key.ok()) << intruder_key.status().ToString();
  const std::string intruder_z85 = intruder_key->curve_public_z85();

  const std::string ep = StartAggregator(
      {"rounds.total=2", "rounds.min_clients=3", "rounds.clients_per_round=3"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  // The intruder uses site 4's data; its identity and files are its own.
  ChildProcess* intruder =
      StartNode(4, ep,
                {"node.id=site-5", "node.key=keys/site-5.key", "node.db=run/site-5.db",
                 "node.metrics=run/site-5-metrics.jsonl"},
                "site-5");
  ASSERT_NE(intruder, nullptr);
  // Its refusal is logged before any enrolled node exists, so the order is deterministic.
  ASSERT_TRUE(WaitForLog(agg, "refused connection", seconds(60)))
      << "the aggregator never logged the unenrolled node's refused handshake";
  const std::string agg_log_early = agg->Log();
  EXPECT_NE(agg_log_early.find("with key " + intruder_z85 + ": not in the allowlist"),
            std::string::npos)
      << "refusal does not name site-5's key " << intruder_z85;

  for (int i = 1; i <= 3; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  const auto rc = agg->WaitExit(seconds(90));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 2);
  for (const auto& l : lines) {
    EXPECT_EQ(JsonNumber(l, "selected").value_or(-1), 3) << l;
    EXPECT_EQ(JsonNumber(l, "received").value_or(-1), 3) << l;
  }
  const std::string agg_log = agg->Log();
  EXPECT_EQ(agg_log.find("node site-5"), std::string::npos) << "site-5 reached the engine";
  EXPECT_EQ(agg_log.find("from site-5"), std::string::npos) << "site-5 reached the engine";

  ASSERT_TRUE(intruder->Running()) << "the unenrolled node exited by itself";
  intruder->Signal(SIGTERM);
  const auto irc = intruder->WaitExit(seconds(30));
  ASSERT_TRUE(irc.has_value()) << "unenrolled node ignored SIGTERM for 30 s";
  EXPECT_EQ(*irc, 0);
  const std::string ilog = intruder->Log();
  EXPECT_EQ(ilog.find("registered with the aggregator"), std::string::npos) << ilog;
  EXPECT_EQ(ilog.find("FitTask"), std::string::npos) << ilog;
  EXPECT_EQ(ilog.find("trained"), std::string::npos) << ilog;
  EXPECT_NE(ilog.find("stopped: 0 round(s) served"), std::string::npos) << ilog;

  auto store = NodeStore::Open((dir_ / "run" / "site-5.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto cp = (*store)->LoadCheckpoint();
  ASSERT_TRUE(cp.ok()) << cp.status().ToString();
  EXPECT_TRUE(!cp->has_value() || !(*cp)->last_round_served.has_value())
      << "the unenrolled node's store records a served round " << *(*cp)->last_round_served;
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// (b, second half) Enrolment without a restart: a site refused at first is admitted after
// its .pub is copied into the allowlist directory and the aggregator gets SIGHUP; the node
// gets in by itself (re-register with backoff) and trains in the federation.
TEST_F(FederationTest, FederationSighupEnrollsANewSite) {
  ASSERT_TRUE(GenKey("site-5"));  // not yet in keys/allow
  const std::string ep = StartAggregator({"rounds.total=2", "rounds.min_clients=4",
                                          "rounds.clients_per_round=4",
                                          "rounds.min_available_clients=4"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  ChildProcess* newcomer =
      StartNode(4, ep,
                {"node.id=site-5", "node.key=keys/site-5.key", "node.db=run/site-5.db",
                 "node.metrics=run/site-5-metrics.jsonl"},
                "site-5");
  ASSERT_NE(newcomer, nullptr);
  for (int i = 1; i <= 3; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  ASSERT_TRUE(WaitForLog(agg, "refused connection", seconds(60)));
  // Four nodes are needed and only three are enrolled: no round can open yet.
  EXPECT_EQ(agg->Log().find("round 1 attempt 1 opened"), std::string::npos);

  fs::copy_file(dir_ / "keys" / "site-5.pub", dir_ / "keys" / "allow" / "site-5.pub");
  agg->Signal(SIGHUP);
  ASSERT_TRUE(WaitForLog(agg, "allowlist reloaded", seconds(30))) << agg->Log();
  ASSERT_TRUE(WaitForLog(agg, "node site-5 registered", seconds(60))) << agg->Log();

  const auto rc = agg->WaitExit(seconds(90));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);
  const auto lines = MetricsLines();
  ExpectRounds(lines, 2);
  if (HasFatalFailure()) return;
  for (const auto& l : lines) EXPECT_EQ(JsonNumber(l, "received").value_or(-1), 4) << l;
  EXPECT_NE(agg->Log().find("accepted update from site-5"), std::string::npos);
  EXPECT_NE(newcomer->Log().find(": trained"), std::string::npos) << newcomer->Log();
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// (c) A selected node is SIGKILLed while round 1 is open: the round closes at its deadline
// with the 3 other updates (min_clients 3), and the run still completes.
TEST_F(FederationTest, FederationNodeKilledMidRoundClosesWithQuorum) {
  const std::string ep = StartAggregator({"rounds.total=2", "rounds.min_clients=3",
                                          "rounds.clients_per_round=4",
                                          "rounds.min_available_clients=4", "rounds.timeout_s=5"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  std::vector<ChildProcess*> nodes;
  for (int i = 1; i <= 4; ++i) {
    nodes.push_back(StartNode(i, ep));
    ASSERT_NE(nodes.back(), nullptr);
  }
  ASSERT_TRUE(WaitForLog(agg, "round 1 attempt 1 opened with 4 node(s)", seconds(60)));
  ChildProcess* victim = nodes[3];
  victim->Kill();
  ASSERT_EQ(victim->Log().find("round 1: trained"), std::string::npos)
      << "site-4 finished round 1 before the kill landed; the test could not kill it mid-round";

  const auto rc = agg->WaitExit(seconds(60));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 60 s";
  ASSERT_EQ(*rc, 0);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 2);
  if (HasFatalFailure()) return;
  EXPECT_EQ(JsonNumber(lines[0], "selected").value_or(-1), 4) << lines[0];
  EXPECT_EQ(JsonNumber(lines[0], "attempts").value_or(-1), 1) << lines[0];
  for (const auto& l : lines) EXPECT_EQ(JsonNumber(l, "received").value_or(-1), 3) << l;
  EXPECT_EQ(agg->Log().find("accepted update from site-4"), std::string::npos);
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// (c, second half) A node SIGKILLed after it served round 1 is started again on its own
// store: it resumes from its checkpoint, registers again by itself and contributes to a
// later round; the run completes.
TEST_F(FederationTest, FederationKilledNodeRestartsFromItsStoreAndRejoins) {
  const std::string ep = StartAggregator({"rounds.total=3", "rounds.min_clients=3",
                                          "rounds.clients_per_round=4",
                                          "rounds.min_available_clients=4", "rounds.timeout_s=5"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  std::vector<ChildProcess*> nodes;
  for (int i = 1; i <= 4; ++i) {
    nodes.push_back(StartNode(i, ep));
    ASSERT_NE(nodes.back(), nullptr);
  }
  ASSERT_TRUE(WaitForLog(nodes[3], "round 1: trained", seconds(60)));
  ASSERT_TRUE(WaitForLog(agg, "round 1 closed", seconds(60)));
  nodes[3]->Kill();
  ChildProcess* again = StartNode(4, ep, {}, "site-4-restarted");
  ASSERT_NE(again, nullptr);

  const auto rc = agg->WaitExit(seconds(90));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);
  ExpectRounds(MetricsLines(), 3);
  const std::string log = again->Log();
  EXPECT_NE(log.find("resumed from checkpoint"), std::string::npos) << log;
  EXPECT_NE(log.find(": trained"), std::string::npos) << "the restarted site-4 never trained\n" << log;
  EXPECT_NE(log.find("sent"), std::string::npos) << log;
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// (d) The aggregator is SIGKILLed in round 2 after it accepted an update, and restarted on
// the same store and port: it restores exactly the accepted updates, the nodes find it by
// themselves, no restored update is accepted twice, and the run completes.
TEST_F(FederationTest, FederationAggregatorKilledAndRestartedResumes) {
  // Two local epochs make a round last long enough for the kill to land inside it.
  // min_available_clients 4 on restart too: a node whose round-2 update was restored sits
  // idle, and only its heartbeat (delivered to the round engine, which answers an unknown
  // node with Reject(not_enrolled)) makes it register again before FederatedClient's 60 s
  // silence fallback; the run must finish well inside that (regression: heartbeats used to
  // be swallowed by ZmqServer and round 3 opened only after 60 s).
  const std::vector<std::string> sets = {"rounds.total=3", "rounds.min_clients=2",
                                         "rounds.clients_per_round=4", "rounds.timeout_s=60",
                                         "train.epochs=2", "rounds.min_available_clients=4",
                                         "aggregator.heartbeat_ms=500"};
  std::vector<std::string> first_sets = sets;
  const std::string ep = StartAggregator(first_sets);
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg1 = aggregator_;
  for (int i = 1; i <= 4; ++i) ASSERT_NE(StartNode(i, ep), nullptr);

  ASSERT_TRUE(WaitForLog(agg1, "round 2: accepted update from", seconds(90)));
  agg1->Kill();
  const auto killed_at = Clock::now();
  ASSERT_EQ(MetricsLines().size(), 1u) << "round 2 closed before the kill";

  size_t accepted_before = 0;
  std::set<std::string> restored_nodes;
  {
    auto store = AggregatorStore::Open((dir_ / "run" / "aggregator.db").string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto open = (*store)->LoadOpenRound();
    ASSERT_TRUE(open.ok()) << open.status().ToString();
    ASSERT_TRUE(open->has_value()) << "no open round in the store after the kill";
    EXPECT_EQ((*open)->round, 2u);
    accepted_before = (*open)->updates.size();
    for (const auto& u : (*open)->updates) restored_nodes.insert(u.node);
  }
  ASSERT_GE(accepted_before, 1u);

  const std::string ep2 = StartAggregator(sets, ep, "aggregator-restarted");
  ASSERT_EQ(ep2, ep);
  ChildProcess* agg2 = aggregator_;
  const std::string resumed = "resuming round 2 attempt 1 with " +
                              std::to_string(accepted_before) + " accepted update(s)";
  EXPECT_TRUE(WaitForLog(agg2, "resuming round 2", seconds(30)));
  EXPECT_NE(agg2->Log().find(resumed), std::string::npos) << "expected: " << resumed;

  const auto rc = agg2->WaitExit(seconds(150));
  ASSERT_TRUE(rc.has_value()) << "restarted aggregator still running after 150 s";
  ASSERT_EQ(*rc, 0);
  const double after_restart_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  // The idle node came back through its heartbeat, not the 60 s silence fallback.
  EXPECT_LT(after_restart_s, 45.0);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 3);
  if (HasFatalFailure()) return;
  const std::string log2 = agg2->Log();
  for (const auto& node : restored_nodes) {
    EXPECT_EQ(log2.find("round 2: accepted update from " + node + " ("), std::string::npos)
        << node << "'s restored update was accepted a second time";
  }
  // Round 2 counts the restored updates plus those accepted after the restart.
  size_t accepted_after = 0;
  for (size_t at = log2.find("round 2: accepted update from"); at != std::string::npos;
       at = log2.find("round 2: accepted update from", at + 1)) {
    ++accepted_after;
  }
  EXPECT_EQ(JsonNumber(lines[1], "received").value_or(-1),
            static_cast<double>(accepted_before + accepted_after))
      << lines[1];
  for (const auto& l : lines) EXPECT_GE(JsonNumber(l, "received").value_or(-1), 2) << l;
  std::cout << "[ info ] " << accepted_before << " update(s) restored; restart to finish "
            << after_restart_s << " s; total " << ElapsedS() << " s\n";
}

// Connects a TCP socket to `endpoint` (tcp://127.0.0.1:PORT); -1 on failure.
int ConnectTcp(const std::string& endpoint) {
  const int port = std::atoi(endpoint.substr(endpoint.rfind(':') + 1).c_str());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends as much of `data` as the peer takes before it closes, errors or stalls (bounded by
// SO_SNDTIMEO and `timeout`). Returns the bytes sent.
size_t SendBounded(int fd, const std::string& data, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  size_t sent = 0;
  while (sent < data.size() && Clock::now() < deadline) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    sent += static_cast<size_t>(n);
  }
  return sent;
}

// (e) Raw TCP garbage at the aggregator's port while a federation runs: random bytes, a
// truncated ZMTP greeting, a complete greeting asking for the NULL mechanism, a 64 MiB blob
// and an idle connection. The federation still finishes every round.
TEST_F(FederationTest, FederationAggregatorSurvivesGarbage) {
  const std::string ep = StartAggregator({"rounds.total=3", "rounds.min_available_clients=4"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  for (int i = 1; i <= 4; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  ASSERT_TRUE(WaitForLog(agg, "round 1 attempt 1 opened", seconds(60)));

  // An idle connection held across the attacks.
  const int idle = ConnectTcp(ep);
  EXPECT_GE(idle, 0);

  // 1. Random bytes (fixed seed).
  {
    std::string junk(4096, '\0');
    uint32_t x = 12345;
    for (char& c : junk) {
      x = x * 1664525u + 1013904223u;
      c = static_cast<char>(x >> 24);
    }
    const int fd = ConnectTcp(ep);
    ASSERT_GE(fd, 0);
    SendBounded(fd, junk, seconds(10));
    close(fd);
  }
  // 2. A truncated ZMTP 3 greeting: signature and major version, then close.
  {
    const std::string greeting("\xFF\x00\x00\x00\x00\x00\x00\x00\x01\x7F\x03", 11);
    const int fd = ConnectTcp(ep);
    ASSERT_GE(fd, 0);
    SendBounded(fd, greeting, seconds(10));
    close(fd);
  }
  // 3. A full greeting asking for the NULL mechanism (the server requires CURVE), then junk.
  {
    std::string greeting("\xFF\x00\x00\x00\x00\x00\x00\x00\x01\x7F\x03\x01", 12);
    std::string mech = "NULL";
    mech.resize(20, '\0');
    greeting += mech;
    greeting += std::string(1, '\0');   // as-server
    greeting += std::string(31, '\0');  // filler
    static const char kReady[] = "\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x06ROUTER";
    greeting += std::string(kReady, sizeof(kReady) - 1);
    const int fd = ConnectTcp(ep);
    ASSERT_GE(fd, 0);
    SendBounded(fd, greeting, seconds(10));
    close(fd);
  }
  // 4. 64 MiB of zeros.
  {
    const std::string blob(64u << 20, '\0');
    const int fd = ConnectTcp(ep);
    ASSERT_GE(fd, 0);
    const size_t sent = SendBounded(fd, blob, seconds(20));
    close(fd);
    std::cout << "[ info ] the aggregator took " << sent << " of " << blob.size()
              << " blob bytes before closing\n";
  }
  // 5. A burst of connections that close at once.
  for (int i = 0; i < 50; ++i) {
    const int fd = ConnectTcp(ep);
    if (fd >= 0) close(fd);
  }

  EXPECT_TRUE(agg->Running()) << "the aggregator died under garbage";
  const auto rc = agg->WaitExit(seconds(90));
  if (idle >= 0) close(idle);
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);
  const auto lines = MetricsLines();
  ExpectRounds(lines, 3);
  for (const auto& l : lines) EXPECT_GE(JsonNumber(l, "received").value_or(-1), 3) << l;
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// Issue 18: the aggregator loads an ONNX residual CNN written by torch.onnx.export (Conv,
// BatchNorm with running statistics, a residual Add, pooling) and ships its graph with
// every task; the four sites' configs name no ONNX file (they say "mlp") and train the
// aggregator's model. Site 1 pins the graph hash (expect_sha256) and trains too. After 5
// rounds the global model reaches 0.85 on the test set, and the model fedmesh-model
// exports from the store scores exactly what the aggregator printed.
const std::string kResnetOnnx =
    std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/resnet_bn/model_train.onnx";
const std::string kResnetSha = "602eb0f33760f14a51f62f97b028d880da75d02f42d88cfc84979c823f2cc3d9";

TEST_F(FederationTest, FederationOnnxModelFromTheAggregatorReachesTarget) {
  const std::string ep = StartAggregator({"rounds.total=5", "rounds.min_available_clients=4",
                                          "model.onnx=" + kResnetOnnx, "train.lr=0.05", "train.epochs=2",
                                          "train.momentum=0.9"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  EXPECT_NE(agg->Log().find("graph sha256 " + kResnetSha), std::string::npos) << agg->Log();
  std::vector<ChildProcess*> nodes;
  for (int i = 1; i <= 4; ++i) {
    std::vector<std::string> sets = {"data.partition=iid"};
    if (i == 1) sets.push_back("model.expect_sha256=" + kResnetSha);
    nodes.push_back(StartNode(i, ep, sets));
    ASSERT_NE(nodes.back(), nullptr);
  }
  const auto rc = agg->WaitExit(seconds(400));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 400 s";
  ASSERT_EQ(*rc, 0);
  const auto lines = MetricsLines();
  ExpectRounds(lines, 5);
  if (HasFatalFailure()) return;
  const double final_accuracy = JsonNumber(lines.back(), "test_accuracy").value_or(-1);
  EXPECT_GE(final_accuracy, 0.85) << lines.back();
  for (ChildProcess* n : nodes) {
    EXPECT_NE(n->Log().find("training the aggregator's model: graph sha256 " + kResnetSha),
              std::string::npos) << n->Log();
  }

  // Export the last global model and score it with fedmesh's own ONNX reader.
  const double exported = ExportedAccuracy("run/aggregator.db");
  EXPECT_NEAR(exported, final_accuracy, 1e-4);
  std::cout << "[ info ] 5 rounds in " << ElapsedS() << " s; final " << lines.back()
            << "; exported model scores " << exported << "\n";
}

// Issue 18: a site whose [model] expect_sha256 names another architecture stops at the
// first task with exit code 2 and says why; it never trains.
TEST_F(FederationTest, FederationSiteRefusesAModelWithAnotherGraphHash) {
  const std::string ep = StartAggregator({"rounds.total=1", "rounds.min_clients=1",
                                          "rounds.clients_per_round=1",
                                          "rounds.min_available_clients=1",
                                          "model.onnx=" + kResnetOnnx});
  ASSERT_FALSE(ep.empty());
  const std::string pinned(64, 'a');
  ChildProcess* node = StartNode(1, ep, {"model.expect_sha256=" + pinned});
  ASSERT_NE(node, nullptr);
  const auto rc = node->WaitExit(seconds(60));
  ASSERT_TRUE(rc.has_value()) << "the node kept running with a refused model";
  EXPECT_EQ(*rc, 2);
  const std::string log = node->Log();
  EXPECT_NE(log.find("the aggregator's model has graph sha256 " + kResnetSha +
                     " but [model] expect_sha256 is " + pinned),
            std::string::npos) << log;
  EXPECT_EQ(log.find(": trained"), std::string::npos) << log;
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// Issue 19: no data at the aggregator at all ([eval] dataset = ""). After every round each
// of the four sites evaluates the new global model on its own share of the held-out data
// (partitioned like its training data, so the sites' figures differ), and the aggregator
// writes one "*" line with the example-weighted metrics and one line per site, which sum
// back to it; the store keeps the same rows.
TEST_F(FederationTest, FederationFederatedEvaluationWithoutAnEvalDataset) {
  const std::string ep =
      StartAggregator({"rounds.total=3", "rounds.min_available_clients=4", "eval.dataset=",
                       "eval.federated=true", "eval.min_sites=4", "eval.timeout_s=60"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  const auto rc = aggregator_->WaitExit(seconds(120));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 120 s";
  ASSERT_EQ(*rc, 0);

  std::map<int, std::string> total;                     // round -> "*" line
  std::map<int, std::vector<std::string>> sites;        // round -> site lines
  int round_lines = 0;
  for (const std::string& l : MetricsLines()) {
    const int round = static_cast<int>(JsonNumber(l, "round").value_or(-1));
    if (l.find("\"federated_eval\":true") == std::string::npos) {
      ++round_lines;
      EXPECT_EQ(l.find("\"test_accuracy\":0"), std::string::npos) << "no central test set: " << l;
      continue;
    }
    if (l.find("\"site\":\"*\"") != std::string::npos) {
      total[round] = l;
    } else {
      sites[round].push_back(l);
    }
  }
  EXPECT_EQ(round_lines, 3);
  for (int round = 1; round <= 3; ++round) {
    ASSERT_TRUE(total.contains(round)) << "no federated evaluation line for round " << round;
    const std::string& t = total[round];
    EXPECT_EQ(JsonNumber(t, "sites_answered").value_or(-1), 4) << t;
    ASSERT_EQ(sites[round].size(), 4u);
    double n = 0, correct = 0, loss = 0;
    std::set<double> per_site;
    for (const std::string& s : sites[round]) {
      const double k = JsonNumber(s, "num_examples").value_or(0);
      n += k;
      correct += k * JsonNumber(s, "accuracy").value_or(-1);
      loss += k * JsonNumber(s, "loss").value_or(-1);
      per_site.insert(JsonNumber(s, "accuracy").value_or(-1));
    }
    EXPECT_EQ(JsonNumber(t, "num_examples").value_or(-1), n) << t;
    EXPECT_NEAR(JsonNumber(t, "accuracy").value_or(-1), correct / n, 1e-6) << t;
    EXPECT_NEAR(JsonNumber(t, "loss").value_or(-1), loss / n, 1e-6) << t;
    EXPECT_GT(per_site.size(), 1u) << "every site scored the same: not their own data";
  }
  EXPECT_GT(JsonNumber(total[3], "accuracy").value_or(-1), 0.7) << total[3];

  auto store = AggregatorStore::Open((dir_ / "run" / "aggregator.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto rows = (*store)->SiteEvals(3);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 5u);
  EXPECT_EQ((*rows)[0].site, "*");
  EXPECT_EQ(static_cast<double>((*rows)[0].num_examples), JsonNumber(total[3], "num_examples").value_or(-1));

  // fedmesh-model export --best accuracy: the round with the highest federated accuracy,
  // whatever the last round scored.
  int best_round = 1;
  for (int round = 2; round <= 3; ++round)
    if (JsonNumber(total[round], "accuracy").value_or(-1) >
        JsonNumber(total[best_round], "accuracy").value_or(-1))
      best_round = round;
  auto rc_best = fedmesh::testing::RunToCompletion(
      {kBin + "fedmesh-model", "export", "--db", "run/aggregator.db", "--best", "accuracy", "--out",
       "best.npz"},
      dir_, dir_ / "export-best.log", seconds(60));
  const std::string log = ReadWholeFile(dir_ / "export-best.log");
  ASSERT_TRUE(rc_best.has_value() && *rc_best == 0) << log;
  EXPECT_NE(log.find("at round " + std::to_string(best_round) + "\n"), std::string::npos) << log;
  EXPECT_NE(log.find("model version " + std::to_string(best_round) + "\n"), std::string::npos) << log;
  auto rc_none = fedmesh::testing::RunToCompletion(
      {kBin + "fedmesh-model", "export", "--db", "run/aggregator.db", "--best", "r2", "--out",
       "none.npz"},
      dir_, dir_ / "export-none.log", seconds(60));
  ASSERT_TRUE(rc_none.has_value());
  EXPECT_EQ(*rc_none, 2) << ReadWholeFile(dir_ / "export-none.log");
  EXPECT_NE(ReadWholeFile(dir_ / "export-none.log").find("no federated evaluation with metric 'r2'"),
            std::string::npos);
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// Issue 19: a binary task end to end, as examples/breast_cancer runs it but on generated rows:
// the aggregator's ONNX model has one logit (bce_with_logits, examples/breast_cancer/
// hospital_mlp.onnx with its input BatchNorm kept at each site), the sites hold CSVs with
// text labels and hold out 30% of their rows; secure aggregation and federated evaluation
// only. The sites must adopt the one-logit model (their data is checked against the
// task's loss, not cross_entropy) and the federated AUC must be high on this separable
// data.
TEST_F(FederationTest, FederationBinaryOnnxModelWithSecureAggregationAndFederatedEvaluation) {
  const std::string model = std::string(FEDMESH_SOURCE_DIR) + "/examples/breast_cancer/hospital_mlp.onnx";
  // Malignant when the first two measurements are large; scales differ by column, as in
  // the real data (the input BatchNorm standardises them).
  Rng rng(11);
  for (int site = 1; site <= 4; ++site) {
    std::ofstream out(dir_ / ("site-" + std::to_string(site) + ".csv"));
    for (int c = 0; c < 30; ++c) out << "m" << c << ",";
    out << "diagnosis\n";
    for (int row = 0; row < 60 + 20 * site; ++row) {
      const bool malignant = rng.Uniform() < 0.3;
      for (int c = 0; c < 30; ++c) {
        const double scale = c % 3 == 0 ? 1000.0 : c % 3 == 1 ? 1.0 : 0.01;
        const double shift = (c < 2 && malignant) ? 1.5 : 0.0;
        out << scale * (rng.Normal() + shift) << ",";
      }
      out << (malignant ? "malignant" : "benign") << "\n";
    }
  }
  const std::string ep = StartAggregator(
      {"rounds.total=6", "rounds.clients_per_round=4", "rounds.min_clients=3",
       "rounds.min_available_clients=4", "model.onnx=" + model, "train.loss=bce_with_logits",
       "train.lr=0.05", "train.momentum=0.9", "train.batch=16", "train.epochs=2",
       "secagg.enabled=true", "secagg.clip=5", "secagg.bits=24", "secagg.stage_timeout_s=30",
       "eval.dataset=", "eval.federated=true", "eval.min_sites=4", "eval.finetune_epochs=2",
       "eval.local_only_epochs=12", "eval.cross_eval=true"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) {
    ASSERT_NE(StartNode(i, ep,
                        {"secagg.allow=keys/allow", "data.dataset=csv:site-" + std::to_string(i) + ".csv",
                         "data.label_column=diagnosis", "data.label_values=benign,malignant",
                         "data.num_partitions=1", "data.index=0", "data.partition=iid",
                         "data.test_fraction=0.3", "model.local=input_norm.*",
                         // Sites 1 and 2 share their local-only models for cross-evaluation.
                         std::string("eval.share_local_model=") + (i <= 2 ? "true" : "false")}),
              nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(180));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 180 s";
  ASSERT_EQ(*rc, 0);
  std::string last;
  for (const std::string& l : MetricsLines())
    if (l.find("\"site\":\"*\"") != std::string::npos) last = l;
  ASSERT_FALSE(last.empty()) << "no federated evaluation";
  EXPECT_EQ(JsonNumber(last, "round").value_or(-1), 6) << last;
  EXPECT_EQ(JsonNumber(last, "sites_answered").value_or(-1), 4) << last;
  EXPECT_GE(JsonNumber(last, "auc").value_or(-1), 0.9) << last;
  EXPECT_GE(JsonNumber(last, "accuracy").value_or(-1), 0.8) << last;
  // The last evaluation also compares, per site, the global model with the site's
  // local-only baseline and the global model fine-tuned there; earlier ones do not.
  int compared = 0;
  std::map<std::string, double> local_only;                     // site -> its local_only_auc
  std::map<std::string, std::map<std::string, double>> cross;  // candidate -> site -> auc
  for (const std::string& l : MetricsLines()) {
    if (l.find("\"federated_eval\":true") == std::string::npos) continue;
    if (l.find("\"candidate\"") != std::string::npos) {
      const size_t c = l.find("\"candidate\":\"") + 13;
      const size_t s = l.find("\"site\":\"") + 8;
      cross[l.substr(c, l.find('"', c) - c)][l.substr(s, l.find('"', s) - s)] =
          JsonNumber(l, "auc").value_or(-1);
      continue;
    }
    if (l.find("\"local_only_auc\"") != std::string::npos) {
      const size_t s = l.find("\"site\":\"") + 8;
      local_only[l.substr(s, l.find('"', s) - s)] = JsonNumber(l, "local_only_auc").value_or(-1);
    }
    const bool has = l.find("\"finetuned_auc\"") != std::string::npos &&
                     l.find("\"local_only_auc\"") != std::string::npos;
    EXPECT_EQ(has, JsonNumber(l, "round").value_or(-1) == 6) << l;
    if (!has || l.find("\"site\":\"*\"") != std::string::npos) continue;
    ++compared;
    EXPECT_GE(JsonNumber(l, "local_only_auc").value_or(-1), 0.5) << l;
    EXPECT_GE(JsonNumber(l, "finetuned_auc").value_or(-1), 0.5) << l;
  }
  EXPECT_EQ(compared, 4);
  // Cross-evaluation: the two shared local models, each scored at all four sites; at its
  // own site a local model scores exactly its local-only AUC of the last evaluation.
  ASSERT_EQ(cross.size(), 2u);
  for (const std::string c : {"site-1", "site-2"}) {
    ASSERT_EQ(cross[c].size() - cross[c].count("*"), 4u) << c;
    EXPECT_EQ(cross[c][c], local_only[c]) << c;
    for (const auto& [site, auc] : cross[c]) EXPECT_GE(auc, 0.5) << c << " at " << site;
  }
  EXPECT_NE(aggregator_->Log().find("cross-evaluation: every model scored at every site"),
            std::string::npos);
  EXPECT_NE(ReadWholeFile(dir_ / "site-1.log").find("sharing this site's local-only model"),
            std::string::npos);
  EXPECT_EQ(ReadWholeFile(dir_ / "site-3.log").find("sharing this site's local-only model"),
            std::string::npos);
  EXPECT_NE(aggregator_->Log().find("did federation help each site?"), std::string::npos);
  EXPECT_NE(aggregator_->Log().find("| site-4 | "), std::string::npos) << aggregator_->Log();
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// Issue 19, federated statistics: three sites release summaries of their rows (two with
// exact min/max, one with its default noise) and a fourth, with 8 rows, is below its
// min_count and releases nothing. The aggregator's report must give the mean and variance
// of the pooled rows of the three to 1e-9 relative (computed here independently, and by
// numpy when it is installed), histograms that count every row, the label counts, and the
// withheld site's reason; then round 1 trains as usual.
class FederatedStatisticsTest : public FederationTest {
 protected:
  void RunAndCheck(bool secure);
};

TEST_F(FederatedStatisticsTest, FederationFederatedStatisticsEqualThePooledRows) { RunAndCheck(false); }

// The same under secure aggregation: the sites' counts, sums, sums of squares, histograms
// and label counts are summed by SecAgg+ as exact fixed-point words, so the aggregator
// sees only the federation's totals, and they still equal the pooled figures to 1e-9.
TEST_F(FederatedStatisticsTest, FederationFederatedStatisticsUnderSecureAggregation) {
  RunAndCheck(true);
}

void FederatedStatisticsTest::RunAndCheck(bool secure) {
  Rng rng(23);
  const int rows[] = {120, 60, 200, 8};
  std::vector<std::vector<std::array<float, 3>>> values(4);
  std::vector<int> malignant(4, 0);
  for (int site = 1; site <= 4; ++site) {
    std::ofstream out(dir_ / ("site-" + std::to_string(site) + ".csv"));
    out << "age,creatinine,smoker,diagnosis\n";
    for (int r = 0; r < rows[site - 1]; ++r) {
      // Written with 9 digits: read back as float32, the reference uses the same floats.
      char line[160];
      const double age = rng.Normal(50.0 + 3 * site, 12.0);
      const double creat = 1000.0 + rng.Normal(0.1 * site, 1.0);  // mean / std ~ 1e3
      const int smoker = rng.Uniform() < 0.3;
      const bool m = rng.Uniform() < 0.35;
      std::snprintf(line, sizeof line, "%.9g,%.9g,%d,%s\n", age, creat, smoker, m ? "malignant" : "benign");
      out << line;
      values[site - 1].push_back({static_cast<float>(std::strtod(line, nullptr)), 0.0f, static_cast<float>(smoker)});
      values[site - 1].back()[1] = static_cast<float>(std::strtod(std::strchr(line, ',') + 1, nullptr));
      malignant[site - 1] += m;
    }
  }
  const std::string ep = StartAggregator(
      {"rounds.total=1", "rounds.clients_per_round=4", "rounds.min_clients=3",
       "rounds.min_available_clients=4", "model.name=logreg", "model.input_shape=3",
       "model.num_classes=2", "eval.dataset=", "stats.enabled=true", "stats.bins=8",
       "stats.min_sites=3", "stats.report=stats.json",
       std::string("secagg.enabled=") + (secure ? "true" : "false"), "secagg.stage_timeout_s=30"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) {
    std::vector<std::string> sets = {"data.dataset=csv:site-" + std::to_string(i) + ".csv",
                                     "data.label_column=diagnosis", "data.label_values=benign,malignant",
                                     "data.num_partitions=1", "data.index=0", "data.test_fraction=0",
                                     "model.name=logreg", "secagg.allow=keys/allow"};
    if (i <= 2) sets.push_back("stats.minmax_noise=0");
    ASSERT_NE(StartNode(i, ep, sets), nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(120));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 120 s";
  ASSERT_EQ(*rc, 0) << aggregator_->Log();
  EXPECT_NE(aggregator_->Log().find("federated statistics: 3/4 site(s) released, 380 rows"),
            std::string::npos) << aggregator_->Log();
  EXPECT_EQ(MetricsLines().size(), 1u) << "round 1 trained after the statistics";

  const std::string report = ReadWholeFile(dir_ / "stats.json");
  const size_t fed_at = report.find("\"federation\":");
  const size_t sites_at = report.find(",\"sites\":{");
  ASSERT_NE(fed_at, std::string::npos) << report;
  ASSERT_NE(sites_at, std::string::npos) << report;
  const std::string fed = report.substr(fed_at, sites_at - fed_at);
  EXPECT_EQ(JsonNumber(fed, "rows").value_or(-1), 380);
  EXPECT_NE(fed.find("\"label_counts\":[" + std::to_string(380 - malignant[0] - malignant[1] - malignant[2]) +
                     "," + std::to_string(malignant[0] + malignant[1] + malignant[2]) + "]"),
            std::string::npos) << fed;
  const char* names[] = {"age", "creatinine", "smoker"};
  for (int j = 0; j < 3; ++j) {
    long double mean = 0, var = 0;
    float lo = INFINITY, hi = -INFINITY, lo12 = INFINITY;
    size_t n = 0;
    for (int s = 0; s < 3; ++s) {
      for (const auto& v : values[s]) {
        mean += v[j];
        ++n;
        lo = std::min(lo, v[j]);
        hi = std::max(hi, v[j]);
        if (s < 2) lo12 = std::min(lo12, v[j]);
      }
    }
    mean /= n;
    for (int s = 0; s < 3; ++s)
      for (const auto& v : values[s]) var += (v[j] - mean) * (v[j] - mean);
    var /= n;
    const size_t at = fed.find(std::string("{\"name\":\"") + names[j] + "\"");
    ASSERT_NE(at, std::string::npos) << names[j];
    const std::string f = fed.substr(at);
    EXPECT_EQ(JsonNumber(f, "count").value_or(-1), 380);
    EXPECT_NEAR(JsonNumber(f, "mean").value_or(-1), static_cast<double>(mean),
                1e-9 * std::fabs(static_cast<double>(mean))) << names[j];
    EXPECT_NEAR(JsonNumber(f, "variance").value_or(-1), static_cast<double>(var),
                1e-9 * static_cast<double>(var)) << names[j];
    // Site 3's noisy minimum may be the lowest; never above the true one.
    const double fmin = JsonNumber(f, "min").value_or(1e300);
    EXPECT_LE(fmin, lo) << names[j];
    EXPECT_GE(fmin, lo - (hi - lo)) << names[j];
    if (j == 2) EXPECT_LT(fmin, 0.0) << "site 3's noise pushes the 0/1 column's minimum below 0";
    const size_t h = f.find("\"counts\":[");
    ASSERT_NE(h, std::string::npos) << f;
    uint64_t total = 0;
    for (const char* p = f.c_str() + h + 10; *p != ']'; ++p) {
      char* end = nullptr;
      total += std::strtoull(p, &end, 10);
      p = end;
      if (*p == ']') break;
    }
    EXPECT_EQ(total, 380u) << "every row in one bin: " << f.substr(h, 80);
  }
  EXPECT_NE(report.find("\"site-4\":{\"released\":false,\"withheld\":\"this site has 8 rows, fewer "
                        "than its min_count 10\"}"),
            std::string::npos) << report.substr(sites_at);
  // Per site: sums in the clear without secure aggregation, none with it.
  const std::string site1 = report.substr(report.find("\"site-1\":"), 400);
  if (secure) {
    EXPECT_NE(site1.find("\"secure\":true"), std::string::npos) << site1;
    EXPECT_NE(site1.find("\"sum\":0,"), std::string::npos) << site1;
    EXPECT_NE(aggregator_->Log().find("secure"), std::string::npos);
  } else {
    EXPECT_EQ(JsonNumber(site1, "rows").value_or(-1), 120) << site1;
    EXPECT_NE(site1.find("\"sum\":"), std::string::npos) << site1;
    EXPECT_EQ(site1.find("\"sum\":0,"), std::string::npos) << site1;
  }
  if (fs::exists("/usr/bin/gnuplot")) EXPECT_GT(fs::file_size(dir_ / "stats.png"), 1000u);
  // numpy, when the machine has it (scripts/setup.sh installs it with the benchmarks).
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0) {
    const std::string script = std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/stats/check_pooled.py";
    const auto r = fedmesh::testing::RunShell("cd " + dir_.string() + " && /usr/bin/python3 " + script +
                                              " stats.json diagnosis site-1.csv site-2.csv site-3.csv");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("numpy pooled check: 380 rows, 3 features"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// Issue 19, [data] normalize = "federated": columns on scales 1000, 1 and 0.01 at every site;
// the aggregator collects the statistics, puts x' = (x - mean) / std with the federation's
// figures in front of its ONNX model and trains that. A site that pinned the original
// model's hash accepts it (the pinned model plus the normalization), the federation learns,
// and the exported ONNX carries the same constants as the statistics report and scores the
// raw rows.
TEST_F(FederationTest, FederationNormalizesInputsWithTheFederationsStatistics) {
  const std::string model = std::string(FEDMESH_SOURCE_DIR) + "/examples/breast_cancer/hospital_mlp.onnx";
  auto base = onnx::ReadOnnxFile(model);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  Rng rng(31);
  Dataset pooled;
  pooled.sample_shape = {30};
  pooled.num_classes = 2;
  for (int site = 1; site <= 3; ++site) {
    std::ofstream out(dir_ / ("site-" + std::to_string(site) + ".csv"));
    for (int c = 0; c < 30; ++c) out << "m" << c << ",";
    out << "diagnosis\n";
    for (int row = 0; row < 80 + 30 * site; ++row) {
      const bool malignant = rng.Uniform() < 0.35;
      for (int c = 0; c < 30; ++c) {
        const double scale = c % 3 == 0 ? 1000.0 : c % 3 == 1 ? 1.0 : 0.01;
        const double shift = (c < 3 && malignant) ? 1.5 : 0.0;
        char cell[32];
        std::snprintf(cell, sizeof cell, "%.9g", scale * (rng.Normal() + shift + 5.0));
        out << cell << ",";
        pooled.features.push_back(static_cast<float>(std::strtod(cell, nullptr)));
      }
      out << (malignant ? "malignant" : "benign") << "\n";
      pooled.labels.push_back(malignant);
    }
  }
  const std::string ep = StartAggregator(
      {"rounds.total=4", "rounds.clients_per_round=3", "rounds.min_clients=3",
       "rounds.min_available_clients=3", "model.onnx=" + model, "train.loss=bce_with_logits",
       "train.lr=0.05", "train.momentum=0.9", "train.batch=16", "train.epochs=2",
       "stats.enabled=true", "stats.min_sites=3", "stats.report=stats.json", "data.normalize=federated",
       "eval.dataset=", "eval.federated=true", "eval.min_sites=3"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 3; ++i) {
    std::vector<std::string> sets = {"data.dataset=csv:site-" + std::to_string(i) + ".csv",
                                     "data.label_column=diagnosis", "data.label_values=benign,malignant",
                                     "data.num_partitions=1", "data.index=0", "data.test_fraction=0.3"};
    if (i == 1) sets.push_back("model.expect_sha256=" + graph::CanonicalHash(*base));
    ASSERT_NE(StartNode(i, ep, sets), nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(180));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 180 s";
  ASSERT_EQ(*rc, 0) << aggregator_->Log();
  EXPECT_NE(aggregator_->Log().find("input normalization from the federation's statistics (30 features)"),
            std::string::npos) << aggregator_->Log();
  EXPECT_NE(ReadWholeFile(dir_ / "site-1.log").find("is the pinned one (expect_sha256) with the federation's "
                                                    "input normalization"),
            std::string::npos) << ReadWholeFile(dir_ / "site-1.log");
  std::string last;
  for (const std::string& l : MetricsLines())
    if (l.find("\"site\":\"*\"") != std::string::npos) last = l;
  EXPECT_GE(JsonNumber(last, "auc").value_or(-1), 0.9) << last;

  // The exported model: the report's means as its constants, and it scores raw rows.
  auto rc_export = fedmesh::testing::RunToCompletion(
      {kBin + "fedmesh-model", "export", "--db", "run/aggregator.db", "--out", "global.onnx"}, dir_,
      dir_ / "export.log", seconds(60));
  ASSERT_TRUE(rc_export.has_value() && *rc_export == 0) << ReadWholeFile(dir_ / "export.log");
  auto exported = onnx::ReadOnnxFile((dir_ / "global.onnx").string());
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  ASSERT_TRUE(graph::HasInputNormalization(*exported));
  const std::string report = ReadWholeFile(dir_ / "stats.json");
  for (const graph::Node& n : exported->nodes) {
    if (n.name != "fedmesh_input_norm_mean") continue;
    const std::vector<float>& mean = n.attrs.at("value").t.f;
    ASSERT_EQ(mean.size(), 30u);
    const size_t at = report.find("{\"name\":\"m4\"");
    ASSERT_NE(at, std::string::npos);
    EXPECT_FLOAT_EQ(mean[4], static_cast<float>(JsonNumber(report.substr(at), "mean").value_or(-1)));
    EXPECT_NEAR(mean[3], 5000.0f, 300.0f) << "the scale-1000 column's mean";
  }
  auto backend = MakeCpuBackend(1);
  auto m = Model::CreateFromGraph("exported", backend.get(), std::move(*exported));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  LossOptions loss;
  loss.kind = LossKind::kBceWithLogits;
  ASSERT_TRUE((*m)->SetLoss(loss).ok());
  SystemEnv env(1);
  TrainerOptions topt;
  topt.loss = loss;
  Trainer trainer(m->get(), topt, &env);
  auto eval = trainer.Evaluate(pooled);
  ASSERT_TRUE(eval.ok()) << eval.status().ToString();
  EXPECT_GE(eval->accuracy, 0.85) << "the exported model on raw rows";
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// [data] missing = "impute_mean": three sites with missing cells. With federated statistics
// every site fills its missing cells with the federation's feature means (those of the
// statistics report, over the present values of all sites) and trains; without them a
// site refuses the task, saying what the aggregator lacks.
TEST_F(FederationTest, FederationImputesMissingCellsWithTheFederationsMeans) {
  Rng rng(41);
  int missing = 0;
  for (int site = 1; site <= 3; ++site) {
    std::ofstream out(dir_ / ("site-" + std::to_string(site) + ".csv"));
    out << "age,creatinine,smoker,diagnosis\n";
    for (int r = 0; r < 40 + 20 * site; ++r) {
      const bool m = rng.Uniform() < 0.4;
      const bool gap = rng.Uniform() < 0.15;
      missing += gap;
      out << rng.Normal(50.0 + 5 * m, 10.0) << "," << (gap ? "NA" : std::to_string(1.0 + m + 0.3 * rng.Normal()))
          << "," << (rng.Uniform() < 0.3) << "," << (m ? "malignant" : "benign") << "\n";
    }
  }
  auto run = [&](bool stats) {
    const std::string ep = StartAggregator(
        {"rounds.total=2", "rounds.clients_per_round=3", "rounds.min_clients=3",
         "rounds.min_available_clients=3", "rounds.timeout_s=4", "rounds.max_retries=0",
         "model.name=logreg", "model.input_shape=3", "model.num_classes=2", "eval.dataset=",
         std::string("stats.enabled=") + (stats ? "true" : "false"), "stats.report=stats.json"},
        "tcp://127.0.0.1:*", stats ? "aggregator" : "aggregator-nostats");
    if (ep.empty()) return -1;
    for (int i = 1; i <= 3; ++i) {
      StartNode(i, ep,
                {"data.dataset=csv:site-" + std::to_string(i) + ".csv", "data.label_column=diagnosis",
                 "data.label_values=benign,malignant", "data.missing=impute_mean",
                 "data.num_partitions=1", "data.index=0", "data.test_fraction=0", "model.name=logreg",
                 "node.db=run/site-" + std::to_string(i) + (stats ? "" : "-nostats") + ".db"},
                "site-" + std::to_string(i) + (stats ? "" : "-nostats"));
    }
    const auto rc = aggregator_->WaitExit(seconds(120));
    return rc.has_value() ? *rc : -2;
  };
  ASSERT_EQ(run(true), 0) << aggregator_->Log();
  ASSERT_GT(missing, 10);
  int imputed = 0;
  for (int i = 1; i <= 3; ++i) {
    const std::string log = ReadWholeFile(dir_ / ("site-" + std::to_string(i) + ".log"));
    const size_t at = log.find("imputed ");
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_NE(log.find("missing cells with the federation's feature means"), std::string::npos) << log;
    imputed += std::stoi(log.substr(at + 8));
  }
  EXPECT_EQ(imputed, missing) << "every missing cell, once";
  const std::string report = ReadWholeFile(dir_ / "stats.json");
  const size_t creat = report.find("{\"name\":\"creatinine\"");
  ASSERT_NE(creat, std::string::npos);
  EXPECT_EQ(JsonNumber(report.substr(creat), "count").value_or(-1), 240 - missing)
      << "the statistics count only present cells";
  EXPECT_EQ(MetricsLines().size(), 2u);

  // Without statistics: refused, and the reason names what to turn on.
  fs::remove_all(dir_ / "run");
  fs::create_directories(dir_ / "run");
  EXPECT_NE(run(false), 0);
  const std::string log = ReadWholeFile(dir_ / "site-1-nostats.log");
  EXPECT_NE(log.find("the aggregator sent none: it needs [stats] enabled"), std::string::npos) << log;
}

}  // namespace
}  // namespace fedmesh
