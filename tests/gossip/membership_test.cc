// SWIM membership (gossip/membership.h) on one node fed by hand: joining through seeds, the
// allowlist, probes and their timeouts in virtual time, suspicion, death, refutation, the
// precedence rules, piggyback retransmission, options validation and the checkpoint; and
// (issue 26 item 4) the self-signed records: a third party can neither raise a member's
// incarnation to the top nor move it to another endpoint, unsigned records are refused,
// and no refutation wraps. The many-node behaviour is tests/sim/membership_sim_test.cc and
// tests/gossip/gossip_attack_test.cc.
#include "gossip/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/rng.h"
#include "gossip/signed_member.h"

namespace fedmesh {
namespace {

using wire::MembershipKind;
using wire::MemberState;
using wire::MemberUpdate;

// Virtual time for one node, as sim/virtual_clock_env.h gives it (gossip_tests does not
// link the simulator library): moved only by the test, so timeouts are exact.
class VirtualClockEnv final : public Env {
 public:
  explicit VirtualClockEnv(uint64_t seed) : rng_(seed) {}
  double NowSeconds() const override { return now_; }
  Rng& rng() override { return rng_; }
  void AdvanceTo(double t) {
    ASSERT_GE(t, now_);
    now_ = t;
  }

 private:
  double now_ = 0;
  Rng rng_;
};

constexpr const char* kFed = "fed";
constexpr uint64_t kTop = std::numeric_limits<uint64_t>::max();

// One real identity per (name, salt), made once: a salt other than 0 is someone else
// enrolled under that name (other keys).
const Identity& Id(const std::string& name, uint8_t salt = 0) {
  static auto* ids = new std::map<std::pair<std::string, uint8_t>, Identity>();
  auto it = ids->find({name, salt});
  if (it == ids->end())
    it = ids->emplace(std::pair{name, salt}, Identity::Generate(name).value()).first;
  return it->second;
}

PublicIdentity Ident(const std::string& name, uint8_t salt = 0) {
  return Id(name, salt).public_identity();
}

// `name`'s record at `incarnation` and `endpoint`, signed by `name` itself (Ed25519 is
// deterministic, so equal records compare equal), then given `state`.
MemberUpdate Signed(const std::string& name, uint64_t incarnation, MemberState state,
                    const std::string& endpoint, uint8_t salt = 0) {
  const PublicIdentity p = Ident(name, salt);
  MemberUpdate u{name, endpoint, p.curve_public, p.sign_public, incarnation, MemberState::kAlive,
                 {}};
  EXPECT_TRUE(SignMember(Id(name, salt), kFed, &u).ok());
  u.state = state;
  return u;
}

MemberUpdate Rec(const std::string& name, uint64_t incarnation = 0,
                 MemberState state = MemberState::kAlive, uint8_t salt = 0) {
  return Signed(name, incarnation, state, "tcp://" + name + ":7000", salt);
}

Result<std::unique_ptr<Membership>> CreateAs(const std::string& self, Env& env,
                                             std::vector<PublicIdentity> allowlist,
                                             std::vector<Seed> seeds = {},
                                             MembershipOptions options = {},
                                             uint64_t incarnation = 0, uint8_t salt = 0) {
  return Membership::Create(options, Id(self, salt), kFed, "tcp://" + self + ":7000", incarnation,
                            std::move(allowlist), std::move(seeds), env);
}

wire::Membership Msg(MembershipKind kind, std::vector<MemberUpdate> updates, uint64_t probe_id = 0,
                     std::string target = "") {
  return wire::Membership{kind, probe_id, std::move(target), std::move(updates)};
}

std::vector<PublicIdentity> Allow(std::initializer_list<const char*> names) {
  std::vector<PublicIdentity> out;
  for (const char* n : names) out.push_back(Ident(n));
  return out;
}

std::vector<std::string> Ids(std::initializer_list<const char*> names) {
  return std::vector<std::string>(names.begin(), names.end());
}

// Node "a" alone with hand-played peers. `alive` peers answer Pings and relay PingReqs;
// `relay_only` peers answer only PingReqs relayed through an alive peer (a lossy direct link).
class Harness {
 public:
  explicit Harness(MembershipOptions options = {},
                   std::vector<PublicIdentity> allowlist = Allow({"a", "b", "c", "d"}),
                   std::vector<Seed> seeds = {{"b", "tcp://b:7000"}})
      : env_(7) {
    auto m = CreateAs("a", env_, std::move(allowlist), std::move(seeds), options);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    m_ = std::move(*m);
  }

  Membership& m() { return *m_; }
  VirtualClockEnv& env() { return env_; }

  // Joins through b's Sync of `view`, then forgets what was sent.
  void JoinWith(std::vector<MemberUpdate> view) {
    ASSERT_TRUE(m_->OnMessage("b", Msg(MembershipKind::kSync, std::move(view))).ok());
    Drain();
  }

