// Round engine against enrolled sites that misbehave (issue 26): revocation, capped
// weights, and selections drawn from the OS CSPRNG under DP.
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

namespace fedmesh::round_engine_testing {
namespace {

wire::Message TaskFailedMessage(Harness& h, const std::string& id, uint64_t round, std::string why) {
  wire::Reject r;
  r.reason = wire::RejectReason::kTaskFailed;
  r.text = std::move(why);
  return wire::Message{h.HeaderFrom(id, round), std::move(r)};
}

// Issue 20: a node whose trainer failed says so (Reject TASK_FAILED); the round stops
// waiting for it and closes with the others at once, and the reason is reported.
TEST(RoundEngineTest, TaskFailedNodeIsNotWaitedFor) {
  Harness h(WaitFor(3));
  for (const char* id : {"a", "b", "c"}) h.Register(id, 10, 1.0f);
  ASSERT_EQ(h.engine->selected().size(), 3u);
  h.Answer("a");
  h.Answer("b");
  EXPECT_TRUE(h.Events<RoundEngine::RoundClosed>().empty());
  auto outs = h.Deliver("c", TaskFailedMessage(h, "c", 1, "the trainer was killed by signal 9"));
  auto failed = Filter<RoundEngine::TaskFailed>(outs);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].node_id, "c");
  EXPECT_EQ(failed[0].round, 1u);
  EXPECT_EQ(failed[0].reason, "the trainer was killed by signal 9");
  auto closed = Filter<RoundEngine::RoundClosed>(outs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].metrics.received, 2u);
  EXPECT_EQ(h.engine->tasks_failed(), 1u);
  // Unlike a revoked node, c stays registered and is a candidate for round 2.
  EXPECT_TRUE(h.engine->connected("c"));
}

// A node that keeps failing its task is left out of the following rounds, 1, 2, then 4
// rounds (capped at failure_backoff_max_rounds), so its slot goes to nodes that train; an
// accepted update clears the count.
TEST(RoundEngineTest, ANodeThatKeepsFailingIsLeftOutForLongerEachTime) {
  RoundEngineOptions o = TestOptions();  // min_clients 2: round 1 opens with a and b
  o.clients_per_round = 5;
  o.total_rounds = 20;
  o.failure_backoff_max_rounds = 4;
  Harness h(o);
  for (const char* id : {"a", "b", "c", "d", "e"}) h.Register(id, 10, 1.0f);
  const auto selects_e = [&] {
    const auto& s = h.engine->selected();
    return std::find(s.begin(), s.end(), "e") != s.end();
  };
  // The rounds e is selected in, and the back-off each failure reports.
  std::vector<uint64_t> with_e, next_rounds;
  for (int r = 1; r <= 18; ++r) {
    ASSERT_EQ(h.engine->round(), static_cast<uint64_t>(r));
    const bool e = selects_e();
    if (e) with_e.push_back(h.engine->round());
    if (r > 1) {
      EXPECT_EQ(h.engine->selected().size(), e ? 5u : 4u) << "round " << r;
    }
    for (const std::string& id : std::vector<std::string>(h.engine->selected())) {
      if (id == "e" && r < 17) {  // e fails every task before round 17, then trains
        auto failed = Filter<RoundEngine::TaskFailed>(h.Deliver("e", TaskFailedMessage(h, "e", h.engine->round(), "no GPU")));
        ASSERT_EQ(failed.size(), 1u);
        next_rounds.push_back(failed[0].next_round);
      } else {
        h.Answer(id);
      }
    }
  }
  // Failures in rounds 2, 4, 7 and 12: left out for 1, 2, 4 and 4 (the cap) rounds; it trains
  // in round 17 and is selected again in round 18.
  EXPECT_THAT(with_e, ElementsAre(2u, 4u, 7u, 12u, 17u, 18u));
  EXPECT_THAT(next_rounds, ElementsAre(4u, 7u, 12u, 17u));
  EXPECT_EQ(h.engine->tasks_failed(), 4u);
}

