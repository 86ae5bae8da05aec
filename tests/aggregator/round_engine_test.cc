// Round engine tests: one engine and N fake nodes in one process, exchanging wire::Message
// values directly (no sockets, no codec), with a fake clock the test moves by hand.
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

namespace fedmesh {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
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

RoundEngineOptions TestOptions() {
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
RoundEngineOptions WaitFor(int n, RoundEngineOptions o = TestOptions()) {
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

// ---- Options -----------------------------------------------------------------------------

TEST(RoundEngineOptionsTest, ValidateNamesTheOffendingField) {
  EXPECT_TRUE(Validate(TestOptions()).ok());
  struct Case {
    std::function<void(RoundEngineOptions&)> mutate;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](auto& o) { o.federation_id = ""; }, "federation_id is empty"},
      {[](auto& o) { o.federation_id = "has space"; }, "printable ASCII"},
      {[](auto& o) { o.aggregator_id = ""; }, "aggregator_id"},
      {[](auto& o) { o.total_rounds = 0; }, "total_rounds"},
      {[](auto& o) { o.clients_per_round = 0; }, "clients_per_round"},
      {[](auto& o) { o.min_clients = 0; }, "min_clients"},
      {[](auto& o) { o.min_clients = 5; }, "min_clients (5) exceeds clients_per_round (4)"},
      {[](auto& o) { o.min_available_clients = 1; }, "min_available_clients (1) is below"},
      {[](auto& o) { o.timeout_s = 0; }, "timeout_s"},
      {[](auto& o) { o.timeout_s = std::nan(""); }, "timeout_s"},
      {[](auto& o) { o.max_retries = -1; }, "max_retries"},
      {[](auto& o) { o.local_epochs = 0; }, "local_epochs"},
      {[](auto& o) { o.batch_size = -3; }, "batch_size"},
      {[](auto& o) { o.learning_rate = 0; }, "learning_rate"},
      {[](auto& o) { o.momentum = 1.0; }, "momentum"},
      {[](auto& o) { o.heartbeat_interval_ms = 0; }, "heartbeat_interval_ms"},
  };
  for (const Case& c : cases) {
    RoundEngineOptions o = TestOptions();
    c.mutate(o);
    Status s = Validate(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.expect;
    EXPECT_THAT(s.message(), HasSubstr(c.expect));
  }
  // The default options leave the federation id to the operator.
  EXPECT_THAT(Validate(RoundEngineOptions{}).message(), HasSubstr("federation_id"));
}

TEST(RoundEngineOptionsTest, CreateRejectsBadOptionsStrategyAndModel) {
  FakeEnv env(1);
  auto bad_options = TestOptions();
  bad_options.min_clients = 9;
  auto r = RoundEngine::Create(bad_options, &env, std::make_unique<FedAvg>(), {0.0f});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  r = RoundEngine::Create(TestOptions(), &env, nullptr, {0.0f});
  EXPECT_THAT(r.status().message(), HasSubstr("strategy is null"));

  r = RoundEngine::Create(TestOptions(), &env, std::make_unique<FedAvg>(), {});
  EXPECT_THAT(r.status().message(), HasSubstr("no parameters"));

  r = RoundEngine::Create(TestOptions(), &env, std::make_unique<FedAvg>(),
                          {1.0f, std::numeric_limits<float>::infinity()});
  EXPECT_THAT(r.status().message(), HasSubstr("index 1"));
}

// ---- Rounds ------------------------------------------------------------------------------

TEST(RoundEngineTest, WaitsUntilMinClientsAreRegistered) {
  Harness h;  // min_clients = 2
  EXPECT_TRUE(h.timers.empty());
  std::vector<Output> outs = h.Register("n1", 10);
  ASSERT_EQ(outs.size(), 1u);  // only the ack
  const auto& ack = std::get<RoundEngine::Send>(outs[0]);
  EXPECT_EQ(ack.to, "n1");
  EXPECT_EQ(std::get<wire::RegisterAck>(ack.message.body), (wire::RegisterAck{"n1", 5000}));
  EXPECT_EQ(ack.message.header.federation_id, kFed);
  EXPECT_EQ(ack.message.header.sender_id, "aggregator");
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);
  EXPECT_TRUE(h.Events<RoundEngine::RoundOpened>().empty());
  EXPECT_FALSE(h.LastFitTask("n1").has_value());

  h.env.Advance(5);
  outs = h.Register("n2", 10);
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kRoundOpen);
  auto opened = Filter<RoundEngine::RoundOpened>(outs);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0].round, 1u);
  EXPECT_EQ(opened[0].attempt, 1u);
  EXPECT_THAT(opened[0].selected, ElementsAre("n1", "n2"));  // all, fewer than 4 connected
  EXPECT_EQ(opened[0].deadline_s, 1005.0 + 60.0);
  EXPECT_THAT(h.timers, ElementsAre(1065.0));
  EXPECT_TRUE(h.LastFitTask("n1").has_value());
  EXPECT_TRUE(h.LastFitTask("n2").has_value());
}

TEST(RoundEngineTest, ThreeRoundsOfFedAvgMatchTheHandComputation) {
  // Weights 128, 384, 256, 256 (sum 1024) and deltas 1, 5, -2, 0.5:
  // (128*1 + 384*5 - 256*2 + 256*0.5) / 1024 = 1664 / 1024 = 1.625 per round, exact in float.
  std::vector<double> evaluated_first;
  Evaluator eval = [&](std::span<const float> g) {
    evaluated_first.push_back(g[0]);
    return EvalResult{0.25 * static_cast<double>(evaluated_first.size()), 1.0, {}};
  };
  Harness h(WaitFor(4), {0.0f, 1.0f, -3.0f, 0.25f}, 1, nullptr, eval);
  h.Register("n1", 128, 1.0f);
  h.Register("n2", 384, 5.0f);
  h.Register("n3", 256, -2.0f);
  h.Register("n4", 256, 0.5f);
  for (uint64_t round = 1; round <= 3; ++round) {
    ASSERT_EQ(h.engine->round(), round);
    ASSERT_THAT(h.engine->selected(), ElementsAre("n1", "n2", "n3", "n4"));
    const wire::FitTask task = *h.LastFitTask("n3");
    EXPECT_EQ(task.round, round);
    EXPECT_EQ(task.local_epochs, 2u);
    EXPECT_EQ(task.batch_size, 16u);
    EXPECT_EQ(task.learning_rate, 0.05);
    EXPECT_EQ(task.momentum, 0.9);
    EXPECT_EQ(task.prox_mu, 0.0);
    EXPECT_EQ(task.deadline_unix_ms, 0u);
    EXPECT_EQ(wire::PayloadFloats(task.global_model).value(), h.engine->global());
    for (const char* id : {"n4", "n2", "n1"}) {  // arrival order must not matter
      auto outs = h.Answer(id);
      ASSERT_EQ(Filter<RoundEngine::UpdateAccepted>(outs).size(), 1u) << id;
      EXPECT_TRUE(Filter<RoundEngine::RoundClosed>(outs).empty());
    }
    auto outs = h.Answer("n3");  // the last selected node closes the round at once
    auto closed = Filter<RoundEngine::RoundClosed>(outs);
    ASSERT_EQ(closed.size(), 1u);
    const float add = 1.625f * static_cast<float>(round);
    EXPECT_THAT(closed[0].global, ElementsAre(0.0f + add, 1.0f + add, -3.0f + add, 0.25f + add));
    EXPECT_EQ(closed[0].global, h.engine->global());
    EXPECT_EQ(closed[0].round, round);
    EXPECT_EQ(closed[0].model_version, round);
    EXPECT_EQ(closed[0].metrics.selected, 4u);
    EXPECT_EQ(closed[0].metrics.received, 4u);
    EXPECT_EQ(closed[0].metrics.rejected, 0u);
    EXPECT_EQ(closed[0].metrics.attempts, 1u);
    EXPECT_EQ(closed[0].metrics.num_examples, 1024u);
    EXPECT_EQ(closed[0].metrics.train_loss, 0.5);
    EXPECT_EQ(closed[0].metrics.test_accuracy, 0.25 * static_cast<double>(round));
    EXPECT_EQ(closed[0].metrics.test_loss, 1.0);
    EXPECT_EQ(evaluated_first.back(), 0.0 + add);  // evaluated the new model
  }
  auto finished = h.Events<RoundEngine::Finished>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].status.ok());
  EXPECT_EQ(finished[0].rounds_completed, 3u);
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kFinished);
  EXPECT_EQ(h.engine->model_version(), 3u);
  EXPECT_EQ(h.Events<RoundEngine::RoundOpened>().size(), 3u);
  EXPECT_EQ(h.Events<RoundEngine::UpdateAccepted>().size(), 12u);
  EXPECT_EQ(h.engine->rejected_total(), 0u);
}