  // Runs every timer due up to `t`, answering as the peers would.
  void RunUntil(double t) {
    for (int guard = 0; m_->NextTimerAt() <= t; ++guard) {
      ASSERT_LT(guard, 100000) << "NextTimerAt does not advance";
      env_.AdvanceTo(std::max(env_.NowSeconds(), m_->NextTimerAt()));
      m_->OnTimer();
      Answer();
    }
    env_.AdvanceTo(t);
  }

  std::vector<MembershipSend> Drain() {
    auto sends = m_->TakeSends();
    for (const auto& s : sends) log_.push_back({env_.NowSeconds(), s});
    return sends;
  }

  struct Logged {
    double at;
    MembershipSend send;
  };
  const std::vector<Logged>& log() const { return log_; }
  // The first message of `kind` sent to `to` (empty `to`: to anyone), or nullptr.
  const Logged* First(MembershipKind kind, const std::string& to = "") const {
    for (const auto& l : log_) {
      if (l.send.message.kind == kind && (to.empty() || l.send.to == to)) return &l;
    }
    return nullptr;
  }

  std::set<std::string> alive = {"b", "c", "d"};
  std::set<std::string> relay_only;

 private:
  void Answer() {
    for (const auto& s : Drain()) {
      const auto& msg = s.message;
      if (msg.kind == MembershipKind::kPing && alive.contains(s.to)) {
        Ack(s.to, msg.probe_id, s.to);
      } else if (msg.kind == MembershipKind::kPingReq && alive.contains(s.to) &&
                 (alive.contains(msg.target) || relay_only.contains(msg.target))) {
        Ack(s.to, msg.probe_id, msg.target);
      }
    }
  }
  void Ack(const std::string& from, uint64_t probe_id, const std::string& target) {
    ASSERT_TRUE(m_->OnMessage(from, Msg(MembershipKind::kAck, {Rec(from)}, probe_id, target)).ok());
    Drain();  // relayed answers are not answered again
  }

  VirtualClockEnv env_;
  std::unique_ptr<Membership> m_;
  std::vector<Logged> log_;
};

std::vector<MembershipSend> OfKind(const std::vector<MembershipSend>& sends, MembershipKind k) {
  std::vector<MembershipSend> out;
  for (const auto& s : sends) {
    if (s.message.kind == k) out.push_back(s);
  }
  return out;
}

// ---- Joining -----------------------------------------------------------------------------

TEST(MembershipTest, JoinGoesToAllowlistedSeedsUntilASyncArrives) {
  VirtualClockEnv env(1);
  auto created = CreateAs(
      "a", env, Allow({"a", "b", "c"}),
      {{"a", "tcp://a:7000"}, {"b", "tcp://b:7000"}, {"c", "tcp://c:7000"}, {"x", "tcp://x:1"}});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Membership& m = **created;
  EXPECT_FALSE(m.joined());
  EXPECT_EQ(m.NextTimerAt(), 0.0);
  EXPECT_EQ(m.LiveIds(), Ids({"a"}));
  // A seed is reachable before it is a member: its endpoint with the allowlisted key.
  ASSERT_TRUE(m.AddressOf("b").has_value());
  EXPECT_EQ(m.AddressOf("b")->endpoint, "tcp://b:7000");
  EXPECT_EQ(m.AddressOf("b")->curve_public, Ident("b").curve_public);
  EXPECT_FALSE(m.AddressOf("x").has_value());  // not allowlisted: ignored

  m.OnTimer();
  auto joins = OfKind(m.TakeSends(), MembershipKind::kJoin);
  ASSERT_EQ(joins.size(), 2u);  // b and c; not self, not x
  EXPECT_EQ(joins[0].to, "b");
  EXPECT_EQ(joins[1].to, "c");
  ASSERT_EQ(joins[0].message.updates.size(), 1u);
  EXPECT_EQ(joins[0].message.updates[0], Rec("a"));

  env.AdvanceTo(0.5);
  m.OnTimer();
  EXPECT_TRUE(OfKind(m.TakeSends(), MembershipKind::kJoin).empty());
  env.AdvanceTo(1.0);  // join_retry_s later: again
  m.OnTimer();
  EXPECT_EQ(OfKind(m.TakeSends(), MembershipKind::kJoin).size(), 2u);

  ASSERT_TRUE(m.OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), Rec("c"), Rec("a")})).ok());
  EXPECT_TRUE(m.joined());
  EXPECT_EQ(m.LiveIds(), Ids({"a", "b", "c"}));
  EXPECT_TRUE(m.TakeSends().empty());  // an answer Sync (probe_id 0) is never answered
  for (double t = 2.0; t <= 5.0; t += 1.0) {
    env.AdvanceTo(t);
    m.OnTimer();
    EXPECT_TRUE(OfKind(m.TakeSends(), MembershipKind::kJoin).empty()) << t;
  }
}

