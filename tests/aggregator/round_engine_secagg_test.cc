// The round engine with secure aggregation (issue 8), in one process: five nodes, each a
// real SecAggClient with its own identity, answer the engine's FitTask with the SecAgg+
// messages, every one through the wire structs; the engine never holds an update in the
// clear and closes the round on the contributors' mean change. A node that dies after
// sending its masked input is in the sum (its self-mask is rebuilt from its neighbours'
// shares); one that dies before is not. Hostile messages are rejected with their cause.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/round_engine.h"
#include "core/env.h"
#include "core/wire/wire_codec.h"
#include "crypto/dp/rdp_accountant.h"
#include "crypto/identity.h"
#include "crypto/secagg/secagg_client.h"
#include "crypto/secagg/secagg_wire.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;
using Output = RoundEngine::Output;

const char kFed[] = "fed-secagg";

class FakeEnv final : public Env {
 public:
  double NowSeconds() const override { return now; }
  Rng& rng() override { return rng_; }
  double now = 1000.0;

 private:
  Rng rng_{3};
};

struct Node {
  Identity identity;
  std::vector<float> delta;
  std::optional<SecAggClient> client;
  // The stage at which the node stops answering (it "dies"): 0 never.
  SecAggStage dies_at = SecAggStage::kFinished;
};

class SecAggRoundTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 5; ++i) {
      const std::string id = "site-" + std::to_string(i);
      auto identity = Identity::Generate(id);
      ASSERT_TRUE(identity.ok());
      std::vector<float> delta(kDim);
      for (size_t k = 0; k < kDim; ++k) delta[k] = 0.01f * static_cast<float>(i + 1) * (k % 2 ? -1.0f : 1.0f) + 0.001f * k;
      nodes_.emplace(id, Node{std::move(*identity), std::move(delta), std::nullopt});
    }
  }

  RoundEngineOptions Options() {
    RoundEngineOptions o;
    o.federation_id = kFed;
    o.total_rounds = 1;
    o.clients_per_round = 5;
    o.min_clients = 3;
    o.min_available_clients = 5;
    o.timeout_s = 100;
    o.secagg.enabled = true;
    o.secagg.clip = 10.0;  // no update is clipped: the sum is of the deltas themselves
    o.secagg.bits = 16;
    o.secagg.stage_timeout_s = 30;
    for (auto& [id, n] : nodes_) o.secagg.allowlist.push_back(n.identity.public_identity());
    return o;
  }

  void Start(RoundEngineOptions o) {
    auto e = RoundEngine::Create(std::move(o), &env_, MakeStrategy("fedavg").value(),
                                 std::vector<float>(kDim, 0.5f));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_.emplace(std::move(*e));
    Pump(engine_->Start());
    for (auto& [id, n] : nodes_) {
      Deliver(id, wire::Register{id, 100, {}});
    }
  }

  wire::Header From(const std::string& id) {
    return wire::Header{kFed, id, engine_->round(), 0, next_id_++};
  }
  void Deliver(const std::string& id, wire::Body body) {
    Pump(engine_->OnMessage(id, wire::Message{From(id), std::move(body)}));
  }

  // Routes the engine's sends to the nodes (which answer at once) and keeps the events.
  void Pump(std::vector<Output> outs) {
    std::deque<Output> queue(outs.begin(), outs.end());
    while (!queue.empty()) {
      Output o = std::move(queue.front());
      queue.pop_front();
      if (auto* send = std::get_if<RoundEngine::Send>(&o)) {
        sent_to_.push_back(send->to);
        for (auto& reply : NodeReceives(send->to, send->message)) {
          auto more = engine_->OnMessage(send->to, wire::Message{From(send->to), std::move(reply)});
          queue.insert(queue.end(), more.begin(), more.end());
        }
      } else if (auto* t = std::get_if<RoundEngine::SetTimer>(&o)) {
        timer_ = t->at_seconds;
      } else {
        events_.push_back(std::move(o));
      }
    }
  }

  std::vector<wire::Body> NodeReceives(const std::string& id, const wire::Message& m) {
    Node& n = nodes_.at(id);
    std::vector<wire::Body> replies;
    auto alive = [&](SecAggStage s) { return static_cast<int>(s) < static_cast<int>(n.dies_at); };
    if (const auto* task = std::get_if<wire::FitTask>(&m.body)) {
      EXPECT_TRUE(task->secagg.has_value());
      auto options = FromWire(m.header, *task);
      EXPECT_TRUE(options.ok()) << options.status().ToString();
      std::vector<PublicIdentity> allow;
      for (auto& [other, o] : nodes_) allow.push_back(o.identity.public_identity());
      auto client = SecAggClient::Create(*options, n.identity, allow);
      EXPECT_TRUE(client.ok()) << client.status().ToString();
      n.client.emplace(std::move(*client));
      if (alive(SecAggStage::kAdvertiseKeys)) replies.push_back(ToWire(n.client->advertisement()));
    } else if (const auto* roster = std::get_if<wire::SecAggRoster>(&m.body)) {
      auto shares = n.client->OnRoster(FromWire(*roster).value());
      EXPECT_TRUE(shares.ok()) << shares.status().ToString();
      if (alive(SecAggStage::kShareKeys)) replies.push_back(ToWire(*shares));
    } else if (const auto* fwd = std::get_if<wire::SecAggForwardedShares>(&m.body)) {
      auto masked = n.client->OnForwardedShares(FromWire(*fwd).value(), n.delta);
      EXPECT_TRUE(masked.ok()) << masked.status().ToString();
      if (alive(SecAggStage::kMaskedInput)) replies.push_back(ToWire(*masked));
    } else if (const auto* req = std::get_if<wire::SecAggUnmaskRequest>(&m.body)) {
      auto reveal = n.client->OnUnmaskRequest(FromWire(*req).value());
      EXPECT_TRUE(reveal.ok()) << reveal.status().ToString();
      if (alive(SecAggStage::kUnmasking)) replies.push_back(ToWire(*reveal));
    } else if (const auto* rej = std::get_if<wire::Reject>(&m.body)) {
      rejects_.push_back(rej->text);
    }
    return replies;
  }

  void FireTimer() {
    ASSERT_TRUE(timer_.has_value());
    env_.now = *timer_;
    timer_.reset();
    Pump(engine_->OnTimer(env_.now));
  }

  std::vector<RoundEngine::RoundClosed> Closed() const {
    std::vector<RoundEngine::RoundClosed> c;
    for (const auto& e : events_) {
      if (const auto* r = std::get_if<RoundEngine::RoundClosed>(&e)) c.push_back(*r);
    }
    return c;
  }

  // The global model after a round whose contributors are `ids`: 0.5 + their mean change.
  void ExpectMeanOf(const std::vector<std::string>& ids) {
    auto closed = Closed();
    ASSERT_EQ(closed.size(), 1u);
    EXPECT_EQ(closed[0].metrics.received, ids.size());
    EXPECT_EQ(closed[0].metrics.update_bytes, 4u * kDim * ids.size());
    for (size_t k = 0; k < kDim; ++k) {
      double mean = 0;
      for (const auto& id : ids) mean += nodes_.at(id).delta[k] / static_cast<double>(ids.size());
      // 16 bits over [-10, 10]: a step of 3e-4 per coordinate per node.
      EXPECT_NEAR(closed[0].global[k], 0.5 + mean, 3e-4) << k;
    }
  }

  static constexpr size_t kDim = 16;
  FakeEnv env_;
  std::map<std::string, Node> nodes_;
  std::optional<RoundEngine> engine_;
  std::optional<double> timer_;
  std::vector<Output> events_;
  std::vector<std::string> rejects_;
  std::vector<std::string> sent_to_;  // every Send's recipient, in order
  uint64_t next_id_ = 1;
};

TEST_F(SecAggRoundTest, TheRoundClosesOnTheExactMeanOfTheMaskedUpdates) {
  Start(Options());
  ExpectMeanOf({"site-0", "site-1", "site-2", "site-3", "site-4"});
  EXPECT_TRUE(rejects_.empty()) << rejects_.front();
  // Nothing the engine emitted carried a node's update: no UpdateAccepted at all.
  for (const auto& e : events_) EXPECT_FALSE(std::holds_alternative<RoundEngine::UpdateAccepted>(e));
}

TEST_F(SecAggRoundTest, ANodeThatDiesAfterItsMaskedInputIsInTheSum) {
  nodes_.at("site-3").dies_at = SecAggStage::kUnmasking;  // sends y, never its shares
  Start(Options());
  EXPECT_TRUE(Closed().empty()) << "stage 4 waits for site-3 until its deadline";
  FireTimer();
  ExpectMeanOf({"site-0", "site-1", "site-2", "site-3", "site-4"});
}