TEST(RoundEngineTest, QuorumClosesAtTheDeadlineWithMinClients) {
  Harness h(WaitFor(4));
  h.Register("n1", 128, 1.0f);
  h.Register("n2", 384, 5.0f);
  h.Register("n3", 256, -2.0f);
  h.Register("n4", 256, 0.5f);
  h.Answer("n1");
  h.Answer("n2");
  EXPECT_THAT(h.engine->answered(), ElementsAre("n1", "n2"));

  // A timer before the deadline changes nothing.
  EXPECT_TRUE(h.engine->OnTimer(h.engine->deadline_s() - 1).empty());
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kRoundOpen);

  auto outs = h.FireTimer();
  auto closed = Filter<RoundEngine::RoundClosed>(outs);
  ASSERT_EQ(closed.size(), 1u);
  // (128 * 1 + 384 * 5) / 512 = 4.
  EXPECT_THAT(closed[0].global, ElementsAre(4.0f, 4.0f));
  EXPECT_EQ(closed[0].metrics.selected, 4u);
  EXPECT_EQ(closed[0].metrics.received, 2u);
  EXPECT_EQ(closed[0].metrics.num_examples, 512u);
  EXPECT_EQ(closed[0].metrics.duration_s, 60.0);
  EXPECT_FALSE(closed[0].metrics.test_accuracy.has_value());  // no evaluator
  // The next round opened straight away.
  EXPECT_EQ(h.engine->round(), 2u);
  EXPECT_EQ(Filter<RoundEngine::RoundOpened>(outs).size(), 1u);

  // The stragglers of round 1 are now late.
  outs = h.Deliver("n3", h.FitResultMessage("n3", 1, {0.0f, 0.0f}));
  ASSERT_EQ(Filter<RoundEngine::UpdateRejected>(outs).size(), 1u);
  EXPECT_EQ(Filter<RoundEngine::UpdateRejected>(outs)[0].cause, RejectCause::kLate);
}

TEST(RoundEngineTest, TimeoutBelowQuorumRetriesTheSameRoundWithAFreshSelection) {
  RoundEngineOptions o = TestOptions();
  o.clients_per_round = 3;
  Harness h(WaitFor(6, o), {0.0f, 0.0f}, /*seed=*/3);
  for (const char* id : {"a", "b", "c", "d", "e", "f"}) h.Register(id, 100, 1.0f);
  const std::vector<std::string> first = h.engine->selected();
  ASSERT_EQ(first.size(), 3u);
  h.Answer(first[0]);  // 1 of 3: below min_clients = 2

  auto outs = h.FireTimer();
  auto retried = Filter<RoundEngine::RoundRetried>(outs);
  ASSERT_EQ(retried.size(), 1u);
  EXPECT_EQ(retried[0].round, 1u);
  EXPECT_EQ(retried[0].failed_attempt, 1u);
  EXPECT_EQ(retried[0].received, 1u);
  EXPECT_THAT(retried[0].reason, HasSubstr("only 1 of 3"));
  EXPECT_TRUE(Filter<RoundEngine::RoundClosed>(outs).empty());

  auto opened = Filter<RoundEngine::RoundOpened>(outs);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0].round, 1u);  // same round number
  EXPECT_EQ(opened[0].attempt, 2u);
  EXPECT_EQ(opened[0].deadline_s, h.env.NowSeconds() + 60.0);
  EXPECT_EQ(h.timers.back(), opened[0].deadline_s);
  const std::vector<std::string> second = h.engine->selected();
  EXPECT_EQ(opened[0].selected, second);
  EXPECT_NE(second, first);  // redrawn (this seed draws a different set)
  for (const auto& id : second) {
    EXPECT_EQ(h.LastFitTask(id)->round, 1u) << id;
  }
  EXPECT_EQ(h.engine->round(), 1u);
  EXPECT_EQ(h.engine->retries(), 1u);
  EXPECT_EQ(h.engine->total_retries(), 1u);
  EXPECT_TRUE(h.engine->answered().empty());  // the failed attempt's update is dropped
  EXPECT_EQ(h.engine->model_version(), 0u);
  EXPECT_THAT(h.engine->global(), ElementsAre(0.0f, 0.0f));

  // A node of the failed attempt that was not drawn again is late, not "not selected".
  for (const auto& id : first) {
    if (std::find(second.begin(), second.end(), id) != second.end()) continue;
    outs = h.Deliver(id, h.FitResultMessage(id, 1, {1.0f, 1.0f}));
    auto rejected = Filter<RoundEngine::UpdateRejected>(outs);
    ASSERT_EQ(rejected.size(), 1u);
    EXPECT_EQ(rejected[0].cause, RejectCause::kLate);
    EXPECT_THAT(rejected[0].text, HasSubstr("earlier attempt"));
    break;
  }

  for (const auto& id : second) h.Answer(id);
  auto closed = h.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].round, 1u);
  EXPECT_EQ(closed[0].metrics.attempts, 2u);
  EXPECT_EQ(closed[0].metrics.received, 3u);
  EXPECT_THAT(closed[0].global, ElementsAre(1.0f, 1.0f));
  EXPECT_EQ(h.engine->round(), 2u);
  EXPECT_EQ(h.engine->retries(), 0u);
  EXPECT_EQ(h.engine->total_retries(), 1u);
}

TEST(RoundEngineTest, GivesUpAfterMaxRetries) {
  RoundEngineOptions o = TestOptions();
  o.max_retries = 1;
  Harness h(o);
  for (const char* id : {"a", "b", "c"}) h.Register(id, 100);
  auto outs = h.FireTimer();  // nobody answered: retry 1
  EXPECT_EQ(Filter<RoundEngine::RoundRetried>(outs).size(), 1u);
  h.Answer("a");
  outs = h.FireTimer();  // 1 < 2 again, and no retries left
  EXPECT_TRUE(Filter<RoundEngine::RoundRetried>(outs).empty());
  auto finished = Filter<RoundEngine::Finished>(outs);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(finished[0].status.message(), HasSubstr("round 1 failed after 2 attempts"));
  EXPECT_EQ(finished[0].rounds_completed, 0u);
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kFinished);
  // Nothing opens any more.
  EXPECT_TRUE(h.engine->OnTimer(h.env.NowSeconds() + 1000).empty());
  outs = h.Register("d", 100);
  EXPECT_TRUE(Filter<RoundEngine::RoundOpened>(outs).empty());
}

TEST(RoundEngineTest, RetryWaitsForNodesWhenTooFewAreConnected) {
  Harness h;
  h.Register("a", 100);
  h.Register("b", 100);
  h.engine->OnDisconnect("b");
  auto outs = h.FireTimer();
  EXPECT_EQ(Filter<RoundEngine::RoundRetried>(outs).size(), 1u);
  EXPECT_TRUE(Filter<RoundEngine::RoundOpened>(outs).empty());
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);
  outs = h.Register("c", 100);
  auto opened = Filter<RoundEngine::RoundOpened>(outs);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0].attempt, 2u);
  EXPECT_THAT(opened[0].selected, ElementsAre("a", "c"));
}

TEST(RoundEngineTest, DisconnectedNodesAreNotSelectedAndMustRegisterAgain) {
  Harness h(WaitFor(3));
  h.Register("a", 100, 1.0f);
  h.Register("b", 100, 1.0f);
  h.Register("c", 100, 1.0f);
  ASSERT_THAT(h.engine->selected(), ElementsAre("a", "b", "c"));
  h.engine->OnDisconnect("c");
  EXPECT_FALSE(h.engine->connected("c"));
  EXPECT_EQ(h.engine->connected_count(), 2u);
  auto outs = h.Answer("c");  // selected, but gone: it must register first
  auto rejected = Filter<RoundEngine::UpdateRejected>(outs);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].cause, RejectCause::kUnknownNode);

  h.Answer("a");
  h.Answer("b");
  outs = h.FireTimer();
  ASSERT_EQ(Filter<RoundEngine::RoundClosed>(outs).size(), 1u);
  // Round 2 waits: only 2 of the 3 required nodes are connected.
  EXPECT_EQ(h.engine->round(), 2u);
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);
  outs = h.Register("c", 100, 1.0f);
  auto opened = Filter<RoundEngine::RoundOpened>(outs);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_THAT(opened[0].selected, ElementsAre("a", "b", "c"));
}