TEST(MembershipTest, JoinIsAnsweredWithTheWholeView) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c", 2, MemberState::kSuspect)});
  const uint64_t version = h.m().view_version();
  ASSERT_TRUE(h.m().OnMessage("d", Msg(MembershipKind::kJoin, {Rec("d", 1)})).ok());
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b", "c", "d"}));
  EXPECT_EQ(h.m().view_version(), version + 1);
  auto sends = h.m().TakeSends();
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].to, "d");
  EXPECT_EQ(sends[0].message.kind, MembershipKind::kSync);
  EXPECT_EQ(sends[0].message.probe_id, 0u);
  std::vector<MemberUpdate> expected = {Rec("a"), Rec("b"), Rec("c", 2, MemberState::kSuspect),
                                        Rec("d", 1)};
  EXPECT_EQ(sends[0].message.updates, expected);
  EXPECT_EQ(h.m().AddressOf("d")->endpoint, "tcp://d:7000");
}

TEST(MembershipTest, JoinNotDescribingItsSenderIsInvalid) {
  Harness h;
  auto s = h.m().OnMessage("d", Msg(MembershipKind::kJoin, {Rec("c")}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(h.m().LiveIds(), Ids({"a"}));  // nothing applied
  EXPECT_FALSE(h.m().joined());
  s = h.m().OnMessage("b", Msg(MembershipKind::kPingReq, {Rec("b")}, 1, "b"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

// ---- Allowlist ---------------------------------------------------------------------------

TEST(MembershipTest, SenderOutsideTheAllowlistIsRefused) {
  Harness h;
  auto s = h.m().OnMessage("mallory", Msg(MembershipKind::kJoin, {Rec("mallory")}));
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_EQ(h.m().refused_count(), 1u);
  EXPECT_TRUE(h.m().TakeSends().empty());
  EXPECT_FALSE(h.m().joined());
  EXPECT_EQ(h.m().LiveIds(), Ids({"a"}));
  s = h.m().OnMessage("mallory", Msg(MembershipKind::kPing, {}, 3));
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(h.m().refused_count(), 2u);
}

TEST(MembershipTest, UpdatesWithWrongKeysOrUnknownIdsAreIgnoredAndCounted) {
  Harness h;
  // c with someone else's keys, and zed, who is not enrolled at all.
  ASSERT_TRUE(
      h.m()
          .OnMessage("b", Msg(MembershipKind::kSync,
                              {Rec("b"), Rec("c", 0, MemberState::kAlive, /*salt=*/9), Rec("zed")}))
          .ok());
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b"}));
  EXPECT_FALSE(h.m().Find("c").has_value());
  EXPECT_FALSE(h.m().Find("zed").has_value());
  EXPECT_EQ(h.m().refused_count(), 2u);
  // A wrong-keyed record can neither kill a member nor describe the sender.
  ASSERT_TRUE(h.m()
                  .OnMessage("d", Msg(MembershipKind::kPing,
                                      {Rec("d", 0, MemberState::kAlive, 9),
                                       Rec("b", 5, MemberState::kDead, 9)},
                                      4))
                  .ok());
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b"}));
  EXPECT_EQ(h.m().refused_count(), 4u);
}

TEST(MembershipTest, SetAllowlistRemovesMembersNoLongerListed) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c"), Rec("d")});
  const uint64_t version = h.m().view_version();
  auto list = Allow({"a", "b", "d"});
  list.push_back(Ident("d", 1));  // listed twice: the first entry counts
  h.m().SetAllowlist(list);
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b", "d"}));
  EXPECT_EQ(h.m().view_version(), version + 1);
  EXPECT_FALSE(h.m().AddressOf("c").has_value());
  h.m().SetAllowlist(Allow({"a", "b", "c"}));  // d re-keyed away, c back but unknown
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b"}));
}

// ---- Probing -----------------------------------------------------------------------------

TEST(MembershipTest, PingIsAckedAndPingReqIsRelayed) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c")});
  ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kPing, {Rec("b")}, 41)).ok());
  auto sends = h.m().TakeSends();
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].to, "b");
  EXPECT_EQ(sends[0].message.kind, MembershipKind::kAck);
  EXPECT_EQ(sends[0].message.probe_id, 41u);
  EXPECT_EQ(sends[0].message.target, "a");
  EXPECT_EQ(sends[0].message.updates[0], Rec("a"));

  ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kPingReq, {Rec("b")}, 42, "c")).ok());
  sends = h.m().TakeSends();
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].to, "c");
  EXPECT_EQ(sends[0].message.kind, MembershipKind::kPing);
  const uint64_t own_probe = sends[0].message.probe_id;
  ASSERT_TRUE(h.m().OnMessage("c", Msg(MembershipKind::kAck, {Rec("c")}, own_probe, "c")).ok());
  sends = h.m().TakeSends();
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].to, "b");
  EXPECT_EQ(sends[0].message.kind, MembershipKind::kAck);
  EXPECT_EQ(sends[0].message.probe_id, 42u);
  EXPECT_EQ(sends[0].message.target, "c");

  // A stale Ack (that relay is done) is ignored without error.
  EXPECT_TRUE(h.m().OnMessage("c", Msg(MembershipKind::kAck, {Rec("c")}, own_probe, "c")).ok());
  EXPECT_TRUE(h.m().TakeSends().empty());
}

