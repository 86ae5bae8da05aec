// Issue 26 item 4, many nodes in one process: seven honest GossipNodes (gossip/gossip_node.h)
// run push-sum in virtual time over a small in-process network that delivers by endpoint,
// as the ZeroMQ driver does (a message for an endpoint nobody listens on is lost). One more
// enrolled peer, mallory, runs a real node too, and every half second it also
//  - sends every honest node forged records of every other member: incarnation 2^64 - 2,
//    its own endpoint at a higher incarnation (with the victim's stale signature, and
//    unsigned), and an accusation of the receiver itself at the top incarnation;
//  - pushes push-sum shares of weight 1e30, NaN and -1 that carry a model of 1000s;
//  - sends PullReplies of 1000s to a node that is joining, unasked. (Once the joiner asks
//    mallory, mallory's answer is a solicited one, which the joiner trusts by design; the
//    attack then stops.)
// Every honest node must keep every honest member alive at its own endpoint with a small
// incarnation, end inside the hull of the honest starting values, and reach the same
// consensus distance as a run in which mallory does not attack. The last test plays the
// PullReply attack message by message against one joining node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/rng.h"
#include "core/wire/wire_codec.h"
#include "crypto/identity.h"
#include "gossip/consensus.h"
#include "gossip/gossip_node.h"
#include "gossip/signed_member.h"
#include "gossip/signed_model.h"

namespace fedmesh {
namespace {

constexpr double kLatency = 0.005;  // seconds, every link
constexpr double kTick = 0.01;      // the driver loop's step
constexpr double kJoinerStart = 20.0;
constexpr double kEnd = 100.0;
constexpr size_t kParams = 8;
constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

class VirtualEnv final : public Env {
 public:
  explicit VirtualEnv(uint64_t seed) : rng_(seed) {}
  double NowSeconds() const override { return now_; }
  Rng& rng() override { return rng_; }
  void Advance(double dt) { now_ += dt; }

 private:
  double now_ = 0;
  Rng rng_;
};

std::string Endpoint(const std::string& id) { return "inproc://" + id; }

// h0..h5 start together, h6 joins later; mallory is enrolled like everyone else.
const std::vector<std::string> kHonest = {"h0", "h1", "h2", "h3", "h4", "h5", "h6"};
const std::string kJoiner = "h6";
const std::string kMallory = "mallory";

class Cluster {
 public:
  explicit Cluster(bool attack) : attack_(attack) {
    for (const std::string& id : kHonest) ids_.emplace(id, Identity::Generate(id).value());
    ids_.emplace(kMallory, Identity::Generate(kMallory).value());
    for (const auto& [id, identity] : ids_) allow_.push_back(identity.public_identity());
  }

  void Run() {
    // Honest values 0..5 (the joiner's own 0 is replaced by the model it pulls); mallory
    // starts at their mean, so it does not move the consensus when it behaves.
    for (int i = 0; i < 6; ++i) Start(kHonest[i], static_cast<float>(i));
    Start(kMallory, 2.5f);
    double next_attack = 2.0;
    while (env_.NowSeconds() < kEnd) {
      if (!nodes_.contains(kJoiner) && env_.NowSeconds() >= kJoinerStart) Start(kJoiner, 0.0f);
      if (attack_ && env_.NowSeconds() >= next_attack) {
        Attack();
        next_attack += 0.5;
      }
      for (auto& [id, node] : nodes_) {
        node->OnTimer();
        if (node->TickDue()) node->Tick();
        for (GossipSend& s : node->TakeSends()) Send(id, std::move(s));
      }
      Deliver();
      env_.Advance(kTick);
    }
  }

  GossipNode& node(const std::string& id) { return *nodes_.at(id); }

  std::vector<std::span<const float>> HonestModels() const {
    std::vector<std::span<const float>> out;
    for (const std::string& id : kHonest) out.push_back(nodes_.at(id)->params());
    return out;
  }

  uint64_t attacks() const { return attacks_; }
  uint64_t unasked_pull_replies() const { return unasked_pull_replies_; }