TEST(RoundEngineTest, ASelectedNodeThatRegistersAgainGetsItsTaskAgain) {
  Harness h;
  h.Register("a", 100, 1.0f);
  h.Register("b", 100, 1.0f);
  h.nodes["a"].inbox.clear();
  auto outs = h.Register("a", 100, 1.0f);  // e.g. the node restarted
  auto sends = Filter<RoundEngine::Send>(outs);
  ASSERT_EQ(sends.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<wire::RegisterAck>(sends[0].message.body));
  EXPECT_EQ(std::get<wire::FitTask>(sends[1].message.body).round, 1u);
  EXPECT_EQ(sends[1].deadline_s, h.engine->deadline_s());
  // Once it has answered, registering again sends no task.
  h.Answer("a");
  outs = h.Register("a", 100, 1.0f);
  EXPECT_EQ(Filter<RoundEngine::Send>(outs).size(), 1u);
}

TEST(RoundEngineTest, SeededSelectionIsDeterministic) {
  auto selections = [](uint64_t seed) {
    RoundEngineOptions o = TestOptions();
    o.total_rounds = 5;
    o.clients_per_round = 3;
    Harness h(WaitFor(10, o), {0.0f}, seed);
    for (int i = 0; i < 10; ++i) h.Register("node" + std::to_string(i), 10);
    std::vector<std::vector<std::string>> picked;
    while (h.engine->phase() == RoundEngine::Phase::kRoundOpen) {
      picked.push_back(h.engine->selected());
      for (const auto& id : picked.back()) h.Answer(id);
    }
    EXPECT_EQ(picked.size(), 5u);
    return picked;
  };
  const auto a = selections(42);
  EXPECT_EQ(selections(42), a);
  EXPECT_NE(selections(43), a);
  // Not always the same three nodes.
  bool varies = false;
  for (const auto& s : a) varies |= (s != a[0]);
  EXPECT_TRUE(varies);
}

TEST(RoundEngineTest, FedProxSendsProxMuInEveryFitTask) {
  auto strategy = MakeStrategy("fedprox", StrategyOptions{.prox_mu = 0.25});
  ASSERT_TRUE(strategy.ok());
  Harness h(TestOptions(), {0.0f, 0.0f}, 1, std::move(strategy).value());
  h.Register("a", 100, 1.0f);
  h.Register("b", 300, 5.0f);
  EXPECT_EQ(h.LastFitTask("a")->prox_mu, 0.25);
  EXPECT_EQ(h.LastFitTask("b")->prox_mu, 0.25);
  h.Answer("a");
  h.Answer("b");
  EXPECT_THAT(h.engine->global(), ElementsAre(4.0f, 4.0f));  // FedAvg aggregation
  EXPECT_EQ(h.LastFitTask("a")->round, 2u);
  EXPECT_EQ(h.LastFitTask("a")->prox_mu, 0.25);
}

// A strategy that always fails: the engine must stop, not commit a model.
class FailingStrategy final : public Strategy {
 public:
  Status Aggregate(std::span<const float>, const std::vector<ClientUpdate>&,
                   std::span<float>) override {
    return Status::InvalidArgument("boom");
  }
  std::string_view name() const override { return "failing"; }
};

TEST(RoundEngineTest, AStrategyErrorFinishesWithInternalAndCommitsNothing) {
  Harness h(TestOptions(), {0.0f, 0.0f}, 1, std::make_unique<FailingStrategy>());
  h.Register("a", 100, 1.0f);
  h.Register("b", 100, 1.0f);
  h.Answer("a");
  auto outs = h.Answer("b");
  EXPECT_TRUE(Filter<RoundEngine::RoundClosed>(outs).empty());
  auto finished = Filter<RoundEngine::Finished>(outs);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].status.code(), StatusCode::kInternal);
  EXPECT_THAT(finished[0].status.message(), HasSubstr("boom"));
  EXPECT_EQ(h.engine->model_version(), 0u);
  EXPECT_THAT(h.engine->global(), ElementsAre(0.0f, 0.0f));
}

// ---- Rejections --------------------------------------------------------------------------

// Six nodes, four selected in round 1, one already answered. Each test sends one bad
// message and checks the reply, the event, the counter, and that nothing else changed.
class RejectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"a", "b", "c", "d", "e", "f"}) h_.Register(id, 100, 1.0f);
    selected_ = h_.engine->selected();
    ASSERT_EQ(selected_.size(), 4u);
    for (const char* id : {"a", "b", "c", "d", "e", "f"}) {
      if (std::find(selected_.begin(), selected_.end(), id) == selected_.end()) unselected_ = id;
    }
    ASSERT_FALSE(unselected_.empty());
    h_.Answer(selected_[0]);
    Snapshot(before_);
  }

  struct State {
    RoundEngine::Phase phase;
    uint64_t round;
    uint32_t attempt;
    uint64_t model_version;
    std::vector<std::string> selected, answered;
    std::vector<float> global;
    double deadline;
    size_t connected;
    bool operator==(const State&) const = default;
  };
  void Snapshot(State& s) {
    const RoundEngine& e = *h_.engine;
    s = State{e.phase(),    e.round(),  e.attempt(),    e.model_version(),  e.selected(),
              e.answered(), e.global(), e.deadline_s(), e.connected_count()};
  }

  // `outs` is exactly a Reject to `from` naming `m` and the matching event; the cause's
  // counter is 1, every other counter 0, and the round state is as before.
  void ExpectRejected(const std::vector<Output>& outs, const std::string& from,
                      const wire::Message& m, RejectCause cause, wire::RejectReason reason,
                      const std::string& text_part) {
    ASSERT_EQ(outs.size(), 2u);
    const auto& send = std::get<RoundEngine::Send>(outs[0]);
    EXPECT_EQ(send.to, from);
    const auto& reject = std::get<wire::Reject>(send.message.body);
    EXPECT_EQ(reject.reason, reason);
    EXPECT_EQ(reject.rejected_message_id, m.header.message_id);
    EXPECT_THAT(reject.text, HasSubstr(text_part));
    EXPECT_EQ(send.message.header.federation_id, kFed);
    const auto& event = std::get<RoundEngine::UpdateRejected>(outs[1]);
    EXPECT_EQ(event.node_id, from);
    EXPECT_EQ(event.cause, cause);
    EXPECT_EQ(event.text, reject.text);
    EXPECT_EQ(event.round, before_.round);
    for (size_t i = 0; i < kRejectCauseCount; ++i) {
      const auto c = static_cast<RejectCause>(i);
      EXPECT_EQ(h_.engine->rejected(c), c == cause ? 1u : 0u) << RejectCauseName(c);
    }
    State after;
    Snapshot(after);
    EXPECT_TRUE(after == before_);
  }

  // Sends `m` from `from` and expects it rejected.
  void SendAndExpect(const std::string& from, const wire::Message& m, RejectCause cause,
                     wire::RejectReason reason, const std::string& text_part) {
    ExpectRejected(h_.Deliver(from, m), from, m, cause, reason, text_part);
  }

  // The rest of the selection answers: the round closes with every accepted update and
  // counts the rejections made while it was open.
  void ExpectRoundStillCloses(uint32_t rejected = 1) {
    for (size_t i = 1; i < selected_.size(); ++i) h_.Answer(selected_[i]);
    auto closed = h_.Events<RoundEngine::RoundClosed>();
    ASSERT_EQ(closed.size(), 1u);
    EXPECT_EQ(closed[0].metrics.received, 4u);
    EXPECT_EQ(closed[0].metrics.rejected, rejected);
    EXPECT_THAT(closed[0].global, ElementsAre(1.0f, 1.0f));
  }

  Harness h_{WaitFor(6)};
  std::vector<std::string> selected_;
  std::string unselected_;
  State before_;
};