TEST(MembershipTest, MissedAcksMakeSuspectThenDeadAfterTheSuspicionTimeout) {
  MembershipOptions o;  // T = 1, probe timeout 0.25, suspicion 3
  Harness h(o);
  h.JoinWith({Rec("b"), Rec("c"), Rec("d")});
  h.alive = {"b", "d"};  // c crashed
  h.RunUntil(10.0);
  const auto* ping = h.First(MembershipKind::kPing, "c");
  ASSERT_NE(ping, nullptr);
  const double t0 = ping->at;
  ASSERT_LT(t0, 10.0 - o.probe_interval_s);

  // Replay from scratch to look at the state at the edges of each timeout.
  Harness g(o);
  g.JoinWith({Rec("b"), Rec("c"), Rec("d")});
  g.alive = {"b", "d"};
  g.RunUntil(t0 + o.probe_timeout_s - 1e-6);
  EXPECT_EQ(g.First(MembershipKind::kPingReq), nullptr);
  g.RunUntil(t0 + o.probe_timeout_s);
  const auto* req = g.First(MembershipKind::kPingReq);
  ASSERT_NE(req, nullptr);  // to the other live members (2 < indirect_probes)
  EXPECT_EQ(req->send.message.target, "c");
  EXPECT_EQ(req->at, t0 + o.probe_timeout_s);
  g.RunUntil(t0 + o.probe_interval_s - 1e-6);
  EXPECT_EQ(g.m().Find("c")->state, MemberState::kAlive);
  g.RunUntil(t0 + o.probe_interval_s);
  EXPECT_EQ(g.m().Find("c")->state, MemberState::kSuspect);
  EXPECT_EQ(g.m().LiveIds(), Ids({"a", "b", "c", "d"}));  // suspects stay in the view
  const uint64_t version = g.m().view_version();

  // The suspicion travels on the next probe, sent in the same instant.
  const auto& next = g.log().back();
  EXPECT_EQ(next.at, t0 + o.probe_interval_s);
  EXPECT_EQ(next.send.message.kind, MembershipKind::kPing);
  EXPECT_NE(std::find(next.send.message.updates.begin(), next.send.message.updates.end(),
                      Rec("c", 0, MemberState::kSuspect)),
            next.send.message.updates.end());

  const double dead_at = t0 + o.probe_interval_s + o.suspicion_timeout_s;
  g.RunUntil(dead_at - 1e-6);
  EXPECT_EQ(g.m().Find("c")->state, MemberState::kSuspect);
  g.RunUntil(dead_at);
  EXPECT_EQ(g.m().Find("c")->state, MemberState::kDead);
  EXPECT_EQ(g.m().LiveIds(), Ids({"a", "b", "d"}));
  EXPECT_EQ(g.m().view_version(), version + 1);
  // The tombstone goes after dead_retention_s; until then it is still addressable.
  EXPECT_TRUE(g.m().AddressOf("c").has_value());
  g.RunUntil(dead_at + o.dead_retention_s);
  EXPECT_FALSE(g.m().Find("c").has_value());
}

TEST(MembershipTest, AnIndirectAckPreventsSuspicion) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c")});
  h.alive = {"b"};
  h.relay_only = {"c"};  // a's link to c is down, b's is not
  h.RunUntil(20.0);
  ASSERT_NE(h.First(MembershipKind::kPingReq), nullptr);
  EXPECT_EQ(h.m().Find("c")->state, MemberState::kAlive);
  h.relay_only.clear();  // now c is really gone
  h.RunUntil(40.0);
  EXPECT_EQ(h.m().Find("c")->state, MemberState::kDead);
  EXPECT_EQ(h.m().Find("b")->state, MemberState::kAlive);
}

// ---- Refutation and precedence -----------------------------------------------------------

TEST(MembershipTest, SuspicionOrDeathOfSelfIsRefutedWithAHigherIncarnation) {
  Harness h;
  h.JoinWith({Rec("b")});
  EXPECT_EQ(h.m().incarnation(), 0u);
  ASSERT_TRUE(h.m()
                  .OnMessage("b", Msg(MembershipKind::kPing,
                                      {Rec("b"), Rec("a", 0, MemberState::kSuspect)}, 1))
                  .ok());
  EXPECT_EQ(h.m().incarnation(), 1u);
  auto sends = h.m().TakeSends();
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].message.updates[0], Rec("a", 1));  // the refutation rides every message

  // An old accusation does not raise it again; alive at our incarnation is no news.
  ASSERT_TRUE(
      h.m()
          .OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), Rec("a", 0, MemberState::kDead),
                                                      Rec("a", 1, MemberState::kAlive)}))
          .ok());
  EXPECT_EQ(h.m().incarnation(), 1u);
  // A death notice at a later incarnation (of a previous run): outbid it.
  ASSERT_TRUE(
      h.m()
          .OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), Rec("a", 5, MemberState::kDead)}))
          .ok());
  EXPECT_EQ(h.m().incarnation(), 6u);
  EXPECT_EQ(h.m().Snapshot()[0], Rec("a", 6));
}

