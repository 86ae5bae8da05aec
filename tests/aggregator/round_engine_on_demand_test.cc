// RoundEngineOptions::rounds_on_demand and GrantRound: a regional aggregator's engine opens a
// round only when its top grants one, numbered as the top's round, from the top's model.
#include "aggregator/round_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/aggregator/round_engine_harness.h"

namespace fedmesh {
namespace {

using namespace round_engine_testing;  // NOLINT: the fixture's vocabulary
using ::testing::ElementsAre;

RoundEngineOptions OnDemand() {
  RoundEngineOptions o = WaitFor(2);
  o.rounds_on_demand = true;
  o.total_rounds = 1000;
  o.clients_per_round = 2;
  return o;
}

TEST(RoundEngineOnDemandTest, RoundsOpenOnlyWhenGrantedAndTrainTheGrantedModel) {
  Harness h(OnDemand(), {0.0f, 0.0f});
  h.Register("n1", 100, 1.0f);
  h.Register("n2", 300, 3.0f);
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);  // no grant yet
  EXPECT_FALSE(h.LastFitTask("n1").has_value());

  RoundEngine::TrainingSettings settings{3, 8, 0.2, 0.5};
  auto granted = h.engine->GrantRound(7, {10.0f, -10.0f}, settings);
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  h.Absorb(*granted);
  EXPECT_EQ(h.engine->model_version(), 1u);
  EXPECT_TRUE(h.engine->granted());
  const auto task = h.LastFitTask("n1");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->round, 7u);  // the top's number
  EXPECT_EQ(task->local_epochs, 3u);
  EXPECT_EQ(task->batch_size, 8u);
  EXPECT_EQ(task->learning_rate, 0.2);
  EXPECT_EQ(task->momentum, 0.5);
  EXPECT_EQ(wire::PayloadFloats(task->global_model).value(), (std::vector<float>{10.0f, -10.0f}));

  // A second grant while one is open is refused.
  EXPECT_EQ(h.engine->GrantRound(8, {0.0f, 0.0f}).status().code(), StatusCode::kFailedPrecondition);