TEST_F(RejectionTest, LateAfterTheDeadlineBeforeTheTimerFired) {
  const std::string& node = selected_[1];
  h_.env.Set(h_.engine->deadline_s());
  auto m = h_.FitResultMessage(node, 1, {1.0f, 1.0f});
  SendAndExpect(node, m, RejectCause::kLate, wire::RejectReason::kLate, "after its deadline");
  // The timer then closes the round with the one update accepted in time (min_clients 2 not
  // met: retried).
  auto outs = h_.FireTimer();
  EXPECT_EQ(Filter<RoundEngine::RoundRetried>(outs).size(), 1u);
}

TEST_F(RejectionTest, LateForARoundThatHasClosed) {
  ExpectRoundStillCloses(/*rejected=*/0);
  ASSERT_EQ(h_.engine->round(), 2u);
  Snapshot(before_);
  auto m = h_.FitResultMessage(selected_[0], 1, {1.0f, 1.0f});
  SendAndExpect(selected_[0], m, RejectCause::kLate, wire::RejectReason::kLate,
                "round 1, which has closed; the current round is 2");
}

TEST_F(RejectionTest, Duplicate) {
  const std::string& node = selected_[0];  // already answered in SetUp
  auto m = h_.FitResultMessage(node, 1, {9.0f, 9.0f});
  SendAndExpect(node, m, RejectCause::kDuplicate, wire::RejectReason::kDuplicate, "second update");
  ExpectRoundStillCloses();  // the first update counts, not the 9s
}

TEST_F(RejectionTest, NotSelected) {
  auto m = h_.FitResultMessage(unselected_, 1, {9.0f, 9.0f});
  SendAndExpect(unselected_, m, RejectCause::kNotSelected, wire::RejectReason::kUnspecified,
                "not selected for round 1");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, WrongRound) {
  const std::string& node = selected_[1];
  auto m = h_.FitResultMessage(node, 5, {9.0f, 9.0f});
  SendAndExpect(node, m, RejectCause::kWrongRound, wire::RejectReason::kWrongRound,
                "round 5, which has not started");
  ExpectRoundStillCloses();  // and the node can still answer correctly
}

TEST_F(RejectionTest, WrongShape) {
  const std::string& node = selected_[1];
  auto m = h_.FitResultMessage(node, 1, {1.0f, 1.0f, 1.0f});
  SendAndExpect(node, m, RejectCause::kWrongShape, wire::RejectReason::kWrongShape,
                "3 elements; the model has 2");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, NaN) {
  const std::string& node = selected_[1];
  auto m = h_.FitResultMessage(node, 1, {1.0f, std::numeric_limits<float>::quiet_NaN()});
  SendAndExpect(node, m, RejectCause::kNonFinite, wire::RejectReason::kNonFinite, "index 1");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, InfiniteTrainLoss) {
  const std::string& node = selected_[1];
  auto m = h_.FitResultMessage(node, 1, {1.0f, 1.0f});
  std::get<wire::FitResult>(m.body).train_loss = std::numeric_limits<double>::infinity();
  SendAndExpect(node, m, RejectCause::kNonFinite, wire::RejectReason::kNonFinite, "train_loss");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, UnknownNode) {
  wire::FitResult r;
  r.round = 1;
  r.num_examples = 100;
  r.update = wire::FloatPayload(std::vector<float>{9.0f, 9.0f});
  wire::Message m{wire::Header{kFed, "mallory", 1, 0, 77}, r};
  SendAndExpect("mallory", m, RejectCause::kUnknownNode, wire::RejectReason::kNotEnrolled,
                "Register first");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, WrongFederation) {
  const std::string& node = selected_[1];
  auto m = h_.FitResultMessage(node, 1, {9.0f, 9.0f});
  m.header.federation_id = "other-fed";
  SendAndExpect(node, m, RejectCause::kWrongFederation, wire::RejectReason::kUnknownFederation,
                "\"other-fed\"");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, MalformedCodec) {
  const std::string& node = selected_[1];
  auto m = h_.FitResultMessage(node, 1, {9.0f, 9.0f});
  std::get<wire::FitResult>(m.body).update.codec = "fp16";
  SendAndExpect(node, m, RejectCause::kMalformed, wire::RejectReason::kMalformed, "\"fp16\"");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, MalformedPayloadBytes) {
  const std::string& node = selected_[1];
  auto m = h_.FitResultMessage(node, 1, {9.0f, 9.0f});
  std::get<wire::FitResult>(m.body).update.bytes.pop_back();
  SendAndExpect(node, m, RejectCause::kMalformed, wire::RejectReason::kMalformed, "update payload");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, MalformedZeroExamples) {
  const std::string& node = selected_[1];
  auto m = h_.FitResultMessage(node, 1, {9.0f, 9.0f}, /*num_examples=*/0);
  SendAndExpect(node, m, RejectCause::kMalformed, wire::RejectReason::kMalformed,
                "0 training examples");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, MalformedSenderIsNotTheAuthenticatedPeer) {
  // `selected_[1]` claims to be `selected_[2]` in its header.
  auto m = h_.FitResultMessage(selected_[2], 1, {9.0f, 9.0f});
  SendAndExpect(selected_[1], m, RejectCause::kMalformed, wire::RejectReason::kMalformed,
                "authenticated peer");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, MalformedRoundFieldsDisagree) {
  const std::string& node = selected_[1];
  auto m = h_.FitResultMessage(node, 1, {9.0f, 9.0f});
  m.header.round = 2;
  SendAndExpect(node, m, RejectCause::kMalformed, wire::RejectReason::kMalformed,
                "differs from header round 2");
  ExpectRoundStillCloses();
}

TEST_F(RejectionTest, MalformedMessageTypeFromANode) {
  const std::string& node = selected_[1];
  wire::Message m{h_.HeaderFrom(node, 1), wire::FitTask{}};
  SendAndExpect(node, m, RejectCause::kMalformed, wire::RejectReason::kMalformed,
                "nodes do not send FitTask");
  ExpectRoundStillCloses();
}

TEST(RejectCauseTest, EveryCauseHasADistinctName) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kRejectCauseCount; ++i) {
    names.insert(RejectCauseName(static_cast<RejectCause>(i)));
  }
  EXPECT_EQ(names.size(), kRejectCauseCount);
  EXPECT_FALSE(names.contains("unknown"));
}

// ---- Restore -----------------------------------------------------------------------------

RoundEngine::RestoredState MidRoundTwo() {
  RoundEngine::RestoredState s;
  s.round = 2;
  s.model_version = 1;
  s.global = {1.0f, 1.0f};
  s.attempt = 1;
  s.selected = {"b", "a"};
  s.accepted = {{ClientUpdate{"a", 100, {1.0f, 2.0f}}}};  // its train loss is not known
  return s;
}

TEST(RoundEngineRestoreTest, ResumesWithTheAcceptedUpdatesAndClosesWhenTheRestAnswer) {
  Harness h(MidRoundTwo());
  ASSERT_EQ(h.start_outputs.size(), 1u);
  EXPECT_EQ(std::get<RoundEngine::SetTimer>(h.start_outputs[0]).at_seconds, 1000.0 + 60.0);
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kRoundOpen);
  EXPECT_EQ(h.engine->round(), 2u);
  EXPECT_EQ(h.engine->model_version(), 1u);
  EXPECT_THAT(h.engine->selected(), ElementsAre("a", "b"));
  EXPECT_THAT(h.engine->answered(), ElementsAre("a"));

  // "a" already answered: it gets only the ack, and a re-sent update is a duplicate.
  auto outs = h.Register("a", 100);
  EXPECT_EQ(outs.size(), 1u);
  EXPECT_FALSE(h.LastFitTask("a").has_value());
  outs = h.Deliver("a", h.FitResultMessage("a", 2, {7.0f, 7.0f}));
  ASSERT_EQ(Filter<RoundEngine::UpdateRejected>(outs).size(), 1u);
  EXPECT_EQ(Filter<RoundEngine::UpdateRejected>(outs)[0].cause, RejectCause::kDuplicate);

  // "b" reconnects and gets round 2's task on the restored global model.
  h.Register("b", 300);
  auto task = h.LastFitTask("b");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->round, 2u);
  EXPECT_THAT(wire::PayloadFloats(task->global_model).value(), ElementsAre(1.0f, 1.0f));
  outs = h.Deliver("b", h.FitResultMessage("b", 2, {5.0f, 6.0f}));
  auto closed = Filter<RoundEngine::RoundClosed>(outs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].round, 2u);
  EXPECT_EQ(closed[0].model_version, 2u);
  // (100 * {1, 2} + 300 * {5, 6}) / 400.
  EXPECT_THAT(closed[0].global, ElementsAre(4.0f, 5.0f));
  EXPECT_EQ(closed[0].metrics.received, 2u);
  EXPECT_EQ(closed[0].metrics.train_loss, 0.5);  // only b's loss is known
  EXPECT_EQ(h.engine->round(), 3u);              // round 3 opened with a and b
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kRoundOpen);
}