TEST(MembershipTest, PrecedenceHigherIncarnationThenDeadOverSuspectOverAlive) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c", 1)});
  auto from_b = [&](MemberUpdate u) {
    ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), u})).ok());
    h.m().TakeSends();
  };
  auto c = [&] { return *h.m().Find("c"); };

  from_b(Rec("c", 0, MemberState::kSuspect));  // older incarnation: ignored
  EXPECT_EQ(c(), Rec("c", 1, MemberState::kAlive));
  from_b(Rec("c", 1, MemberState::kSuspect));  // same incarnation, suspect > alive
  EXPECT_EQ(c(), Rec("c", 1, MemberState::kSuspect));
  from_b(Rec("c", 1, MemberState::kAlive));  // alive cannot lift it at the same incarnation
  EXPECT_EQ(c(), Rec("c", 1, MemberState::kSuspect));
  from_b(Rec("c", 2, MemberState::kAlive));  // the refutation
  EXPECT_EQ(c(), Rec("c", 2, MemberState::kAlive));
  const uint64_t version = h.m().view_version();
  from_b(Rec("c", 2, MemberState::kDead));
  EXPECT_EQ(c(), Rec("c", 2, MemberState::kDead));
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b"}));
  EXPECT_EQ(h.m().view_version(), version + 1);
  from_b(Rec("c", 2, MemberState::kSuspect));  // dead > suspect
  from_b(Rec("c", 1, MemberState::kAlive));    // the tombstone blocks stale alive
  from_b(Rec("c", 2, MemberState::kAlive));
  EXPECT_EQ(c(), Rec("c", 2, MemberState::kDead));
  from_b(Rec("c", 3, MemberState::kSuspect));  // a higher incarnation beats a tombstone
  EXPECT_EQ(c(), Rec("c", 3, MemberState::kSuspect));
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b", "c"}));
  EXPECT_EQ(h.m().view_version(), version + 2);
}

TEST(MembershipTest, ADirectMessageRevivesADeadMemberAndTellsItSo) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c", 3, MemberState::kDead)});
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b"}));
  // c restarted at incarnation 0 and joins through us.
  ASSERT_TRUE(h.m().OnMessage("c", Msg(MembershipKind::kJoin, {Rec("c", 0)})).ok());
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b", "c"}));
  EXPECT_EQ(h.m().Find("c")->state, MemberState::kAlive);
  auto sends = h.m().TakeSends();
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].message.kind, MembershipKind::kSync);
  // Its entry is the tombstone, so it refutes above incarnation 3.
  EXPECT_NE(std::find(sends[0].message.updates.begin(), sends[0].message.updates.end(),
                      Rec("c", 3, MemberState::kDead)),
            sends[0].message.updates.end());
  // Its refutation replaces the revived record.
  ASSERT_TRUE(h.m().OnMessage("c", Msg(MembershipKind::kPing, {Rec("c", 4)}, 9)).ok());
  EXPECT_EQ(*h.m().Find("c"), Rec("c", 4));
  sends = h.m().TakeSends();
  ASSERT_EQ(sends.size(), 1u);  // just the Ack: c is not dead here any more
  EXPECT_EQ(sends[0].message.kind, MembershipKind::kAck);
}

// ---- Self-signed records (issue 26 item 4) -----------------------------------------------

// `name`'s record with `endpoint` and `incarnation` but the signature of `signer` over it
// (anyone can compute the bytes; only `name`'s key makes them verify).
MemberUpdate SignedBy(const std::string& signer, const std::string& name, uint64_t incarnation,
                      const std::string& endpoint, MemberState state = MemberState::kAlive) {
  MemberUpdate u = Rec(name, incarnation, state);
  u.endpoint = endpoint;
  auto sig = Id(signer).Sign(MemberSigningBytes(kFed, u));
  EXPECT_TRUE(sig.ok());
  u.signature.assign(sig->begin(), sig->end());
  return u;
}

// The old code took any allowlisted member's word for a third party's incarnation: b
// pushed c at 2^64 - 2, and every view held it until c's refutations wrapped to 0.
TEST(MembershipTest, Issue26AThirdPartyCannotRaiseAnIncarnationToTheTop) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c")});
  const uint64_t refused = h.m().refused_count();
  const uint64_t version = h.m().view_version();
  auto from_b = [&](MemberUpdate u) {
    ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), u})).ok());
    h.m().TakeSends();
  };
  MemberUpdate stale = Rec("c");  // c's real signature, of incarnation 0
  stale.incarnation = kTop - 1;
  from_b(stale);
  from_b(SignedBy("b", "c", kTop - 1, "tcp://c:7000"));  // b's own signature
  from_b(SignedBy("b", "c", kTop - 1, "tcp://c:7000", MemberState::kDead));
  // Even c's own signature (a compromised key, a replayed record) cannot go past the cap.
  from_b(Rec("c", kMaxIncarnation + 1));
  from_b(Rec("c", kTop - 1, MemberState::kDead));
  EXPECT_EQ(*h.m().Find("c"), Rec("c"));
  EXPECT_EQ(h.m().refused_count(), refused + 5);
  EXPECT_EQ(h.m().view_version(), version);
  // Up to the cap, c's own word is taken.
  from_b(Rec("c", kMaxIncarnation));
  EXPECT_EQ(h.m().Find("c")->incarnation, kMaxIncarnation);
}