 private:
  struct InFlight {
    double at;
    std::string from;
    std::string endpoint;
    wire::Message message;
  };

  void Start(const std::string& id, float value) {
    GossipNodeOptions o;
    o.federation_id = "fed";
    o.period_s = 1.0;
    o.join_pull_timeout_s = 5.0;
    o.averaging.protocol = GossipProtocol::kPushSum;
    o.averaging.topology = Topology::kRandom;
    std::vector<Seed> seeds;
    if (id != "h0") seeds.push_back({"h0", Endpoint("h0")});
    auto node = GossipNode::Create(o, ids_.at(id), Endpoint(id), allow_, seeds,
                                   std::vector<float>(kParams, value), env_, nullptr);
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    nodes_[id] = std::move(*node);
  }

  // Where the sender's membership says `to` listens, as the ZeroMQ driver resolves it.
  void Send(const std::string& from, GossipSend s) {
    if (from == kJoiner) {
      if (const auto* g = std::get_if<wire::GossipModel>(&s.message.body);
          g != nullptr && g->kind == wire::GossipKind::kPullRequest) {
        joiner_pulled_from_.push_back(s.to);
      }
    }
    std::optional<Address> address = nodes_.at(from)->AddressOf(s.to);
    if (!address) return;
    in_flight_.push_back(
        {env_.NowSeconds() + kLatency, from, address->endpoint, std::move(s.message)});
  }

  void Deliver() {
    std::vector<InFlight> due;
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if (it->at <= env_.NowSeconds()) {
        due.push_back(std::move(*it));
        it = in_flight_.erase(it);
      } else {
        ++it;
      }
    }
    for (InFlight& m : due) {
      for (auto& [id, node] : nodes_) {
        if (Endpoint(id) == m.endpoint) (void)node->OnMessage(m.from, m.message);
      }
    }
  }

  bool AskedMallory() const {
    return std::find(joiner_pulled_from_.begin(), joiner_pulled_from_.end(), kMallory) !=
           joiner_pulled_from_.end();
  }

  wire::Message FromMallory(wire::Body body) {
    wire::Header h;
    h.federation_id = "fed";
    h.sender_id = kMallory;
    h.message_id = next_sequence_;
    return wire::Message{h, std::move(body)};
  }

  // A model message signed with mallory's real key and a sequence number of its own, above
  // those of mallory's node.
  wire::Message Model(wire::GossipKind kind, double weight) {
    wire::GossipModel g;
    g.kind = kind;
    g.sequence = ++next_sequence_;
    g.step = 5;
    g.weight = weight;
    g.model = wire::FloatPayload(std::vector<float>(kParams, 1000.0f));
    EXPECT_TRUE(SignModel(ids_.at(kMallory), "fed", &g).ok());
    return FromMallory(std::move(g));
  }

  void Attack() {
    ++attacks_;
    const Membership& mine = nodes_.at(kMallory)->membership();
    std::optional<wire::MemberUpdate> self = mine.Find(kMallory);
    ASSERT_TRUE(self.has_value());
    for (const auto& [victim, node] : nodes_) {
      if (victim == kMallory) continue;
      wire::Membership poison;
      poison.kind = wire::MembershipKind::kSync;  // probe_id 0: an answer, never answered
      poison.updates.push_back(*self);
      for (const auto& [other, unused] : nodes_) {
        std::optional<wire::MemberUpdate> known = mine.Find(other);
        if (other == kMallory || !known) continue;
        if (other == victim) {
          wire::MemberUpdate accusation = *known;  // "you are suspect at the top": refute...
          accusation.incarnation = kMaxU64;
          accusation.state = wire::MemberState::kSuspect;
          poison.updates.push_back(accusation);
          continue;
        }
        wire::MemberUpdate huge = *known;
        huge.incarnation = kMaxU64 - 1;
        poison.updates.push_back(huge);
        wire::MemberUpdate moved = *known;  // "it moved to my endpoint"
        moved.endpoint = Endpoint(kMallory);
        moved.incarnation += 1;
        poison.updates.push_back(moved);
        wire::MemberUpdate bare;  // the same with no signature at all
        bare.id = known->id;
        bare.endpoint = Endpoint(kMallory);
        bare.curve_public = known->curve_public;
        bare.sign_public = known->sign_public;
        bare.incarnation = known->incarnation + 2;
        poison.updates.push_back(bare);
      }
      ++next_sequence_;
      (void)node->OnMessage(kMallory, FromMallory(poison));
      for (double w : {1e30, std::nan(""), -1.0}) {
        (void)node->OnMessage(kMallory, Model(wire::GossipKind::kPush, w));
      }
      if (!node->running() && !AskedMallory()) {
        ++unasked_pull_replies_;
        (void)node->OnMessage(kMallory, Model(wire::GossipKind::kPullReply, 1.0));
      }
    }
  }

