// Acceptance test of SWIM membership (gossip/membership.h): 32 nodes over the in-process
// network in virtual time (1 ms links), each node's state machine driven exactly as a
// real driver would (messages to OnMessage, OnTimer at NextTimerAt). Checks, against bounds
// derived from MembershipOptions: every node sees all 32 after joining through 3 seeds; a
// crashed node leaves every view; restarted with incarnation 0 it is back in every view;
// a node whose key is not enrolled never enters any view.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "crypto/identity.h"
#include "gossip/membership.h"
#include "sim/in_process_network.h"
#include "sim/virtual_clock_env.h"

namespace fedmesh {
namespace {

constexpr int kNodes = 32;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string NodeId(int i) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "n%02d", i);
  return buf;
}

// Real key pairs, one per name: every member record is signed by its member
// (gossip/signed_member.h).
const Identity& Keys(const std::string& name) {
  static auto* keys = new std::map<std::string, Identity>();
  auto it = keys->find(name);
  if (it == keys->end()) it = keys->emplace(name, Identity::Generate(name).value()).first;
  return it->second;
}

PublicIdentity MakeIdentity(const std::string& name) { return Keys(name).public_identity(); }

// ceil(log2(n)): rounds of infection-style dissemination to reach n members.
double Log2Ceil(int n) { return std::ceil(std::log2(static_cast<double>(n))); }

class MembershipSim : public ::testing::Test {
 protected:
  struct Node {
    PublicIdentity identity;
    std::unique_ptr<Membership> membership;
    bool running = false;
    double timer_at = kInf;  // the pending OnTimer event, if any
    uint64_t timer_gen = 0;  // stale timer events carry an older generation
  };

  MembershipSim() : env_(2024), net_(env_, LinkModel{0.001, 0, 0}, 99) {
    for (int i = 0; i < kNodes; ++i) {
      ids_.push_back(NodeId(i));
      allowlist_.push_back(MakeIdentity(ids_.back()));
    }
    for (int i = 0; i < 3; ++i) seeds_.push_back({ids_[i], "sim://" + ids_[i]});
    net_.SetHandler([this](const std::string& from, const std::string& to, wire::Message msg) {
      Deliver(from, to, msg);
    });
  }

