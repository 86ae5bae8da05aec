// Round engine: resuming after a crash from what the driver persisted (RestoredState).
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
