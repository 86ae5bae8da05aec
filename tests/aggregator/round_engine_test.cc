// Round engine tests: options, rounds (selection, quorum, retries, disconnects), strategies,
// the privacy budget and buffered rounds. One engine and N fake nodes in one process
// (round_engine_harness.h). Rejections, restore, codecs and issue 26's defences have files
// of their own (round_engine_*_test.cc).
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
#include "tests/aggregator/round_engine_harness.h"

namespace fedmesh {
namespace {

using namespace round_engine_testing;  // NOLINT: the fixture's vocabulary
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Output = RoundEngine::Output;

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


}  // namespace
}  // namespace fedmesh