// The old code refuted any accusation with incarnation + 1: one at 2^64 - 1 wrapped it to
// 0, below every record the others held, so the node could never refute again.
TEST(MembershipTest, Issue26NoRefutationWrapsAround) {
  VirtualClockEnv env(1);
  auto m = CreateAs("a", env, Allow({"a", "b"}), {}, {}, /*incarnation=*/3).value();
  auto accuse = [&](MemberUpdate u) {
    ASSERT_TRUE(m->OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), u})).ok());
    m->TakeSends();
  };
  accuse(Rec("a", kTop, MemberState::kSuspect));  // signed by a, but above the cap
  accuse(SignedBy("b", "a", kTop, "tcp://a:7000", MemberState::kSuspect));
  MemberUpdate unsigned_accusation = Rec("a", kTop - 1, MemberState::kDead);
  unsigned_accusation.signature.clear();
  accuse(unsigned_accusation);
  EXPECT_EQ(m->incarnation(), 3u);
  // Its own records up to the cap are refuted, and the refutation is signed.
  accuse(Rec("a", kMaxIncarnation - 1, MemberState::kSuspect));
  EXPECT_EQ(m->incarnation(), kMaxIncarnation);
  EXPECT_EQ(*m->Find("a"), Rec("a", kMaxIncarnation));
  accuse(Rec("a", kMaxIncarnation, MemberState::kDead));  // no higher record to sign
  EXPECT_EQ(m->incarnation(), kMaxIncarnation);
}

// The old code took a rewritten endpoint from any member at a higher incarnation (and the
// sender's own at any): b could point everyone's traffic for c at itself.
TEST(MembershipTest, Issue26AnEndpointIsTakenOnlyFromItsMembersSignature) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c")});
  const uint64_t refused = h.m().refused_count();
  auto from = [&](const std::string& sender, MemberUpdate u) {
    std::vector<MemberUpdate> updates = {Rec(sender)};
    if (u.id == sender) updates.clear();
    updates.push_back(u);
    ASSERT_TRUE(h.m().OnMessage(sender, Msg(MembershipKind::kPing, updates, 9)).ok());
    h.m().TakeSends();
  };
  MemberUpdate moved = Rec("c", 1);
  moved.endpoint = "tcp://b:6666";  // c's signature of incarnation 1 at its real endpoint
  from("b", moved);
  from("b", SignedBy("b", "c", 1, "tcp://b:6666"));
  from("b", SignedBy("b", "c", 0, "tcp://b:6666"));  // no news from a third party: ignored
  EXPECT_EQ(h.m().AddressOf("c")->endpoint, "tcp://c:7000");
  EXPECT_EQ(*h.m().Find("c"), Rec("c"));
  EXPECT_EQ(h.m().refused_count(), refused + 2);
  // c's own word, relayed by b, is taken: c moved.
  from("b", Signed("c", 1, MemberState::kAlive, "tcp://c:7100"));
  EXPECT_EQ(h.m().AddressOf("c")->endpoint, "tcp://c:7100");
  // First-hand from c at the incarnation held: taken when c signed it, not otherwise.
  MemberUpdate first_hand = Signed("c", 1, MemberState::kAlive, "tcp://c:7200");
  from("c", first_hand);
  EXPECT_EQ(h.m().AddressOf("c")->endpoint, "tcp://c:7200");
  first_hand.endpoint = "tcp://b:6666";
  from("c", first_hand);
  EXPECT_EQ(h.m().AddressOf("c")->endpoint, "tcp://c:7200");
  EXPECT_EQ(h.m().refused_count(), refused + 3);
}

// The old code had no signatures at all: any allowlisted member could introduce any other
// with any endpoint.
TEST(MembershipTest, Issue26UnsignedAndMisdirectedRecordsAreRefused) {
  Harness h;
  h.JoinWith({Rec("b")});
  const uint64_t refused = h.m().refused_count();
  MemberUpdate bare = Rec("d");
  bare.signature.clear();
  MemberUpdate truncated = Rec("c");
  truncated.signature.resize(63);
  MemberUpdate other_federation = Rec("c");
  other_federation.signature.clear();
  ASSERT_TRUE(SignMember(Id("c"), "another-fed", &other_federation).ok());
  ASSERT_TRUE(
      h.m()
          .OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), bare, truncated, other_federation}))
          .ok());
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b"}));
  EXPECT_EQ(h.m().refused_count(), refused + 3);
  // A sender's own record unsigned: not admitted either, though the rest of its message is.
  MemberUpdate d_bare = Rec("d");
  d_bare.signature.clear();
  ASSERT_TRUE(h.m().OnMessage("d", Msg(MembershipKind::kPing, {d_bare, Rec("c")}, 5)).ok());
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b", "c"}));
  EXPECT_EQ(h.m().refused_count(), refused + 4);
  EXPECT_FALSE(SignMember(Id("b"), kFed, &bare).ok());  // b cannot sign d's record
}