TEST(RoundEngineRestoreTest, ClosesAtTheFreshDeadlineWithTheRestoredUpdates) {
  RoundEngineOptions o = TestOptions();
  o.min_clients = 1;
  Harness h(MidRoundTwo(), o);
  auto outs = h.FireTimer();
  auto closed = Filter<RoundEngine::RoundClosed>(outs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_THAT(closed[0].global, ElementsAre(1.0f, 2.0f));
  EXPECT_TRUE(std::isnan(closed[0].metrics.train_loss));
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);  // nobody connected
}

TEST(RoundEngineRestoreTest, ClosesAtStartWhenEverySelectedNodeHadAnswered) {
  RoundEngine::RestoredState s = MidRoundTwo();
  s.selected = {"a"};
  s.accepted[0].train_loss = 0.75;
  Harness h(s);
  auto closed = Filter<RoundEngine::RoundClosed>(h.start_outputs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].round, 2u);
  EXPECT_EQ(closed[0].metrics.train_loss, 0.75);
  EXPECT_THAT(h.engine->global(), ElementsAre(1.0f, 2.0f));
}

TEST(RoundEngineRestoreTest, WithoutAnOpenAttemptWaitsAndSelectsAfresh) {
  RoundEngine::RestoredState s = MidRoundTwo();
  s.selected.clear();
  s.accepted.clear();
  s.attempt = 2;  // attempt 2 was about to open when the aggregator died
  Harness h(s);
  EXPECT_TRUE(h.start_outputs.empty());
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);
  h.Register("x", 10);
  auto outs = h.Register("y", 10);
  auto opened = Filter<RoundEngine::RoundOpened>(outs);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0].round, 2u);
  EXPECT_EQ(opened[0].attempt, 2u);
  EXPECT_EQ(opened[0].model_version, 1u);
}

// A server optimiser's moments leave with every RoundClosed and come back through
// RestoredState: an engine restored after round 1 ends round 3 on exactly the model an
// uninterrupted one does, and one restored without them does not.
TEST(RoundEngineRestoreTest, ServerMomentumCarriesAcrossARestart) {
  auto fedavgm = [] {
    StrategyOptions o;
    o.server_momentum = 0.9;
    o.server_lr = 1.0;
    return MakeStrategy("fedavgm", o).value();
  };
  auto run = [](Harness& h, uint64_t from_round) {
    h.Register("a", 100, 1.0f);
    h.Register("b", 300, -0.5f);
    for (uint64_t r = from_round; r <= 3; ++r) {
      h.Answer("a");
      h.Answer("b");
    }
  };
  Harness straight(WaitFor(2, TestOptions()), {0.0f, 2.0f}, 1, fedavgm());
  run(straight, 1);
  auto closed = straight.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(closed.size(), 3u);
  // Mean delta -0.125 per round; v = -0.125, -0.2375, -0.33875.
  EXPECT_THAT(closed[0].strategy_state, ElementsAre(-0.125f, -0.125f));
  EXPECT_FLOAT_EQ(closed[2].global[0], -0.125f - 0.2375f - 0.33875f);

  RoundEngine::RestoredState after_one;
  after_one.round = 2;
  after_one.model_version = 1;
  after_one.global = closed[0].global;
  after_one.strategy_state = closed[0].strategy_state;
  Harness resumed(after_one, WaitFor(2, TestOptions()), 1, fedavgm());
  run(resumed, 2);
  auto resumed_closed = resumed.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(resumed_closed.size(), 2u);
  EXPECT_EQ(resumed_closed.back().global, closed.back().global);
  EXPECT_EQ(resumed_closed.back().strategy_state, closed.back().strategy_state);

  after_one.strategy_state.clear();  // what a restart that lost the moments would do
  Harness cold(after_one, WaitFor(2, TestOptions()), 1, fedavgm());
  run(cold, 2);
  EXPECT_NE(cold.Events<RoundEngine::RoundClosed>().back().global, closed.back().global);

  after_one.strategy_state = {1.0f, 2.0f, 3.0f};  // does not fit the model
  auto bad = RoundEngine::Restore(WaitFor(2, TestOptions()), &straight.env, fedavgm(), {},
                                  after_one);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("restored state"));
  EXPECT_THAT(bad.status().message(), HasSubstr("does not fit a model of 2"));
}

// Issue 8: a private strategy's epsilon is in every round's metrics, and the engine ends the
// federation (OK, with the reason) before the round that would exceed the budget.
TEST(RoundEngineTest, PrivacyBudgetEndsTheFederationEarly) {
  auto reference = RdpAccountant::Create().value();
  std::vector<double> eps;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(reference.Compose(1.0, 2.0).ok());
    eps.push_back(reference.Epsilon(1e-5)->epsilon);
  }
  StrategyOptions so;
  so.dp.central = true;
  so.dp.noise_multiplier = 2.0;
  so.dp.expected_clients = 2;
  so.dp.epsilon_budget = (eps[1] + eps[2]) / 2;
  RoundEngineOptions o = WaitFor(2, TestOptions());
  o.total_rounds = 10;
  Harness h(o, {0.0f, 0.0f}, 1, MakeStrategy("fedavg", so).value());
  h.Register("a", 10, 0.5f);
  h.Register("b", 10, 0.5f);
  for (int r = 0; r < 2; ++r) {
    h.Answer("a");
    h.Answer("b");
  }
  auto closed = h.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(closed.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(closed[r].metrics.privacy.has_value());
    EXPECT_DOUBLE_EQ(closed[r].metrics.privacy->epsilon, eps[r]);
  }
  auto finished = h.Events<RoundEngine::Finished>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].status.ok());
  EXPECT_EQ(finished[0].rounds_completed, 2u);
  EXPECT_THAT(finished[0].stopped_early, HasSubstr("privacy budget"));
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kFinished);
}

// Issue 8, FedBuff: a buffer closes after buffer_size updates; a node still training on an
// older model stays selected and its change counts with weight 1 / sqrt(1 + staleness);
// beyond max_staleness it is refused.
TEST(RoundEngineTest, BufferedRoundsWeighStaleUpdatesAndRefuseTooStaleOnes) {
  RoundEngineOptions o = WaitFor(3, TestOptions());
  o.mode = RoundMode::kBuffered;
  o.clients_per_round = 3;
  o.min_clients = 1;
  o.buffer_size = 2;
  o.max_staleness = 1;
  o.total_rounds = 10;
  Harness h(o, {0.0f});
  h.Register("a", 10, 1.0f);
  h.Register("b", 10, 3.0f);
  h.Register("c", 10, 2.0f);
  ASSERT_EQ(h.LastFitTask("c")->round, 1u);
  h.Answer("a");
  auto outs = h.Answer("b");  // buffer of 2 full: (1 + 3) / 2
  auto closed = Filter<RoundEngine::RoundClosed>(outs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_FLOAT_EQ(closed[0].global[0], 2.0f);
  // Round 2: c keeps its round-1 task (no new one); a and b get round 2's.
  EXPECT_THAT(h.engine->selected(), ElementsAre("a", "b", "c"));
  EXPECT_EQ(h.LastFitTask("a")->round, 2u);
  EXPECT_EQ(h.LastFitTask("c")->round, 1u);
  h.Answer("c");  // trained from model 0: staleness 1
  outs = h.Answer("a");
  closed = Filter<RoundEngine::RoundClosed>(outs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_FLOAT_EQ(closed[0].global[0], 2.0f + (2.0f / std::sqrt(2.0f) + 1.0f) / 2.0f);
  // b still holds its round-2 task while a and c close rounds 3 and 4.
  for (int r = 3; r <= 4; ++r) {
    h.Answer("a");
    outs = h.Answer("c");
    ASSERT_EQ(Filter<RoundEngine::RoundClosed>(outs).size(), 1u) << r;
  }
  ASSERT_EQ(h.engine->round(), 5u);
  outs = h.Answer("b");  // round 2's task, 3 models behind
  auto rejected = Filter<RoundEngine::UpdateRejected>(outs);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].cause, RejectCause::kLate);
  EXPECT_THAT(rejected[0].text, HasSubstr("max_staleness is 1"));
}