// Left out only while enough nodes remain: with min_clients 3 of 3 the failing node is
// selected again at once (the retry); and never under DP's secure selection.
TEST(RoundEngineTest, BackOffNeverStarvesARoundAndIsOffUnderSecureSelection) {
  for (const bool dp : {false, true}) {
    SCOPED_TRACE(dp ? "secure selection" : "too few nodes");
    RoundEngineOptions o = WaitFor(dp ? 4 : 3);
    o.min_clients = dp ? 2 : 3;
    o.clients_per_round = dp ? 4 : 3;
    o.secure_selection = dp;
    Harness h(o);
    for (const char* id : {"a", "b", "c", "d"}) {
      if (dp || std::string(id) != "d") h.Register(id, 10, 1.0f);
    }
    ASSERT_THAT(h.engine->selected(), ::testing::Contains("c"));
    if (!dp) {
      h.Answer("a");
      h.Answer("b");
    }
    auto outs = h.Deliver("c", TaskFailedMessage(h, "c", 1, "no GPU"));
    auto failed = Filter<RoundEngine::TaskFailed>(outs);
    ASSERT_EQ(failed.size(), 1u);
    if (dp) {
      EXPECT_EQ(failed[0].next_round, 0u);  // not left out
      for (const std::string& id : std::vector<std::string>(h.engine->selected())) {
        if (id != "c") h.Answer(id);
      }
      ASSERT_EQ(h.engine->round(), 2u);
    } else {
      EXPECT_EQ(failed[0].next_round, 3u);
      ASSERT_EQ(Filter<RoundEngine::RoundRetried>(outs).size(), 1u);  // 2 answers < min_clients 3
      EXPECT_EQ(h.engine->round(), 1u);
    }
    EXPECT_THAT(h.engine->selected(), ::testing::Contains("c"));
  }
}

// A stale report (another round), one from a node that already answered, or from a node
// that was not selected changes nothing; below quorum the round is retried at once.
TEST(RoundEngineTest, TaskFailedOnlyCountsForTheNodesOpenTask) {
  RoundEngineOptions o = WaitFor(3);
  o.min_clients = 3;
  o.clients_per_round = 3;
  Harness h(o);
  for (const char* id : {"a", "b", "c", "d"}) h.Register(id, 10, 1.0f);
  std::vector<std::string> sel = h.engine->selected();
  ASSERT_EQ(sel.size(), 3u);
  std::string other;
  for (const char* id : {"a", "b", "c", "d"})
    if (std::find(sel.begin(), sel.end(), id) == sel.end()) other = id;
  h.Answer(sel[0]);
  EXPECT_TRUE(Filter<RoundEngine::TaskFailed>(h.Deliver(sel[1], TaskFailedMessage(h, sel[1], 7, "stale"))).empty());
  EXPECT_TRUE(Filter<RoundEngine::TaskFailed>(h.Deliver(sel[0], TaskFailedMessage(h, sel[0], 1, "late"))).empty());
  EXPECT_TRUE(Filter<RoundEngine::TaskFailed>(h.Deliver(other, TaskFailedMessage(h, other, 1, "x"))).empty());
  EXPECT_EQ(h.engine->tasks_failed(), 0u);
  h.Answer(sel[1]);
  auto outs = h.Deliver(sel[2], TaskFailedMessage(h, sel[2], 1, "trainer hung"));
  ASSERT_EQ(Filter<RoundEngine::TaskFailed>(outs).size(), 1u);
  auto retried = Filter<RoundEngine::RoundRetried>(outs);
  ASSERT_EQ(retried.size(), 1u);
  EXPECT_NE(retried[0].reason.find("failed its task (trainer hung)"), std::string::npos) << retried[0].reason;
  // No Reject goes back to the node for its own Reject.
  for (const Output& out : outs) {
    if (const auto* send = std::get_if<RoundEngine::Send>(&out)) {
      EXPECT_FALSE(std::holds_alternative<wire::Reject>(send->message.body));
    }
  }
}

}  // namespace
}  // namespace fedmesh::round_engine_testing
