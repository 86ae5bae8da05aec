// The AggregatorService test fixture (tests/aggregator/aggregator_service_test.cc and
// aggregator_service_operations_test.cc): the real service with its ZmqServer on a
// loopback port the OS picks, SQLite store in a temp dir, and in-process fake nodes over
// real ZmqClients (CurveZMQ) that answer each FitTask with global + a fixed delta, so the
// FedAvg result can be computed by hand. Everything runs on the test thread: the test
// alternates service Steps with node polls, and every wait is a bounded loop with a
// deadline.
#pragma once

#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>
#include <gtest/gtest.h>
#include "core/env.h"
#include "core/wire/wire_codec.h"
#include "crypto/identity.h"
#include "crypto/key_files.h"
#include "crypto/update_signature.h"
#include "aggregator/aggregator_service.h"
#include "transport/zmq/zmq_client.h"
#include "tests/telemetry/metrics_http.h"

namespace fedmesh {
namespace aggsvc_testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kFed[] = "fed-test";

struct TempDir {
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "fedmesh-aggsvc-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

inline Identity NewIdentity(const std::string& name) {
  auto id = Identity::Generate(name);
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return std::move(id).value();
}

// 30 samples of 4 features, 3 classes: a tiny eval set for a logreg of 15 parameters.
inline Dataset TinyEvalSet() {
  Dataset d;
  d.sample_shape = {4};
  d.num_classes = 3;
  for (int i = 0; i < 30; ++i) {
    int label = i % 3;
    for (int f = 0; f < 4; ++f) d.features.push_back(f == label ? 1.0f : 0.1f * (i % 5));
    d.labels.push_back(label);
  }
  return d;
}

// A fake site: registers with its key's name and answers every FitTask with
// global + delta, reporting num_examples.
struct FakeNode {
  FakeNode(std::string n, Identity id) : name(std::move(n)), identity(std::move(id)) {}

  std::string name;
  Identity identity;
  std::unique_ptr<ZmqClient> client;
  std::vector<float> delta;
  uint64_t num_examples = 0;
  uint64_t claim_examples = 0;  // what FitResults claim; 0: num_examples, as registered
  bool answer = true;  // answer FitTasks as they arrive
  bool sign = true;    // sign updates (crypto/update_signature.h), as a real node does
  uint64_t next_id = 1;
  int fit_tasks_seen = 0;
  int messages_seen = 0;
  std::vector<wire::Message> held;  // FitTasks received while answer was false
  std::set<wire::DigestKind> task_digests;  // the digest kinds its FitTasks came with

  void Connect(const std::string& endpoint, const PublicIdentity& agg, int send_timeout_ms = 5000) {
    ZmqClientOptions o;
    o.federation_id = kFed;
    o.node_id = name;
    o.send_timeout_ms = send_timeout_ms;
    auto c = ZmqClient::Create(o, &identity);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client = std::move(c).value();
    ASSERT_TRUE(client->Connect(endpoint, agg.curve_public).ok());
  }
  Status Register() {
    wire::Message m{{kFed, name, 0, 0, next_id++}, wire::Register{name, num_examples, {}}};
    return client->Send(m);
  }
  void Answer(const wire::Message& task_msg) {
    const auto& task = std::get<wire::FitTask>(task_msg.body);
    auto global = wire::PayloadFloats(task.global_model);
    ASSERT_TRUE(global.ok()) << global.status().ToString();
    ASSERT_EQ(global->size(), delta.size());
    wire::FitResult r;
    r.round = task.round;
    r.num_examples = claim_examples > 0 ? claim_examples : num_examples;
    r.train_loss = 0.5;
    r.update = wire::FloatPayload(delta);  // the change to the global model
    r.bytes_before_codec = delta.size() * 4;
    r.bytes_after_codec = r.update.bytes.size();
    if (sign) {
      // In the task's digest kind, as a real site does (crypto/update_signature.h).
      ASSERT_TRUE(SignUpdate(identity, kFed, task_msg.header.model_version, &r,
                             wire::KindOf(task.global_model.digest)).ok());
    }
    wire::Message m{{kFed, name, task_msg.header.round, task_msg.header.model_version, next_id++},
                    std::move(r)};
    ASSERT_TRUE(client->Send(m).ok());
  }
  void AnswerHeld() {
    for (const auto& m : held) Answer(m);
    held.clear();
  }
  // Handles every message waiting, without blocking.
  void Pump() {
    if (!client) return;  // not connected yet
    for (;;) {
      auto m = client->Poll(0);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      if (!m->has_value()) return;
      ++messages_seen;
      const wire::Message& msg = **m;
      if (std::holds_alternative<wire::FitTask>(msg.body)) {
        ++fit_tasks_seen;
        const auto& digest = std::get<wire::FitTask>(msg.body).global_model.digest;
        if (digest) task_digests.insert(digest->kind);
        EXPECT_GT(std::get<wire::FitTask>(msg.body).deadline_unix_ms, 0u);
        if (answer) {
          Answer(msg);
        } else {
          held.push_back(msg);
        }
      }
    }
  }
};

class AggregatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    agg_ = NewIdentity("aggregator");
    ASSERT_TRUE(WriteIdentity(dir_.path + "/aggregator", agg_).ok());
    fs::create_directories(dir_.path + "/keys");
    fs::create_directories(dir_.path + "/allow");
    const char* names[] = {"site-a", "site-b", "site-c"};
    for (int k = 0; k < 3; ++k) {
      FakeNode n{names[k], NewIdentity(names[k])};
      n.num_examples = 10u * (k + 1);
      const std::string prefix = dir_.path + "/keys/" + n.name;
      ASSERT_TRUE(WriteIdentity(prefix, n.identity).ok());
      fs::copy_file(PublicKeyPath(prefix), dir_.path + "/allow/" + n.name + ".pub");
      nodes_.push_back(std::move(n));
    }

