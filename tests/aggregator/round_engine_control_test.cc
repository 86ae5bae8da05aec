// RoundEngine's admin control: Pause, Resume, Abort (fedmesh-admin, aggregator/admin_server.h).
#include "aggregator/round_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/aggregator/round_engine_harness.h"

namespace fedmesh {
namespace {

using namespace round_engine_testing;  // NOLINT: the fixture's vocabulary
using ::testing::ElementsAre;
using Output = RoundEngine::Output;

TEST(RoundEngineControlTest, PauseLetsTheOpenRoundCloseAndOpensNoOtherUntilResume) {
  Harness h(WaitFor(2), {0.0f, 0.0f});
  h.Register("n1", 100, 1.0f);
  h.Register("n2", 100, 3.0f);
  ASSERT_EQ(h.engine->phase(), RoundEngine::Phase::kRoundOpen);
  h.Absorb(h.engine->Pause());
  EXPECT_TRUE(h.engine->paused());
  h.Answer("n1");
  auto outs = h.Answer("n2");  // round 1 still closes: (1 + 3) / 2 = 2
  auto closed = Filter<RoundEngine::RoundClosed>(outs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_THAT(closed[0].global, ElementsAre(2.0f, 2.0f));
  EXPECT_TRUE(Filter<RoundEngine::RoundOpened>(outs).empty());  // but round 2 does not open
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);
  EXPECT_EQ(h.engine->round(), 2u);
  // A node registering while paused is acknowledged, not given a task.
  outs = h.Register("n3", 100, 0.0f);
  EXPECT_TRUE(Filter<RoundEngine::RoundOpened>(outs).empty());
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kWaitingForNodes);

  outs = h.Absorb(h.engine->Resume());
  EXPECT_FALSE(h.engine->paused());
  auto opened = Filter<RoundEngine::RoundOpened>(outs);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0].round, 2u);
  EXPECT_THAT(opened[0].selected, ElementsAre("n1", "n2", "n3"));
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kRoundOpen);
  // A second Resume changes nothing.
  EXPECT_TRUE(h.engine->Resume().empty());
}

TEST(RoundEngineControlTest, AbortEndsTheFederationAndDropsTheOpenRound) {
  Harness h(WaitFor(2), {0.0f, 0.0f});
  h.Register("n1", 100, 1.0f);
  h.Register("n2", 100, 3.0f);
  h.Answer("n1");  // one update accepted in the open round
  auto outs = h.Absorb(h.engine->Abort("by alice"));
  auto finished = Filter<RoundEngine::Finished>(outs);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].status.ok());
  EXPECT_EQ(finished[0].stopped_early, "aborted: by alice");
  EXPECT_EQ(finished[0].rounds_completed, 0u);
  EXPECT_EQ(h.engine->phase(), RoundEngine::Phase::kFinished);
  EXPECT_THAT(h.engine->global(), ElementsAre(0.0f, 0.0f));  // nothing aggregated
  // n2's late answer is refused; nothing else happens.
  outs = h.Answer("n2");
  EXPECT_TRUE(Filter<RoundEngine::RoundClosed>(outs).empty());
  EXPECT_TRUE(h.engine->Abort("again").empty());
  EXPECT_TRUE(h.engine->Pause().empty());
  EXPECT_FALSE(h.engine->paused());
}

}  // namespace
}  // namespace fedmesh