// The state is the one field anyone may change, and only on a record its member signed.
TEST(MembershipTest, Issue26SuspicionAndDeathRideOnTheMembersOwnRecord) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c", 2)});
  const uint64_t refused = h.m().refused_count();
  auto from_b = [&](MemberUpdate u) {
    ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), u})).ok());
    h.m().TakeSends();
  };
  from_b(SignedBy("b", "c", 3, "tcp://c:7000", MemberState::kDead));  // past what c signed
  EXPECT_EQ(*h.m().Find("c"), Rec("c", 2));
  EXPECT_EQ(h.m().refused_count(), refused + 1);
  from_b(Rec("c", 2, MemberState::kSuspect));  // c's record, marked suspect by b
  EXPECT_EQ(*h.m().Find("c"), Rec("c", 2, MemberState::kSuspect));
  from_b(Rec("c", 2, MemberState::kDead));
  EXPECT_EQ(h.m().LiveIds(), Ids({"a", "b"}));
  EXPECT_EQ(h.m().refused_count(), refused + 1);
}

// ---- Dissemination and anti-entropy ------------------------------------------------------

TEST(MembershipTest, AnUpdateIsPiggybackedRetransmitMultTimesLogN) {
  MembershipOptions o;
  o.retransmit_mult = 2;
  Harness h(o);
  h.JoinWith({Rec("b"), Rec("c")});
  // d arrives second-hand; the view becomes 4 live members: 2 * ceil(log2(5)) = 6 sends.
  ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kPing, {Rec("b"), Rec("d", 7)}, 1)).ok());
  int carried = 0;
  for (int i = 0; i < 20; ++i) {
    if (i > 0) {
      ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kPing, {Rec("b")}, 2 + i)).ok());
    }
    for (const auto& s : h.m().TakeSends()) {
      const auto& u = s.message.updates;
      carried += static_cast<int>(std::count(u.begin(), u.end(), Rec("d", 7)));
    }
  }
  EXPECT_EQ(carried, 6);
}

TEST(MembershipTest, PiggybackIsCappedAndLeastSentFirst) {
  MembershipOptions o;
  o.max_piggyback = 2;
  Harness h(o, Allow({"a", "b", "c", "d", "e", "f"}));
  h.JoinWith({Rec("b")});
  ASSERT_TRUE(
      h.m().OnMessage("b", Msg(MembershipKind::kPing, {Rec("b"), Rec("c"), Rec("d")}, 1)).ok());
  auto first = h.m().TakeSends();
  ASSERT_EQ(first[0].message.updates.size(), 3u);  // self + 2
  ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kPing, {Rec("b"), Rec("e")}, 2)).ok());
  auto second = h.m().TakeSends();
  ASSERT_EQ(second[0].message.updates.size(), 3u);
  EXPECT_EQ(second[0].message.updates[1], Rec("e"));  // never sent beats sent once
}

TEST(MembershipTest, SyncRequestIsAnsweredOnlyWithNews) {
  Harness h;
  h.JoinWith({Rec("b"), Rec("c")});
  // b lacks c: answer (probe_id 0).
  ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), Rec("a")}, 77)).ok());
  auto sends = h.m().TakeSends();
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].message.kind, MembershipKind::kSync);
  EXPECT_EQ(sends[0].message.probe_id, 0u);
  EXPECT_EQ(sends[0].message.updates.size(), 3u);
  // Same knowledge: no answer. An answer is never answered.
  ASSERT_TRUE(
      h.m().OnMessage("b", Msg(MembershipKind::kSync, {Rec("b"), Rec("a"), Rec("c")}, 78)).ok());
  EXPECT_TRUE(h.m().TakeSends().empty());
  ASSERT_TRUE(h.m().OnMessage("b", Msg(MembershipKind::kSync, {Rec("b")}, 0)).ok());
  EXPECT_TRUE(h.m().TakeSends().empty());
}

TEST(MembershipTest, PeriodicSyncGoesToALiveMemberWithARequestId) {
  Harness h;
  h.JoinWith({Rec("b")});
  h.RunUntil(MembershipOptions{}.sync_interval_s);
  const auto* sync = h.First(MembershipKind::kSync);
  ASSERT_NE(sync, nullptr);
  EXPECT_EQ(sync->send.to, "b");
  EXPECT_NE(sync->send.message.probe_id, 0u);
  EXPECT_GE(sync->at, 0.5 * MembershipOptions{}.sync_interval_s);
}

// ---- Options and construction ------------------------------------------------------------