  bool attack_;
  VirtualEnv env_{26};
  std::map<std::string, Identity> ids_;
  std::vector<PublicIdentity> allow_;
  std::map<std::string, std::unique_ptr<GossipNode>> nodes_;
  std::vector<InFlight> in_flight_;
  std::vector<std::string> joiner_pulled_from_;
  uint64_t next_sequence_ = uint64_t{1} << 40;
  uint64_t attacks_ = 0;
  uint64_t unasked_pull_replies_ = 0;
};

// What every honest node must hold at the end of either run.
void ExpectHonestViewsIntact(Cluster& c) {
  for (const std::string& viewer : kHonest) {
    const Membership& m = c.node(viewer).membership();
    EXPECT_LT(m.incarnation(), uint64_t{1} << 32) << viewer;
    const std::vector<std::string> live = m.LiveIds();
    const std::set<std::string> live_set(live.begin(), live.end());
    for (const std::string& member : kHonest) {
      EXPECT_TRUE(live_set.contains(member)) << viewer << " lost " << member;
      std::optional<wire::MemberUpdate> r = m.Find(member);
      ASSERT_TRUE(r.has_value()) << viewer << " forgot " << member;
      EXPECT_EQ(r->endpoint, Endpoint(member)) << viewer << "'s record of " << member;
      EXPECT_LT(r->incarnation, uint64_t{1} << 32) << viewer << "'s record of " << member;
      EXPECT_EQ(m.AddressOf(member)->endpoint, Endpoint(member)) << viewer << " -> " << member;
    }
  }
}

double HonestConsensusDistance(Cluster& c, const char* run) {
  const double d = ConsensusDistance(c.HonestModels());
  uint64_t refused = 0;
  for (const std::string& id : kHonest) refused += c.node(id).membership().refused_count();
  std::printf("[ info ] %s: honest consensus distance %.3g at %.4f, member records refused %llu\n",
              run, d, Average(c.HonestModels())[0], static_cast<unsigned long long>(refused));
  return d;
}

// Both runs must get this close; a run without attacks ends near 1e-12.
constexpr double kConsensusThreshold = 1e-6;

TEST(GossipAttack, HonestPeersKeepTheirViewAndConvergeWithoutAttacks) {
  Cluster c(/*attack=*/false);
  c.Run();
  ExpectHonestViewsIntact(c);
  EXPECT_LT(HonestConsensusDistance(c, "no attacks"), kConsensusThreshold);
  for (const std::string& id : kHonest) {
    for (float v : c.node(id).params()) {
      EXPECT_GE(v, 0.0f) << id;
      EXPECT_LE(v, 5.0f) << id;
    }
  }
}

TEST(GossipAttack, OneEnrolledPeerCannotPoisonMembershipWeightsOrAJoiningPull) {
  Cluster c(/*attack=*/true);
  c.Run();
  EXPECT_GT(c.attacks(), 100u);
  // At least the one sent the instant the joiner started, before it asked anyone.
  EXPECT_GT(c.unasked_pull_replies(), 0u);
  ExpectHonestViewsIntact(c);
  EXPECT_LT(HonestConsensusDistance(c, "mallory attacking"), kConsensusThreshold);
  // The consensus is an average of honest values only: mallory's 1000s never got in.
  for (const std::string& id : kHonest) {
    for (float v : c.node(id).params()) {
      EXPECT_GE(v, 0.0f) << id;
      EXPECT_LE(v, 5.0f) << id;
    }
  }
}

// The same defences one message at a time on a joining GossipNode: a PullReply from a peer
// it did not ask is dropped and counted (unsolicited) and changes nothing; the answer of the
// peer it asked is adopted; a second answer after that is dropped again.
TEST(GossipAttack, AJoiningNodeAdoptsOnlyTheAnswerItAskedFor) {
  VirtualEnv env(3);
  std::map<std::string, Identity> ids;
  std::vector<PublicIdentity> allow;
  for (const char* name : {"a", "j", "mallory"}) {
    ids.emplace(name, Identity::Generate(name).value());
    allow.push_back(ids.at(name).public_identity());
  }
  GossipNodeOptions o;
  o.federation_id = "fed";
  o.averaging.protocol = GossipProtocol::kPushSum;
  o.averaging.topology = Topology::kRandom;
  auto joiner = GossipNode::Create(o, ids.at("j"), Endpoint("j"), allow, {{"a", Endpoint("a")}},
                                   std::vector<float>(kParams, 0.0f), env, nullptr)
                    .value();
  uint64_t sequence = 0;
  auto reply_from = [&](const std::string& sender, float value) {
    wire::GossipModel g;
    g.kind = wire::GossipKind::kPullReply;
    g.sequence = ++sequence;
    g.step = 3;
    g.model = wire::FloatPayload(std::vector<float>(kParams, value));
    EXPECT_TRUE(SignModel(ids.at(sender), "fed", &g).ok());
    return wire::Message{wire::Header{"fed", sender, 0, 0, sequence}, g};
  };
  Status s = joiner->OnMessage("mallory", reply_from("mallory", 1000.0f));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_EQ(joiner->drops().unsolicited, 1u);
  EXPECT_FALSE(joiner->running());
  EXPECT_EQ(joiner->params()[0], 0.0f);

  // a's Sync makes a and mallory members; the joiner then asks one of them.
  auto record = [&](const std::string& id) {
    wire::MemberUpdate u;
    u.id = id;
    u.endpoint = Endpoint(id);
    u.curve_public = ids.at(id).public_identity().curve_public;
    u.sign_public = ids.at(id).public_identity().sign_public;
    EXPECT_TRUE(SignMember(ids.at(id), "fed", &u).ok());
    return u;
  };
  wire::Membership sync;
  sync.kind = wire::MembershipKind::kSync;
  sync.updates = {record("a"), record("mallory")};
  ASSERT_TRUE(joiner->OnMessage("a", wire::Message{wire::Header{"fed", "a", 0, 0, 1}, sync}).ok());
  std::string asked;
  for (int i = 0; i < 20 && asked.empty(); ++i) {
    joiner->OnTimer();
    for (const GossipSend& send : joiner->TakeSends()) {
      const auto* g = std::get_if<wire::GossipModel>(&send.message.body);
      if (g != nullptr && g->kind == wire::GossipKind::kPullRequest) asked = send.to;
    }
    env.Advance(0.1);
  }
  ASSERT_FALSE(asked.empty());
  const std::string other = asked == "a" ? "mallory" : "a";
  EXPECT_EQ(joiner->OnMessage(other, reply_from(other, 1000.0f)).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(joiner->drops().unsolicited, 2u);
  EXPECT_FALSE(joiner->running());
  ASSERT_TRUE(joiner->OnMessage(asked, reply_from(asked, 2.0f)).ok());
  EXPECT_TRUE(joiner->running());
  EXPECT_EQ(joiner->params()[0], 2.0f);
  EXPECT_EQ(joiner->OnMessage(asked, reply_from(asked, 1000.0f)).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(joiner->drops().unsolicited, 3u);
  EXPECT_EQ(joiner->params()[0], 2.0f);
  EXPECT_EQ(joiner->drops().total(), 3u);
}

}  // namespace
}  // namespace fedmesh