// A buffered round restored with one of its two updates closes on the next one, and the
// restored update (already staleness-weighted when it was persisted) is used as stored.
TEST(RoundEngineRestoreTest, BufferedRoundResumesWithItsAcceptedUpdates) {
  RoundEngineOptions o = WaitFor(3, TestOptions());
  o.mode = RoundMode::kBuffered;
  o.clients_per_round = 3;
  o.min_clients = 1;
  o.buffer_size = 2;
  RoundEngine::RestoredState s;
  s.round = 2;
  s.model_version = 1;
  s.global = {1.0f};
  s.attempt = 1;
  s.selected = {"a", "b", "c"};
  s.accepted = {{ClientUpdate{"a", 10, {3.0f}}}};
  Harness h(s, o);
  EXPECT_TRUE(h.Events<RoundEngine::RoundClosed>().empty()) << "one update of two";
  h.Register("b", 10, 1.0f);
  ASSERT_EQ(h.LastFitTask("b")->round, 2u);
  auto closed = Filter<RoundEngine::RoundClosed>(h.Answer("b"));
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_FLOAT_EQ(closed[0].global[0], (3.0f + 2.0f) / 2.0f);  // equal weights

  // Restored with a full buffer (the crash came between the last accept and the close):
  // it closes at Start, although not every selected node answered.
  s.accepted.push_back({ClientUpdate{"c", 10, {5.0f}}});
  Harness full(s, o);
  auto at_start = Filter<RoundEngine::RoundClosed>(full.start_outputs);
  ASSERT_EQ(at_start.size(), 1u);
  EXPECT_FLOAT_EQ(at_start[0].global[0], 4.0f);
}

TEST(RoundEngineOptionsTest, BufferSizeMustFitTheSelection) {
  RoundEngineOptions o = TestOptions();
  o.mode = RoundMode::kBuffered;
  o.clients_per_round = 4;
  o.min_clients = 2;
  o.buffer_size = 5;
  EXPECT_THAT(Validate(o).message(), HasSubstr("buffer_size (5) must be in [min_clients, clients_per_round] = [2, 4]"));
  o.buffer_size = 1;
  EXPECT_THAT(Validate(o).message(), HasSubstr("buffer_size (1)"));
  o.buffer_size = 3;
  o.max_staleness = -1;
  EXPECT_THAT(Validate(o).message(), HasSubstr("max_staleness"));
  o.max_staleness = 0;
  EXPECT_TRUE(Validate(o).ok());
}

TEST(RoundEngineRestoreTest, RejectsAnInconsistentState) {
  FakeEnv env(1);
  struct Case {
    std::function<void(RoundEngine::RestoredState&)> mutate;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](auto& s) { s.round = 0; }, "round 0 is outside"},
      {[](auto& s) { s.round = 4; }, "round 4 is outside"},
      {[](auto& s) { s.attempt = 0; }, "attempt is 0"},
      {[](auto& s) { s.attempt = 4; }, "exceeds max_retries + 1"},
      {[](auto& s) { s.global.clear(); }, "no parameters"},
      {[](auto& s) {
         s.selected = {"a", "a", "b"};
       },
       "selected twice"},
      {[](auto& s) { s.selected = {"b"}; }, "not among the selected"},
      {[](auto& s) { s.accepted[0].update.num_examples = 0; }, "0 examples"},
      {[](auto& s) { s.accepted[0].update.params = {1.0f}; }, "1 elements; the model has 2"},
      {[](auto& s) { s.accepted[0].update.params[1] = std::nanf(""); }, "index 1"},
      {[](auto& s) { s.accepted.push_back(s.accepted[0]); }, "two accepted updates"},
  };
  for (const Case& c : cases) {
    RoundEngine::RestoredState s = MidRoundTwo();
    c.mutate(s);
    auto r = RoundEngine::Restore(TestOptions(), &env, std::make_unique<FedAvg>(), {}, s);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(c.expect));
  }
}

}  // namespace
}  // namespace fedmesh

// ---- Codec chains (issue 4) --------------------------------------------------------------

namespace fedmesh {
namespace {

RoundEngineOptions TwoNodes(RoundEngineOptions o = TestOptions()) {
  o.total_rounds = 1;
  o.clients_per_round = 2;
  o.min_clients = 2;
  return o;
}

wire::Message CodedResult(Harness& h, const std::string& id, const wire::TensorPayload& update) {
  wire::FitResult r;
  r.round = h.engine->round();
  r.num_examples = h.nodes[id].num_examples;
  r.train_loss = 0.5;
  r.update = update;
  r.bytes_before_codec = 4 * update.element_count;
  r.bytes_after_codec = update.bytes.size();
  return wire::Message{h.HeaderFrom(id, r.round), r};
}

std::vector<float> SparseDelta(size_t n, float scale) {
  // 97 is coprime with every n used here, so the ten indices are distinct and in range.
  std::vector<float> d(n, 0.0f);
  for (size_t i = 0; i < 10; ++i) d[(i * 97 + 3) % n] = scale * static_cast<float>(i + 1);
  return d;
}

TEST(RoundEngineCodec, CodedUpdatesAreDecodedAddedToTheGlobalAndCounted) {
  const std::vector<float> global(1000, 0.5f);
  Harness h(TwoNodes(), global);
  h.Register("a", 100);
  h.Register("b", 300);
  ASSERT_THAT(h.engine->selected(), ElementsAre("a", "b"));
  EXPECT_EQ(h.LastFitTask("a")->update_codec, "");  // nodes choose
  const codec::Chain chain = codec::Chain::Parse("topk:0.01|int8|zstd").value();
  const std::vector<float> da = SparseDelta(1000, 1.0f), db = SparseDelta(1000, -0.5f);
  auto pa = codec::EncodePayload(chain, da, 1).value();
  auto pb = codec::EncodePayload(chain, db, 2).value();
  h.Deliver("a", CodedResult(h, "a", pa));
  h.Deliver("b", CodedResult(h, "b", pb));
  auto closed = h.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(closed.size(), 1u);
  // FedAvg of the decoded deltas (100:300) added to the global; int8 error <= 10/254.
  for (size_t i = 0; i < global.size(); ++i) {
    const double want = 0.5 + (100.0 * da[i] + 300.0 * db[i]) / 400.0;
    EXPECT_NEAR(closed[0].global[i], want, 10.0 / 254.0) << i;
  }
  EXPECT_EQ(closed[0].global[1], 0.5f);  // not among the kept: exactly unchanged
  const RoundEngine::RoundMetrics& m = closed[0].metrics;
  EXPECT_EQ(m.update_bytes_raw, 2u * 4000u);
  EXPECT_EQ(m.update_bytes, pa.bytes.size() + pb.bytes.size());
  EXPECT_DOUBLE_EQ(m.compression_ratio, 8000.0 / static_cast<double>(m.update_bytes));
  EXPECT_GT(m.compression_ratio, 50.0);
  // What the store persists (UpdateAccepted) is the node's new weights: global + decoded.
  auto accepted = h.Events<RoundEngine::UpdateAccepted>();
  ASSERT_EQ(accepted.size(), 2u);
  EXPECT_EQ(accepted[0].params[1], 0.5f);
  EXPECT_NEAR(accepted[0].params[3], 1.5f, 10.0 / 254.0);  // 0.5 + int8(1.0)
  EXPECT_NE(accepted[0].params[3], 1.5f);                   // int8 is lossy
}

// The simulator keeps no store: with report_update_params off, UpdateAccepted leaves the
// weights out and nothing else changes.
TEST(RoundEngineCodec, UpdateAcceptedCanLeaveTheWeightsOut) {
  const std::vector<float> global(1000, 0.5f);
  std::vector<float> closed_global[2];
  for (bool report : {true, false}) {
    RoundEngineOptions o = TwoNodes();
    o.report_update_params = report;
    Harness h(o, global);
    h.Register("a", 100);
    h.Register("b", 300);
    h.Deliver("a", CodedResult(h, "a", wire::FloatPayload(SparseDelta(1000, 0.1f))));
    h.Deliver("b", CodedResult(h, "b", wire::FloatPayload(SparseDelta(1000, -0.3f))));
    auto accepted = h.Events<RoundEngine::UpdateAccepted>();
    ASSERT_EQ(accepted.size(), 2u);
    for (const auto& a : accepted) {
      EXPECT_EQ(a.params.size(), report ? global.size() : 0u);
      EXPECT_EQ(a.num_examples, a.node_id == "a" ? 100u : 300u);
    }
    if (report) {
      EXPECT_FLOAT_EQ(accepted[0].params[3], 0.6f);  // 0.5 + a's 0.1 at index 3
    }
    auto closed = h.Events<RoundEngine::RoundClosed>();
    ASSERT_EQ(closed.size(), 1u);
    closed_global[report ? 0 : 1] = closed[0].global;
  }
  EXPECT_EQ(closed_global[0], closed_global[1]);
  EXPECT_NE(closed_global[0], global);
}

TEST(RoundEngineCodec, PrescribedCodecIsSentAndEnforced) {
  RoundEngineOptions o = TwoNodes();
  o.update_codec = "topk:0.1|int8";
  Harness h(o, std::vector<float>(100, 0.0f));
  h.Register("a", 100);
  h.Register("b", 100);
  EXPECT_EQ(h.LastFitTask("a")->update_codec, "topk:0.1|int8:256");  // canonical
  const std::vector<float> d = SparseDelta(100, 0.01f);
  h.Deliver("a", CodedResult(h, "a", wire::FloatPayload(d)));
  auto rejected = h.Events<RoundEngine::UpdateRejected>();
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].cause, RejectCause::kMalformed);
  EXPECT_THAT(rejected[0].text, HasSubstr("\"none\" is not the prescribed \"topk:0.1|int8:256\""));
  // The same chain spelled without its defaults is the same chain.
  auto p = codec::EncodePayload(codec::Chain::Parse("topk:0.1|int8").value(), d, 1).value();
  p.codec = "topk:0.1|int8";
  h.Deliver("a", CodedResult(h, "a", p));
  h.Deliver("b", CodedResult(h, "b", p));
  EXPECT_EQ(h.Events<RoundEngine::UpdateAccepted>().size(), 2u);
  EXPECT_EQ(h.Events<RoundEngine::RoundClosed>().size(), 1u);
}