    config_.federation_id = kFed;
    config_.listen = "tcp://127.0.0.1:*";
    config_.key_path = SecretKeyPath(dir_.path + "/aggregator");
    config_.allow_dir = dir_.path + "/allow";
    config_.db_path = dir_.path + "/agg.db";
    config_.metrics_path = dir_.path + "/metrics.jsonl";
    config_.rounds.federation_id = kFed;
    config_.rounds.total_rounds = 2;
    config_.rounds.clients_per_round = 3;
    config_.rounds.min_clients = 3;
    config_.rounds.min_available_clients = 3;
    config_.rounds.timeout_s = 60;
    config_.model.name = "logreg";
    config_.model.input_shape = {4};  // TinyEvalSet
    config_.model.num_classes = 3;
    config_.model_seed = 7;
    config_.eval_dataset = "";
  }

  // The service for config_, or why it would not start.
  Result<std::unique_ptr<AggregatorService>> CreateService() {
    AggregatorServiceOptions o;
    o.eval_data = TinyEvalSet();
    return AggregatorService::Create(config_, &env_, std::move(o));
  }

  std::unique_ptr<AggregatorService> StartService() {
    auto s = CreateService();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return nullptr;
    return std::move(s).value();
  }

  void ConnectNodes(const std::string& endpoint, size_t params) {
    for (size_t k = 0; k < nodes_.size(); ++k) {
      FakeNode& n = nodes_[k];
      n.delta.resize(params);
      for (size_t i = 0; i < params; ++i) {
        n.delta[i] = 0.01f * static_cast<float>(k + 1) * static_cast<float>(int(i % 5) - 2);
      }
      n.Connect(endpoint, agg_.public_identity());
      ASSERT_TRUE(n.Register().ok());
    }
  }

  // Alternates service steps and node pumps until `done` or a 10 s deadline.
  bool PumpUntil(AggregatorService& s, const std::function<bool()>& done) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      if (done()) return true;
      auto step = s.Step(5);
      EXPECT_TRUE(step.ok()) << step.status().ToString();
      if (!step.ok()) return false;
      for (FakeNode& n : nodes_) n.Pump();
    }
    return done();
  }

  // g + sum_k n_k delta_k / sum_k n_k, over `nodes`.
  std::vector<double> FedAvgStep(const std::vector<double>& g) {
    std::vector<double> out = g;
    double total = 0;
    for (const FakeNode& n : nodes_) total += static_cast<double>(n.num_examples);
    for (size_t i = 0; i < g.size(); ++i) {
      double s = 0;
      for (const FakeNode& n : nodes_) s += static_cast<double>(n.num_examples) * n.delta[i];
      out[i] += s / total;
    }
    return out;
  }

  TempDir dir_;
  Identity agg_ = NewIdentity("placeholder");
  std::vector<FakeNode> nodes_;
  AggregatorConfig config_;
  SystemEnv env_{42};
};

}  // namespace aggsvc_testing
}  // namespace fedmesh