TEST(MembershipTest, ValidateNamesTheOffendingField) {
  EXPECT_TRUE(Validate(MembershipOptions{}).ok());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* field;
    void (*spoil)(MembershipOptions&, double);
    double value;
  };
  const Case cases[] = {
      {"probe_interval_s", [](MembershipOptions& o, double v) { o.probe_interval_s = v; }, 0},
      {"probe_interval_s", [](MembershipOptions& o, double v) { o.probe_interval_s = v; }, inf},
      {"probe_timeout_s", [](MembershipOptions& o, double v) { o.probe_timeout_s = v; }, -1},
      {"probe_timeout_s", [](MembershipOptions& o, double v) { o.probe_timeout_s = v; }, 1.0},
      {"indirect_probes", [](MembershipOptions& o, double) { o.indirect_probes = 0; }, 0},
      {"suspicion_timeout_s", [](MembershipOptions& o, double v) { o.suspicion_timeout_s = v; },
       nan},
      {"retransmit_mult", [](MembershipOptions& o, double) { o.retransmit_mult = 0; }, 0},
      {"max_piggyback", [](MembershipOptions& o, double) { o.max_piggyback = 0; }, 0},
      {"max_piggyback", [](MembershipOptions& o, double) { o.max_piggyback = 4096; }, 0},
      {"sync_interval_s", [](MembershipOptions& o, double v) { o.sync_interval_s = v; }, 0},
      {"join_retry_s", [](MembershipOptions& o, double v) { o.join_retry_s = v; }, -inf},
      {"dead_retention_s", [](MembershipOptions& o, double v) { o.dead_retention_s = v; }, 0},
  };
  for (const Case& c : cases) {
    MembershipOptions o;
    c.spoil(o, c.value);
    Status s = Validate(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.ToString();
  }
}

TEST(MembershipTest, CreateRefusesBadOptionsAndSelfOutsideTheAllowlist) {
  VirtualClockEnv env(1);
  MembershipOptions bad;
  bad.probe_timeout_s = 2.0;
  auto r = CreateAs("a", env, Allow({"a"}), {}, bad);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("probe_timeout_s"), std::string::npos);
  r = CreateAs("a", env, Allow({"b"}));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  r = CreateAs("a", env, Allow({"a"}), {}, {}, 0, /*salt=*/1);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);  // self with other keys
  r = CreateAs("a", env, Allow({"a", "b", "b"}));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  r = Membership::Create({}, Id("a"), "", "tcp://a:7000", 0, Allow({"a"}), {}, env);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);  // no federation to sign for
  r = Membership::Create({}, Id("a"), kFed, "", 0, Allow({"a"}), {}, env);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);  // no endpoint
  r = CreateAs("a", env, Allow({"a"}), {}, {}, kMaxIncarnation + 1);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);  // a damaged checkpoint
  r = CreateAs("a", env, Allow({"a"}), {}, {}, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->incarnation(), 4u);  // restored by the driver from its checkpoint
  EXPECT_EQ(*(*r)->Find("a"), Rec("a", 4));  // signed by itself
}

// ---- Checkpoint --------------------------------------------------------------------------

TEST(MembershipTest, SnapshotRestoreRoundTrip) {
  Harness h;
  h.JoinWith({Rec("b", 2), Rec("c", 1, MemberState::kSuspect), Rec("d", 4, MemberState::kDead)});
  const std::vector<MemberUpdate> snapshot = h.m().Snapshot();
  const std::vector<MemberUpdate> expected = {
      Rec("a"), Rec("b", 2), Rec("c", 1, MemberState::kSuspect), Rec("d", 4, MemberState::kDead)};
  EXPECT_EQ(snapshot, expected);

  Harness restored;
  const uint64_t version = restored.m().view_version();
  auto with_stranger = snapshot;
  with_stranger.push_back(Rec("zed"));
  restored.m().Restore(with_stranger);
  // A checkpoint from before records were signed: its members are skipped.
  MemberUpdate unsigned_d = Rec("d", 4);
  unsigned_d.signature.clear();
  restored.m().Restore({unsigned_d});
  EXPECT_EQ(restored.m().LiveIds(), Ids({"a", "b", "c"}));
  EXPECT_EQ(*restored.m().Find("b"), Rec("b", 2));
  EXPECT_EQ(*restored.m().Find("c"), Rec("c", 1));  // restored members enter as alive
  EXPECT_FALSE(restored.m().Find("d").has_value());
  EXPECT_EQ(restored.m().view_version(), version + 1);
  EXPECT_FALSE(restored.m().joined());
  EXPECT_EQ(restored.m().Snapshot(),
            (std::vector<MemberUpdate>{Rec("a"), Rec("b", 2), Rec("c", 1)}));
  // ...and are probed normally.
  restored.alive = {"b"};
  restored.RunUntil(10.0);
  ASSERT_NE(restored.First(MembershipKind::kPing, "c"), nullptr);
  EXPECT_EQ(restored.m().LiveIds(), Ids({"a", "b"}));
}

}  // namespace
}  // namespace fedmesh