TEST(RoundEngineCodec, DownlinkCodecEncodesTheGlobalModel) {
  RoundEngineOptions o = TwoNodes();
  o.downlink_codec = "fp16|zstd";
  std::vector<float> global(5000);
  for (size_t i = 0; i < global.size(); ++i) global[i] = 0.001f * static_cast<float>(i % 77);
  Harness h(o, global);
  h.Register("a", 100);
  h.Register("b", 100);
  const wire::FitTask task = *h.LastFitTask("a");
  EXPECT_EQ(task.global_model.codec, "fp16|zstd:3");
  EXPECT_LT(task.global_model.bytes.size(), 2 * global.size());
  std::vector<float> got = codec::DecodePayload(task.global_model).value();
  for (size_t i = 0; i < global.size(); ++i) {
    EXPECT_NEAR(got[i], global[i], std::fabs(global[i]) * 0x1p-11f) << i;
  }
  // A model fp16 cannot hold is sent exact rather than not at all.
  global[10] = 1e6f;
  Harness big(o, global);
  big.Register("a", 100);
  big.Register("b", 100);
  EXPECT_EQ(big.LastFitTask("a")->global_model.codec, "none");
}

TEST(RoundEngineCodec, BadCodecOptionsAreRefused) {
  RoundEngineOptions o = TestOptions();
  o.downlink_codec = "topk:0.1";
  EXPECT_THAT(Validate(o).message(), HasSubstr("downlink_codec \"topk:0.1\" sparsifies"));
  o = TestOptions();
  o.downlink_codec = "fp16|fp16";
  EXPECT_THAT(Validate(o).message(), HasSubstr("downlink_codec"));
  o = TestOptions();
  o.update_codec = "gzip";
  EXPECT_THAT(Validate(o).message(), HasSubstr("update_codec"));
  EXPECT_THAT(Validate(o).message(), HasSubstr("\"gzip\" is unknown"));
}

TEST(RoundEngineCodec, UndecodableOrMisshapenCodedUpdatesAreRejected) {
  Harness h(TwoNodes(), std::vector<float>(1000, 0.0f));
  h.Register("a", 100);
  h.Register("b", 100);
  const codec::Chain chain = codec::Chain::Parse("topk:0.01|int8").value();
  auto p = codec::EncodePayload(chain, SparseDelta(1000, 1.0f), 1).value();
  auto cut = p;
  cut.bytes.pop_back();
  h.Deliver("a", CodedResult(h, "a", cut));
  auto wrong = codec::EncodePayload(chain, SparseDelta(2000, 1.0f), 1).value();
  h.Deliver("a", CodedResult(h, "a", wrong));
  auto rejected = h.Events<RoundEngine::UpdateRejected>();
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_EQ(rejected[0].cause, RejectCause::kMalformed);
  EXPECT_THAT(rejected[0].text, HasSubstr("update payload"));
  EXPECT_EQ(rejected[1].cause, RejectCause::kWrongShape);
  // The node can still send a good one.
  h.Deliver("a", CodedResult(h, "a", p));
  EXPECT_EQ(h.Events<RoundEngine::UpdateAccepted>().size(), 1u);
}

// ---- Update prediction -------------------------------------------------------------------

// A FitResult whose update is `change` minus the task's prediction, marked as such.
wire::Message PredictedResult(Harness& h, const std::string& id, const std::vector<float>& change,
                              const std::vector<float>& prediction) {
  std::vector<float> u = change;
  for (size_t i = 0; i < u.size(); ++i) u[i] -= prediction[i];
  wire::Message m = CodedResult(h, id, wire::FloatPayload(u));
  std::get<wire::FitResult>(m.body).applied_prediction = true;
  return m;
}

TEST(RoundEngineCodec, UpdatePredictionIsSentFromRoundTwoAndAddedBack) {
  RoundEngineOptions o = TwoNodes();
  o.total_rounds = 3;
  o.update_prediction = 0.5;
  Harness h(o, {1.0f, 2.0f, 3.0f});
  h.Register("a", 100);
  h.Register("b", 300);
  // Round 1: nothing to predict from yet.
  wire::FitTask t1 = *h.LastFitTask("a");
  EXPECT_FALSE(t1.with_prediction);
  EXPECT_EQ(t1.global_model.element_count, 3u);
  h.Deliver("a", CodedResult(h, "a", wire::FloatPayload(std::vector<float>{4, 0, 0})));
  h.Deliver("b", CodedResult(h, "b", wire::FloatPayload(std::vector<float>{0, 4, -8})));
  auto closed = h.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_THAT(closed[0].global, ElementsAre(2.0f, 5.0f, -3.0f));  // + (1, 3, -6)

  // Round 2: the model, then 0.5 x (1, 3, -6).
  wire::FitTask t2 = *h.LastFitTask("a");
  ASSERT_EQ(t2.round, 2u);
  EXPECT_TRUE(t2.with_prediction);
  EXPECT_EQ(t2.global_model.element_count, 6u);
  EXPECT_THAT(wire::PayloadFloats(t2.global_model).value(),
              ElementsAre(2.0f, 5.0f, -3.0f, 0.5f, 1.5f, -3.0f));
  const std::vector<float> p = {0.5f, 1.5f, -3.0f};
  // "a" sends its change minus p; "b" (an older node) sends its plain change. Both count
  // as the change they made.
  h.Deliver("a", PredictedResult(h, "a", {2, 2, 2}, p));
  h.Deliver("b", CodedResult(h, "b", wire::FloatPayload(std::vector<float>{-2, 2, 6})));
  auto accepted = h.Events<RoundEngine::UpdateAccepted>();
  ASSERT_EQ(accepted.size(), 4u);
  EXPECT_THAT(accepted[2].params, ElementsAre(4.0f, 7.0f, -1.0f));
  closed = h.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_THAT(closed[1].global, ElementsAre(1.0f, 7.0f, 2.0f));  // + (-1, 2, 5)
  // Round 3 predicts from round 2's change.
  EXPECT_THAT(wire::PayloadFloats(h.LastFitTask("a")->global_model).value(),
              ElementsAre(1.0f, 7.0f, 2.0f, -0.5f, 1.0f, 2.5f));
}