  // Starts (or restarts, with incarnation 0) node `id` with identity `identity`, whose own
  // allowlist is `allowlist`.
  void Start(const PublicIdentity& identity, const std::vector<PublicIdentity>& allowlist) {
    auto m = Membership::Create(options_, Keys(identity.name), "fedmesh-sim",
                                "sim://" + identity.name, 0, allowlist, seeds_, env_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    Node& node = nodes_[identity.name];
    node.identity = identity;
    node.membership = std::move(*m);
    node.running = true;
    node.timer_at = kInf;
    net_.SetDown(identity.name, false);
    Pump(identity.name);
  }

  void StartAll() {
    for (const auto& p : allowlist_) Start(p, allowlist_);
  }

  void Crash(const std::string& id) {
    net_.SetDown(id, true);
    nodes_[id].running = false;  // its timers are no longer driven
  }

  // Runs the network in 10 ms steps until `done()` holds or `limit` seconds pass. Returns
  // the virtual time it first held, or infinity.
  double RunUntil(const std::function<bool()>& done, double limit) {
    const double end = env_.NowSeconds() + limit;
    while (env_.NowSeconds() < end) {
      net_.RunUntil(env_.NowSeconds() + 0.01);
      if (done()) return env_.NowSeconds();
    }
    return kInf;
  }

  std::vector<std::string> Running() const {
    std::vector<std::string> out;
    for (const auto& [id, n] : nodes_) {
      if (n.running) out.push_back(id);
    }
    return out;
  }

  bool InView(const std::string& viewer, const std::string& id) const {
    const auto live = nodes_.at(viewer).membership->LiveIds();
    return std::binary_search(live.begin(), live.end(), id);
  }

  // Every running node sees `count` live members.
  bool AllSee(size_t count) const {
    for (const auto& id : Running()) {
      if (nodes_.at(id).membership->LiveIds().size() != count) return false;
    }
    return true;
  }

  MembershipOptions options_;  // the defaults: T = 1 s, probe timeout 0.25 s, suspicion 3 s
  VirtualClockEnv env_;
  InProcessNetwork net_;
  std::vector<std::string> ids_;
  std::vector<PublicIdentity> allowlist_;
  std::vector<Seed> seeds_;
  std::map<std::string, Node> nodes_;
  std::map<StatusCode, uint64_t> errors_;  // OnMessage results other than OK
  uint64_t unaddressable_ = 0;             // sends AddressOf could not resolve
  uint64_t message_id_ = 0;

 private:
  void Deliver(const std::string& from, const std::string& to, const wire::Message& msg) {
    auto it = nodes_.find(to);
    if (it == nodes_.end() || !it->second.running) return;
    const auto* m = std::get_if<wire::Membership>(&msg.body);
    ASSERT_NE(m, nullptr);
    Status s = it->second.membership->OnMessage(from, *m);
    if (!s.ok()) ++errors_[s.code()];
    Pump(to);
  }

  // Ships what `id` produced and keeps one OnTimer event pending at its NextTimerAt.
  void Pump(const std::string& id) {
    Node& node = nodes_.at(id);
    for (auto& send : node.membership->TakeSends()) {
      if (!node.membership->AddressOf(send.to)) ++unaddressable_;
      wire::Message msg{wire::Header{"fedmesh-sim", id, 0, 0, ++message_id_},
                        std::move(send.message)};
      Status s = net_.Send(id, send.to, msg);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    const double t = node.membership->NextTimerAt();
    if (t >= node.timer_at) return;
    node.timer_at = t;
    const uint64_t gen = ++node.timer_gen;
    net_.ScheduleAt(t, [this, id, gen] { Fire(id, gen); });
  }

  void Fire(const std::string& id, uint64_t gen) {
    Node& node = nodes_.at(id);
    if (!node.running || gen != node.timer_gen) return;
    node.timer_at = kInf;
    node.membership->OnTimer();
    if (node.membership->NextTimerAt() <= env_.NowSeconds()) {
      ADD_FAILURE() << id << ": NextTimerAt does not advance past " << env_.NowSeconds();
      node.running = false;  // rather than spin forever
      return;
    }
    Pump(id);
  }
};

TEST_F(MembershipSim, ThirtyTwoNodesJoinDetectACrashAndReadmitTheRestartedNode) {
  const double T = options_.probe_interval_s;
  const double log_n = Log2Ceil(kNodes);  // 5
  StartAll();

  // Join: every Join reaches a seed and is answered within 2 ms; each seed then knows
  // everyone, and the joiners' "alive" spreads infection-style from the seeds, reaching all
  // n within O(log n) probe intervals (factor 2 of margin), with the periodic push-pull
  // Sync (every sync_interval_s) as the fallback.
  const double join_bound = options_.join_retry_s + options_.sync_interval_s + 2 * log_n * T;
  const double joined_at = RunUntil([&] { return AllSee(kNodes); }, join_bound);
  std::printf("[ membership ] all %d nodes see %d members after %.3f s (bound %.1f s)\n", kNodes,
              kNodes, joined_at, join_bound);
  ASSERT_LE(joined_at, join_bound);
  for (const auto& [id, n] : nodes_) EXPECT_TRUE(n.membership->joined()) << id;
  RunUntil([] { return false; }, 5.0);  // steady state: nobody leaves
  ASSERT_TRUE(AllSee(kNodes));

  // Crash a non-seed. Detection bound:
  //   4 T      some live node probes it: each interval each of the 31 others probes one
  //            member (round robin), so an interval passes without a probe of it with
  //            probability ~(1 - 1/31)^31 ~ 1/e; four in a row ~2%
  // + T        that probe's interval: Ping, probe_timeout_s, PingReqs, no Ack by its end
  // + suspicion_timeout_s
  // + 2 log2(n) T  "suspect" and then "dead" reach everyone by piggyback (and a node that
  //            only heard "suspect" declares it dead itself suspicion_timeout_s later).
  const std::string victim = ids_[17];
  const double crash_at = env_.NowSeconds();
  Crash(victim);
  const double detect_bound = 4 * T + T + options_.suspicion_timeout_s + 2 * log_n * T;
  const double gone_at = RunUntil(
      [&] {
        for (const auto& id : Running()) {
          if (InView(id, victim)) return false;
        }
        return true;
      },
      detect_bound + 1.0);
  const double detection = gone_at - crash_at;
  std::printf("[ membership ] crash of %s: gone from every view after %.3f s (bound %.1f s)\n",
              victim.c_str(), detection, detect_bound);
  ASSERT_LE(detection, detect_bound);
  // Never faster than a probe timeout plus the suspicion timeout: no shortcut to "dead".
  EXPECT_GE(detection, options_.probe_timeout_s + options_.suspicion_timeout_s);
  EXPECT_TRUE(AllSee(kNodes - 1));
  uint64_t tombstone_incarnation = 0;
  for (const auto& id : Running()) {
    auto rec = nodes_.at(id).membership->Find(victim);
    ASSERT_TRUE(rec.has_value()) << id;  // the tombstone
    EXPECT_EQ(rec->state, wire::MemberState::kDead) << id;
    tombstone_incarnation = rec->incarnation;
  }

  // Restart it: fresh state, incarnation 0, same seeds. Bound: its Join is answered within
  // 2 ms (it then holds all 32 and learns of its tombstone, which it outbids); its higher
  // incarnation spreads from its first probe (within T) by piggyback in O(log n) intervals
  // (factor 2 of margin), plus one join retry in case the first Join is lost.
  const double restart_at = env_.NowSeconds();
  Start(allowlist_[17], allowlist_);
  const double rejoin_bound = options_.join_retry_s + T + 2 * log_n * T;
  const double back_at = RunUntil(
      [&] {
        if (nodes_.at(victim).membership->LiveIds().size() != kNodes) return false;
        for (const auto& id : Running()) {
          if (!InView(id, victim)) return false;
        }
        return true;
      },
      rejoin_bound + 1.0);
  const double rejoin = back_at - restart_at;
  std::printf("[ membership ] restart of %s: back in every view after %.3f s (bound %.1f s)\n",
              victim.c_str(), rejoin, rejoin_bound);
  ASSERT_LE(rejoin, rejoin_bound);
  EXPECT_GT(nodes_.at(victim).membership->incarnation(), tombstone_incarnation);

  // It stays: no false suspicion anywhere. A falsely suspected node would have refuted,
  // raising its incarnation above 0.
  RunUntil([] { return false; }, 20.0);
  EXPECT_TRUE(AllSee(kNodes));
  for (const auto& [id, n] : nodes_) {
    if (id == victim) continue;
    EXPECT_EQ(n.membership->incarnation(), 0u) << id;
  }
  EXPECT_TRUE(errors_.empty()) << errors_.size() << " kinds of errors from OnMessage";
  EXPECT_EQ(unaddressable_, 0u);
  std::printf("[ membership ] %llu bytes sent in %.1f virtual seconds\n",
              static_cast<unsigned long long>(net_.total_bytes_sent()), env_.NowSeconds());
}

TEST_F(MembershipSim, ANodeWithAKeyOutsideTheAllowlistNeverEntersAnyView) {
  StartAll();
  // The intruder enrolls itself in its own allowlist; nobody else lists it.
  const PublicIdentity intruder = MakeIdentity("intruder");
  std::vector<PublicIdentity> its_list = allowlist_;
  its_list.push_back(intruder);
  Start(intruder, its_list);

  const double horizon = 20.0;
  RunUntil([] { return false; }, horizon);
  for (const auto& [id, n] : nodes_) {
    if (id == intruder.name) continue;
    EXPECT_FALSE(InView(id, intruder.name)) << id;
    EXPECT_EQ(n.membership->LiveIds().size(), static_cast<size_t>(kNodes)) << id;
  }
  EXPECT_FALSE(nodes_.at(intruder.name).membership->joined());
  EXPECT_EQ(nodes_.at(intruder.name).membership->LiveIds().size(), 1u);
  // It retried its Join every join_retry_s; each seed refused every one.
  const uint64_t joins_per_seed = static_cast<uint64_t>(horizon / options_.join_retry_s);
  uint64_t refused = 0;
  for (const auto& seed : seeds_) {
    const uint64_t r = nodes_.at(seed.id).membership->refused_count();
    EXPECT_GE(r, joins_per_seed) << seed.id;
    refused += r;
  }
  EXPECT_EQ(errors_[StatusCode::kPermissionDenied], refused);
  for (int i = 3; i < kNodes; ++i) EXPECT_EQ(nodes_.at(ids_[i]).membership->refused_count(), 0u);
}

}  // namespace
}  // namespace fedmesh