TEST_F(SecAggRoundTest, ANodeThatDiesBeforeItsMaskedInputIsLeftOut) {
  nodes_.at("site-1").dies_at = SecAggStage::kMaskedInput;  // shares keys, never sends y
  Start(Options());
  FireTimer();  // stage 3 closes at its deadline without site-1
  ExpectMeanOf({"site-0", "site-2", "site-3", "site-4"});
}

// A site revoked (SIGHUP after its key left the allowlist, or `kick`) while the secure round
// waits for it: the stage closes at once, not at its deadline, nothing more is sent to it,
// and the round ends on the exact mean of the others, or with its update when its masked
// input came before the revocation. At each of the four stages.
TEST_F(SecAggRoundTest, ARevokedSiteIsNotWaitedForAtAnyStage) {
  const SecAggStage stages[] = {SecAggStage::kAdvertiseKeys, SecAggStage::kShareKeys, SecAggStage::kMaskedInput,
                                SecAggStage::kUnmasking};
  for (SecAggStage stage : stages) {
    SCOPED_TRACE("silent from stage " + std::string(SecAggStageName(stage)));
    nodes_.clear();
    SetUp();
    events_.clear();
    rejects_.clear();
    sent_to_.clear();
    timer_.reset();
    nodes_.at("site-2").dies_at = stage;
    Start(Options());
    ASSERT_TRUE(Closed().empty()) << "the stage waits for site-2";
    const size_t sends_before = sent_to_.size();
    Pump(engine_->OnRevoke("site-2"));
    for (size_t i = sends_before; i < sent_to_.size(); ++i) EXPECT_NE(sent_to_[i], "site-2") << i;
    if (stage == SecAggStage::kUnmasking) {
      ExpectMeanOf({"site-0", "site-1", "site-2", "site-3", "site-4"});
    } else {
      ExpectMeanOf({"site-0", "site-1", "site-3", "site-4"});
    }
  }
}

// Revoked below quorum (3 of 5 silent in ShareKeys, then revoked one by one): once nothing
// more can come the attempt fails at once, not at the stage's deadline, and is retried.
TEST_F(SecAggRoundTest, RevocationsBelowQuorumFailTheAttemptAtOnce) {
  for (const char* id : {"site-0", "site-1", "site-2"}) nodes_.at(id).dies_at = SecAggStage::kShareKeys;
  RoundEngineOptions o = Options();
  o.max_retries = 0;
  Start(o);
  const double now = env_.now;
  for (const char* id : {"site-0", "site-1", "site-2"}) Pump(engine_->OnRevoke(id));
  EXPECT_EQ(env_.now, now);
  bool finished = false;
  for (const auto& e : events_) {
    if (const auto* f = std::get_if<RoundEngine::Finished>(&e)) {
      finished = true;
      EXPECT_THAT(f->status.message(), HasSubstr("secure aggregation stage"));
    }
  }
  EXPECT_TRUE(finished) << "the attempt still waits for its deadline";
}

TEST_F(SecAggRoundTest, TooFewNodesFailTheAttemptAndItIsRetried) {
  for (const char* id : {"site-0", "site-1", "site-2"}) nodes_.at(id).dies_at = SecAggStage::kMaskedInput;
  RoundEngineOptions o = Options();
  o.max_retries = 0;
  Start(o);
  FireTimer();  // only 2 masked inputs, min_clients 3
  EXPECT_TRUE(Closed().empty());
  bool finished = false;
  for (const auto& e : events_) {
    if (const auto* f = std::get_if<RoundEngine::Finished>(&e)) {
      finished = true;
      EXPECT_EQ(f->status.code(), StatusCode::kDeadlineExceeded);
      EXPECT_THAT(f->status.message(), HasSubstr("secure aggregation stage"));
    }
  }
  EXPECT_TRUE(finished);
}