  h.Answer("n1");
  auto outs = h.Answer("n2");
  auto closed = Filter<RoundEngine::RoundClosed>(outs);
  ASSERT_EQ(closed.size(), 1u);
  // (100 * 1 + 300 * 3) / 400 = 2.5 on top of the granted model.
  EXPECT_THAT(closed[0].global, ElementsAre(12.5f, -7.5f));
  EXPECT_EQ(closed[0].round, 7u);
  EXPECT_EQ(closed[0].model_version, 2u);
  EXPECT_EQ(closed[0].metrics.num_examples, 400u);
  EXPECT_FALSE(h.engine->granted());
  // Nothing opens after the close: the next round is the top's to grant.
  EXPECT_TRUE(Filter<RoundEngine::RoundOpened>(outs).empty());
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);

  // Old or repeated rounds, other sizes and non-finite models are refused.
  EXPECT_EQ(h.engine->GrantRound(7, {0.0f, 0.0f}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(h.engine->GrantRound(9, {0.0f}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.engine->GrantRound(9, {0.0f, std::nanf("")}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.engine->GrantRound(9, {0.0f, 0.0f}, RoundEngine::TrainingSettings{0, 8, 0.1, 0.0})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(h.engine->model_version(), 2u);  // refusals changed nothing

  auto next = h.engine->GrantRound(9, {1.0f, 1.0f});
  ASSERT_TRUE(next.ok());
  h.Absorb(*next);
  EXPECT_EQ(h.engine->round(), 9u);
  EXPECT_EQ(h.engine->model_version(), 3u);
  EXPECT_EQ(h.LastFitTask("n2")->round, 9u);
}

TEST(RoundEngineOnDemandTest, AGrantBeforeEnoughNodesOpensWhenTheyRegister) {
  Harness h(OnDemand(), {0.0f, 0.0f});
  auto granted = h.engine->GrantRound(1, {2.0f, 2.0f});
  ASSERT_TRUE(granted.ok());
  h.Absorb(*granted);
  EXPECT_TRUE(Filter<RoundEngine::RoundOpened>(*granted).empty());
  h.Register("n1", 10, 1.0f);
  h.Register("n2", 10, 1.0f);
  ASSERT_EQ(h.Events<RoundEngine::RoundOpened>().size(), 1u);
  EXPECT_EQ(h.Events<RoundEngine::RoundOpened>()[0].round, 1u);
}

TEST(RoundEngineOnDemandTest, GrantNeedsTheOptionAndValidateRefusesWhatARegionCannotDo) {
  Harness plain(WaitFor(2), {0.0f, 0.0f});
  EXPECT_EQ(plain.engine->GrantRound(1, {0.0f, 0.0f}).status().code(), StatusCode::kFailedPrecondition);

  RoundEngineOptions o = OnDemand();
  o.mode = RoundMode::kBuffered;
  o.buffer_size = 2;
  EXPECT_NE(Validate(o).message().find("synchronous"), std::string::npos);
  o = OnDemand();
  o.update_prediction = 0.5;
  EXPECT_NE(Validate(o).message().find("update_prediction"), std::string::npos);
}

TEST(RoundEngineOnDemandTest, ARoundThatFailsEveryRetryIsGivenUpNotTheFederation) {
  RoundEngineOptions o = OnDemand();
  o.max_retries = 1;
  Harness h(o, {0.0f, 0.0f});
  h.Register("n1", 10, 1.0f);
  h.Register("n2", 10, 1.0f);
  auto granted = h.engine->GrantRound(3, {1.0f, 1.0f});
  ASSERT_TRUE(granted.ok());
  h.Absorb(*granted);
  h.Answer("n1");  // one of two: below quorum (min_clients 2) at the deadline
  h.FireTimer();   // attempt 1 fails: retried
  auto last = h.FireTimer();  // attempt 2 fails: given up
  auto retried = h.Events<RoundEngine::RoundRetried>();
  ASSERT_EQ(retried.size(), 2u);
  EXPECT_FALSE(retried[0].abandoned);
  EXPECT_TRUE(retried[1].abandoned);
  EXPECT_EQ(retried[1].round, 3u);
  EXPECT_TRUE(h.Events<RoundEngine::Finished>().empty());
  EXPECT_NE(h.engine->phase(), RoundEngine::Phase::kFinished);
  EXPECT_FALSE(h.engine->granted());
  EXPECT_TRUE(Filter<RoundEngine::RoundOpened>(last).empty());
  // The given-up round is not granted again; the next one opens with both nodes.
  EXPECT_EQ(h.engine->GrantRound(3, {0.0f, 0.0f}).status().code(), StatusCode::kFailedPrecondition);
  auto next = h.engine->GrantRound(4, {0.0f, 0.0f});
  ASSERT_TRUE(next.ok());
  h.Absorb(*next);
  auto opened = Filter<RoundEngine::RoundOpened>(*next);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0].round, 4u);
  EXPECT_EQ(opened[0].attempt, 1u);
}

TEST(RoundEngineOnDemandTest, ARestoredGrantResumesAndAnUngrantedRestoreWaits) {
  RoundEngine::RestoredState s;
  s.round = 4;
  s.model_version = 6;
  s.global = {1.0f, 1.0f};
  s.granted = true;
  s.last_closed_round = 3;
  Harness h(s, OnDemand());
  h.Register("n1", 10, 2.0f);
  h.Register("n2", 10, 2.0f);
  ASSERT_EQ(h.Events<RoundEngine::RoundOpened>().size(), 1u);
  EXPECT_EQ(h.Events<RoundEngine::RoundOpened>()[0].round, 4u);

  RoundEngine::RestoredState w;
  w.round = 4;
  w.model_version = 7;
  w.global = {1.0f, 1.0f};
  w.last_closed_round = 4;
  Harness waiting(w, OnDemand());
  waiting.Register("n1", 10, 2.0f);
  waiting.Register("n2", 10, 2.0f);
  EXPECT_TRUE(waiting.Events<RoundEngine::RoundOpened>().empty());
  EXPECT_EQ(waiting.engine->GrantRound(4, {0.0f, 0.0f}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(waiting.engine->GrantRound(5, {0.0f, 0.0f}).ok());

  RoundEngine::RestoredState bad = s;
  bad.last_closed_round = 4;
  auto e = RoundEngine::Restore(OnDemand(), &waiting.env, std::make_unique<FedAvg>(), {}, bad);
  EXPECT_FALSE(e.ok());
}

}  // namespace
}  // namespace fedmesh
