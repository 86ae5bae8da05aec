// The round engine tests' fixture: a fake clock, test options and Harness, one engine and N
// fake nodes in one process exchanging wire::Message values directly (no sockets, no
// codec), with a clock the test moves by hand. In a named namespace: every test file of the
// engine uses the same types.
#pragma once

#include "aggregator/round_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aggregator/strategy.h"
#include "core/codec/payload.h"
#include "core/env.h"
#include "core/wire/wire_codec.h"
#include "crypto/dp/rdp_accountant.h"

namespace fedmesh::round_engine_testing {

using Output = RoundEngine::Output;

constexpr char kFed[] = "fed-test";

// Time is a number the test sets; randomness is a seeded Rng (sim/ is not linked here).
class FakeEnv final : public Env {
 public:
  explicit FakeEnv(uint64_t seed) : rng_(seed) {}
  double NowSeconds() const override { return now_; }
  Rng& rng() override { return rng_; }
  void Set(double t) { now_ = t; }
  void Advance(double dt) { now_ += dt; }

 private:
  double now_ = 1000.0;  // not 0: the engine must not assume time starts at 0
  Rng rng_;
};

inline RoundEngineOptions TestOptions() {
  RoundEngineOptions o;
  o.federation_id = kFed;
  o.total_rounds = 3;
  o.clients_per_round = 4;
  o.min_clients = 2;
  o.timeout_s = 60.0;
  o.max_retries = 2;
  o.local_epochs = 2;
  o.batch_size = 16;
  o.learning_rate = 0.05;
  o.momentum = 0.9;
  return o;
}

// TestOptions() where a round waits for `n` connected nodes before opening.
inline RoundEngineOptions WaitFor(int n, RoundEngineOptions o = TestOptions()) {
  o.min_available_clients = n;
  return o;
}

template <typename T>
std::vector<T> Filter(const std::vector<Output>& outs) {
  std::vector<T> found;
  for (const Output& o : outs) {
    if (const T* t = std::get_if<T>(&o)) found.push_back(*t);
  }
  return found;
}

// The engine, the fake clock, and every node's inbox. A fake node answers a FitTask with
// params = global + its own delta, so the expected FedAvg result is easy to compute by hand.
class Harness {
 public:
  struct Node {
    uint64_t num_examples = 0;
    float delta = 0.0f;
    std::vector<wire::Message> inbox;
    uint64_t next_message_id = 1;
  };

  explicit Harness(RoundEngineOptions options = TestOptions(), std::vector<float> global = {0, 0},
                   uint64_t seed = 1, std::unique_ptr<Strategy> strategy = nullptr,
                   Evaluator evaluator = {})
      : env(seed) {
    if (!strategy) strategy = std::make_unique<FedAvg>();
    auto e = RoundEngine::Create(std::move(options), &env, std::move(strategy), std::move(global),
                                 std::move(evaluator));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine.emplace(std::move(e).value());
    Absorb(engine->Start());
  }

  // Restored engine.
  explicit Harness(RoundEngine::RestoredState state, RoundEngineOptions options = TestOptions(),
                   uint64_t seed = 1, std::unique_ptr<Strategy> strategy = nullptr)
      : env(seed) {
    if (!strategy) strategy = std::make_unique<FedAvg>();
    auto e = RoundEngine::Restore(std::move(options), &env, std::move(strategy), {},
                                  std::move(state));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine.emplace(std::move(e).value());
    start_outputs = engine->Start();
    Absorb(start_outputs);
  }

  // Routes sends to inboxes and records timers and events; returns `outs` for inspection.
  const std::vector<Output>& Absorb(const std::vector<Output>& outs) {
    for (const Output& o : outs) {
      if (const auto* send = std::get_if<RoundEngine::Send>(&o)) {
        nodes[send->to].inbox.push_back(send->message);
      } else if (const auto* timer = std::get_if<RoundEngine::SetTimer>(&o)) {
        timers.push_back(timer->at_seconds);
      } else {
        events.push_back(o);
      }
    }
    return outs;
  }

  wire::Header HeaderFrom(const std::string& id, uint64_t round = 0) {
    return wire::Header{kFed, id, round, 0, nodes[id].next_message_id++};
  }

  std::vector<Output> Deliver(const std::string& from, const wire::Message& m) {
    std::vector<Output> outs = engine->OnMessage(from, m);
    Absorb(outs);
    return outs;
  }

  std::vector<Output> Register(const std::string& id, uint64_t num_examples, float delta = 0) {
    nodes[id].num_examples = num_examples;
    nodes[id].delta = delta;
    return Deliver(id, wire::Message{HeaderFrom(id), wire::Register{id, num_examples, {}}});
  }

  // The most recent FitTask in `id`'s inbox, if any.
  std::optional<wire::FitTask> LastFitTask(const std::string& id) {
    auto& inbox = nodes[id].inbox;
    for (auto it = inbox.rbegin(); it != inbox.rend(); ++it) {
      if (const auto* t = std::get_if<wire::FitTask>(&it->body)) return *t;
    }
    return std::nullopt;
  }

  wire::Message FitResultMessage(const std::string& id, uint64_t round,
                                 const std::vector<float>& params,
                                 std::optional<uint64_t> num_examples = std::nullopt) {
    wire::FitResult r;
    r.round = round;
    r.num_examples = num_examples.value_or(nodes[id].num_examples);
    r.train_loss = 0.5;
    // Tests speak in new weights; the wire carries the change to the global model the
    // node last received.
    std::vector<float> delta = params;
    if (std::optional<wire::FitTask> task = LastFitTask(id)) {
      std::vector<float> global = wire::PayloadFloats(task->global_model).value();
      for (size_t i = 0; i < delta.size() && i < global.size(); ++i) delta[i] -= global[i];
    }
    r.update = wire::FloatPayload(delta);
    r.bytes_before_codec = r.bytes_after_codec = r.update.bytes.size();
    return wire::Message{HeaderFrom(id, round), r};
  }

  // The node trains on its last FitTask: params = global + delta.
  std::vector<float> Train(const std::string& id) {
    std::optional<wire::FitTask> task = LastFitTask(id);
    EXPECT_TRUE(task.has_value()) << id << " has no FitTask";
    if (!task) return {};
    std::vector<float> params = wire::PayloadFloats(task->global_model).value();
    for (float& p : params) p += nodes[id].delta;
    return params;
  }

  std::vector<Output> Answer(const std::string& id) {
    const uint64_t round = LastFitTask(id)->round;
    return Deliver(id, FitResultMessage(id, round, Train(id)));
  }

  // Moves the clock to the latest timer and fires it.
  std::vector<Output> FireTimer() {
    EXPECT_FALSE(timers.empty());
    env.Set(timers.back());
    std::vector<Output> outs = engine->OnTimer(env.NowSeconds());
    Absorb(outs);
    return outs;
  }

  template <typename T>
  std::vector<T> Events() const {
    return Filter<T>(events);
  }

  FakeEnv env;
  std::optional<RoundEngine> engine;
  std::map<std::string, Node> nodes;
  std::vector<double> timers;
  std::vector<Output> events;
  std::vector<Output> start_outputs;
};

}  // namespace fedmesh::round_engine_testing