// Distributed DP: every node adds its share of the noise before masking; the strategy
// only accounts. The round's model is the mean plus noise of about sqrt(5) * sigma / 5
// per coordinate, and its metrics carry the accountant's epsilon.
TEST_F(SecAggRoundTest, DistributedNoiseIsInTheSumAndAccounted) {
  RoundEngineOptions o = Options();
  o.secagg.noise_stddev = 0.02;
  StrategyOptions so;
  so.dp.distributed = true;
  so.dp.clip = o.secagg.clip;
  so.dp.noise_multiplier = 1.0;
  so.dp.expected_clients = 5;
  auto e = RoundEngine::Create(o, &env_, MakeStrategy("fedavg", so).value(),
                               std::vector<float>(kDim, 0.5f));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  engine_.emplace(std::move(*e));
  Pump(engine_->Start());
  for (auto& [id, n] : nodes_) Deliver(id, wire::Register{id, 100, {}});
  auto closed = Closed();
  ASSERT_EQ(closed.size(), 1u);
  ASSERT_TRUE(closed[0].metrics.privacy.has_value());
  auto reference = RdpAccountant::Create().value();
  ASSERT_TRUE(reference.Compose(1.0, 1.0).ok());
  EXPECT_DOUBLE_EQ(closed[0].metrics.privacy->epsilon, reference.Epsilon(1e-5)->epsilon);
  double worst = 0, moved = 0;
  for (size_t k = 0; k < kDim; ++k) {
    double mean = 0;
    for (const auto& [id, n] : nodes_) mean += n.delta[k] / 5.0;
    const double off = std::abs(closed[0].global[k] - (0.5 + mean));
    worst = std::max(worst, off);
    moved += off;
  }
  const double sd = std::sqrt(5.0) * 0.02 / 5.0;  // 0.0089 on the mean
  EXPECT_LT(worst, 6 * sd) << "more than the nodes' noise";
  EXPECT_GT(moved / kDim, 0.2 * sd) << "no noise reached the model";
}

TEST_F(SecAggRoundTest, HostileMessagesAreRejectedWithTheirCause) {
  RoundEngineOptions o = Options();
  for (auto& [id, n] : nodes_) n.dies_at = SecAggStage::kAdvertiseKeys;  // we speak for them
  Start(o);
  Node& n0 = nodes_.at("site-0");
  ASSERT_TRUE(n0.client.has_value());
  auto last_reject = [&](const std::vector<Output>& outs) -> std::optional<RoundEngine::UpdateRejected> {
    for (const auto& e : outs) {
      if (const auto* r = std::get_if<RoundEngine::UpdateRejected>(&e)) return *r;
    }
    return std::nullopt;
  };
  // site-1 relays site-0's advertisement as its own sender.
  auto outs = engine_->OnMessage("site-1", wire::Message{From("site-1"), ToWire(n0.client->advertisement())});
  auto r = last_reject(outs);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cause, RejectCause::kMalformed);
  EXPECT_THAT(r->text, HasSubstr("comes from \"site-1\""));
  // A plain FitResult in a secure round.
  wire::FitResult plain;
  plain.round = 1;
  plain.num_examples = 10;
  plain.update = wire::FloatPayload(std::vector<float>(kDim, 0.1f));
  outs = engine_->OnMessage("site-0", wire::Message{From("site-0"), plain});
  r = last_reject(outs);
  ASSERT_TRUE(r.has_value());
  EXPECT_THAT(r->text, HasSubstr("aggregates securely"));
  // The real advertisement is accepted once; a second one is a duplicate.
  outs = engine_->OnMessage("site-0", wire::Message{From("site-0"), ToWire(n0.client->advertisement())});
  EXPECT_FALSE(last_reject(outs).has_value());
  outs = engine_->OnMessage("site-0", wire::Message{From("site-0"), ToWire(n0.client->advertisement())});
  r = last_reject(outs);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cause, RejectCause::kDuplicate);
  // A message for a later round.
  wire::Message later{From("site-0"), ToWire(n0.client->advertisement())};
  later.header.round = 2;
  r = last_reject(engine_->OnMessage("site-0", later));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cause, RejectCause::kWrongRound);
}

TEST(RoundEngineSecAggOptions, RefusesBufferedRoundsOrNoAllowlist) {
  RoundEngineOptions o;
  o.federation_id = kFed;
  o.secagg.enabled = true;
  FakeEnv env;
  auto empty = RoundEngine::Create(o, &env, MakeStrategy("fedavg").value(), {0.0f});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("secagg.allowlist is empty"));
  auto id = Identity::Generate("a").value();
  o.secagg.allowlist.push_back(id.public_identity());
  EXPECT_TRUE(Validate(o).ok());
  o.secagg.stage_timeout_s = 0;
  EXPECT_THAT(Validate(o).message(), HasSubstr("secagg.stage_timeout_s"));
  o.secagg.stage_timeout_s = 10;
  o.secagg.bits = 40;
  EXPECT_THAT(Validate(o).message(), HasSubstr("secagg.bits"));
  o.secagg.bits = 16;
  o.mode = RoundMode::kBuffered;
  o.buffer_size = 2;
  EXPECT_THAT(Validate(o).message(), HasSubstr("synchronous rounds"));
}

}  // namespace
}  // namespace fedmesh