TEST(RoundEngineCodec, UpdatePredictionInALossyDownlinkIsAddedBackAsNodesDecodeIt) {
  RoundEngineOptions o = TwoNodes();
  o.total_rounds = 2;
  o.update_prediction = 1.0;
  o.downlink_codec = "int8";
  std::vector<float> global(300);
  for (size_t i = 0; i < global.size(); ++i) global[i] = 0.01f * static_cast<float>(i % 13);
  Harness h(o, global);
  h.Register("a", 100);
  h.Register("b", 100);
  std::vector<float> change(300);
  for (size_t i = 0; i < change.size(); ++i) change[i] = 0.003f * static_cast<float>(i % 7);
  h.Deliver("a", CodedResult(h, "a", wire::FloatPayload(change)));
  h.Deliver("b", CodedResult(h, "b", wire::FloatPayload(change)));
  const wire::FitTask t2 = *h.LastFitTask("a");
  ASSERT_TRUE(t2.with_prediction);
  EXPECT_EQ(t2.global_model.codec, "int8:256");
  std::vector<float> decoded = codec::DecodePayload(t2.global_model).value();
  const std::vector<float> p(decoded.begin() + 300, decoded.end());
  // A zero update on top of the prediction: the node's new weights are exactly the
  // engine's global plus the prediction it decoded, not plus the engine's exact change.
  h.Deliver("a", PredictedResult(h, "a", p, p));
  auto accepted = h.Events<RoundEngine::UpdateAccepted>();
  ASSERT_EQ(accepted.size(), 3u);
  const std::vector<float> g1 = h.Events<RoundEngine::RoundClosed>()[0].global;
  bool any_lossy = false;
  for (size_t i = 0; i < 300; ++i) {
    EXPECT_FLOAT_EQ(accepted[2].params[i], g1[i] + p[i]) << i;
    any_lossy |= std::fabs(p[i] - (g1[i] - global[i])) > 1e-6f;
  }
  EXPECT_TRUE(any_lossy);  // int8 changed the prediction, so the check above can fail
}

TEST(RoundEngineCodec, AnUpdateClaimingAnUnsentPredictionIsRejected) {
  Harness h(TwoNodes(), {1.0f, 2.0f});
  h.Register("a", 100);
  h.Register("b", 100);
  h.Deliver("a", PredictedResult(h, "a", {1, 1}, {0.5f, 0.5f}));
  auto rejected = h.Events<RoundEngine::UpdateRejected>();
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].cause, RejectCause::kMalformed);
  EXPECT_THAT(rejected[0].text, HasSubstr("applied an update prediction but round 1's FitTask "
                                          "carried none"));
  EXPECT_TRUE(h.Events<RoundEngine::UpdateAccepted>().empty());
}

TEST(RoundEngineCodec, BadUpdatePredictionOptionsAreRefused) {
  for (double beta : {-0.1, 1.5, std::nan("")}) {
    RoundEngineOptions o = TestOptions();
    o.update_prediction = beta;
    EXPECT_THAT(Validate(o).message(), HasSubstr("update_prediction is")) << beta;
    EXPECT_THAT(Validate(o).message(), HasSubstr("in [0, 1]")) << beta;
  }
  RoundEngineOptions o = TestOptions();
  o.update_prediction = 0.9;
  EXPECT_TRUE(Validate(o).ok());
  o.mode = RoundMode::kBuffered;
  o.buffer_size = 2;
  EXPECT_THAT(Validate(o).message(), HasSubstr("update_prediction needs synchronous rounds"));
  o = TestOptions();
  o.update_prediction = 0.9;
  o.secagg.enabled = true;
  EXPECT_THAT(Validate(o).message(), HasSubstr("update_prediction does not work with secagg"));
}

// ---- Issue 26 -------------------------------------------------------------------------------

// Item 1: a revoked node is forgotten and the round closes once the others have answered.
TEST(RoundEngineTest, RevokedSelectedNodeIsNotWaitedFor) {
  Harness h(WaitFor(3));
  h.Register("a", 10, 1.0f);
  h.Register("b", 10, 1.0f);
  h.Register("c", 10, 1.0f);
  ASSERT_EQ(h.engine->selected().size(), 3u);
  h.Answer("a");
  h.Answer("b");
  EXPECT_TRUE(h.Events<RoundEngine::RoundClosed>().empty());
  auto outs = h.Absorb(h.engine->OnRevoke("c"));
  auto closed = Filter<RoundEngine::RoundClosed>(outs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].metrics.received, 2u);
  EXPECT_FALSE(h.engine->connected("c"));
  EXPECT_EQ(h.engine->connected_count(), 2u);
  // Round 2 needs three connected nodes: it waits; c is not among the candidates.
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);
  // A message from c is refused as from an unknown node.
  auto late = h.Deliver("c", h.FitResultMessage("c", 1, {1, 1}));
  auto rejected = Filter<RoundEngine::UpdateRejected>(late);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].cause, RejectCause::kUnknownNode);
}

// Item 1: with fewer than min_clients answers left, the revocation retries the round now.
TEST(RoundEngineTest, RevokedNodeBelowQuorumRetriesAtOnce) {
  RoundEngineOptions o = WaitFor(3);
  o.min_clients = 3;
  o.clients_per_round = 3;
  Harness h(o);
  for (const char* id : {"a", "b", "c", "d"}) h.Register(id, 10, 1.0f);
  std::vector<std::string> sel = h.engine->selected();
  ASSERT_EQ(sel.size(), 3u);
  h.Answer(sel[0]);
  h.Answer(sel[1]);
  auto outs = h.Absorb(h.engine->OnRevoke(sel[2]));
  auto retried = Filter<RoundEngine::RoundRetried>(outs);
  ASSERT_EQ(retried.size(), 1u);
  EXPECT_NE(retried[0].reason.find("revoked"), std::string::npos) << retried[0].reason;
  const auto& now = h.engine->selected();
  EXPECT_EQ(std::count(now.begin(), now.end(), sel[2]), 0);
}

// Item 3: one node's weight is bounded by what it registered and by max_examples_per_node.
TEST(RoundEngineTest, ClaimedExamplesAreCappedAndCounted) {
  RoundEngineOptions o = WaitFor(2);
  o.total_rounds = 1;
  o.max_examples_per_node = 50;
  Harness h(o);
  h.Register("a", 30, 1.0f);
  h.Register("b", 100, 3.0f);
  h.Answer("a");
  auto outs = h.Deliver("b", h.FitResultMessage("b", 1, h.Train("b"), 1000000000));
  auto accepted = h.Events<RoundEngine::UpdateAccepted>();
  ASSERT_EQ(accepted.size(), 2u);
  EXPECT_EQ(accepted[1].num_examples, 50u);
  EXPECT_EQ(accepted[1].claimed_examples, 1000000000u);
  EXPECT_EQ(accepted[0].claimed_examples, 0u);
  EXPECT_EQ(h.engine->weight_violations(), 1u);
  // FedAvg with weights 30 and 50: (30 * 1 + 50 * 3) / 80 = 2.25.
  EXPECT_NEAR(h.engine->global()[0], 2.25f, 1e-6);
}

// Item 6: with secure_selection the draw does not follow the seeded Env rng.
TEST(RoundEngineTest, SecureSelectionIsNotTheSeededDraw) {
  auto selection = [](bool secure) {
    RoundEngineOptions o = WaitFor(40);
    o.clients_per_round = 4;
    o.secure_selection = secure;
    Harness h(o, {0, 0}, /*seed=*/7);
    for (int i = 0; i < 40; ++i) h.Register("n" + std::to_string(100 + i), 10);
    return h.engine->selected();
  };
  EXPECT_EQ(selection(false), selection(false));  // the seeded draw repeats
  // 1 in C(40, 4) = 91,390 that two CSPRNG draws agree; three tries all agreeing: never.
  const auto first = selection(true);
  bool differs = false;
  for (int t = 0; t < 3 && !differs; ++t) differs = selection(true) != first;
  EXPECT_TRUE(differs);
  EXPECT_EQ(first.size(), 4u);
}

}  // namespace
}  // namespace fedmesh
