// FederationTest: the fixture of the real-process federation tests (federation_test.cc,
// federation_site_data_test.cc): fedmesh-aggregator and fedmesh-node binaries on loopback
// with CurveZMQ and real SQLite stores, every child SIGKILLed in TearDown, logs printed and
// the directory kept on failure (FEDMESH_KEEP_TEST_DIRS=1 keeps it after a pass too).
// In a named namespace: gtest requires every TEST_F of a suite to use the same fixture type.
#pragma once

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
#include <ctime>
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

namespace fedmesh::federation_testing {


namespace fs = std::filesystem;
using fedmesh::testing::ChildProcess;
using fedmesh::testing::JsonNumber;
using fedmesh::testing::SplitLines;
using fedmesh::testing::Clock;
using fedmesh::testing::ReadWholeFile;
using fedmesh::testing::WaitUntil;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline const std::string kBin = FEDMESH_BINARY_DIR "/bin/";
inline const fs::path kExampleDir = fs::path(FEDMESH_SOURCE_DIR) / "examples" / "fashion-mnist";

// Whether `port` can be bound on loopback now.
inline bool LoopbackPortFree(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;  // as the binaries' listeners (libzmq) do: TIME_WAIT does not count
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return free;
}

// The ports FreeLoopbackPort and FreeLoopbackPortPair handed out in this process.
inline std::set<int>& HandedOutPorts() {
  static std::set<int> ports;
  return ports;
}

// A loopback TCP port that was free a moment ago (for configs that must name their port).
// Picked below the kernel's ephemeral range (32768 and up here), so that no outgoing
// connection of another test takes it before the binary binds it (what a port from bind(0)
// risked), at a start that differs per process (tests run two at a time), and never the
// same one twice in a process.
inline int FreeLoopbackPort() {
  constexpr int kLow = 20000, kCount = 12000;
  std::set<int>& handed_out = HandedOutPorts();
  static int next = kLow + static_cast<int>((static_cast<unsigned>(::getpid()) * 7919u +
                                             static_cast<unsigned>(::time(nullptr))) % kCount);
  for (int tried = 0; tried < kCount; ++tried) {
    const int port = next;
    next = next + 1 < kLow + kCount ? next + 1 : kLow;
    if (handed_out.count(port) == 0 && LoopbackPortFree(port)) {
      handed_out.insert(port);
      return port;
    }
  }
  ADD_FAILURE() << "no free loopback port in [" << kLow << ", " << kLow + kCount << ")";
  return 0;
}

// A loopback port that was free a moment ago, with the one above it free too (a member
// whose SWIM listens on its ring port + 1).
inline int FreeLoopbackPortPair() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int p = FreeLoopbackPort();
    if (p < 65535 && HandedOutPorts().count(p + 1) == 0 && LoopbackPortFree(p + 1)) {
      HandedOutPorts().insert(p + 1);
      return p;
    }
  }
  return FreeLoopbackPort();
}

inline bool HaveFashionMnist() {
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

  // `cwd`: where it runs; empty = the test's folder.
  ChildProcess* Spawn(const std::string& name, std::vector<std::string> argv,
                      std::map<std::string, std::string> env = {}, const fs::path& cwd = {}) {
    env.emplace("OMP_WAIT_POLICY", "passive");
    env.emplace("OMP_NUM_THREADS", "1");
    auto child = ChildProcess::Spawn(name, argv, cwd.empty() ? dir_ : cwd, dir_ / (name + ".log"), env);
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
      if (s.rfind("--", 0) != 0) argv.push_back("--set");  // "--flag=value" goes as is
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
      if (s.rfind("--", 0) != 0) argv.push_back("--set");  // "--flag=value" goes as is
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

  // `fedmesh-model export` of the store's last global model as global.onnx, read back with
  // fedmesh's ONNX reader.
  Result<graph::Graph> ExportGlobalModel(const std::string& db) {
    auto rc = fedmesh::testing::RunToCompletion(
        {kBin + "fedmesh-model", "export", "--db", db, "--out", "global.onnx"}, dir_,
        dir_ / "export.log", seconds(60));
    if (!rc.has_value() || *rc != 0) return Status::Internal("export failed: " + ReadWholeFile(dir_ / "export.log"));
    return onnx::ReadOnnxFile((dir_ / "global.onnx").string());
  }

  // The exported global model (ExportGlobalModel) evaluated on the Fashion-MNIST test set;
  // -1 on failure.
  double ExportedAccuracy(const std::string& db) {
    auto g = ExportGlobalModel(db);
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

}  // namespace fedmesh::federation_testing
