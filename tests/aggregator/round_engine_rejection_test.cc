// Round engine: every message a node can send that the engine refuses, each with its cause
// and counter (RejectCause), the node told why, nothing else changed.
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


}  // namespace
}  // namespace fedmesh
