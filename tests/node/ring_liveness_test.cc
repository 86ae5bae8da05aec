// SWIM failure detection for all-reduce groups (node/ring_liveness.h), members on threads
// over in-process hubs (one for the ring, one for SWIM):
//  - a member that stops is declared dead by the others within seconds, the living are not,
//    and a restarted member is alive again; junk from an enrolled member is dropped;
//  - an elastic ring with the detector goes on without a dead member long before its
//    operation timeout (30 s here) would have noticed it: the survivors re-form and finish
//    with identical models.
#include "node/ring_liveness.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "collective/elastic_steps.h"
#include "collective/in_process_hub.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<Identity> Identities(int n) {
  std::vector<Identity> out;
  for (int i = 0; i < n; ++i) out.push_back(std::move(Identity::Generate("site-" + std::to_string(i))).value());
  return out;
}

std::vector<PublicIdentity> Publics(const std::vector<Identity>& ids) {
  std::vector<PublicIdentity> out;
  for (const Identity& i : ids) out.push_back(i.public_identity());
  return out;
}

RingLivenessOptions Fast() {
  RingLivenessOptions o;
  o.group_id = "ring-test";
  // Short enough for a quick test, long enough that a loaded 2-core machine does not make
  // the living look dead.
  o.swim.probe_interval_s = 0.2;
  o.swim.probe_timeout_s = 0.1;
  o.swim.suspicion_timeout_s = 1.0;
  o.swim.sync_interval_s = 0.5;
  o.swim.join_retry_s = 0.1;
  return o;
}

// Waits up to `seconds` for `cond`; whether it came true.
template <typename Cond>
bool Eventually(double seconds, Cond cond) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

TEST(RingLiveness, DeclaresAStoppedMemberDeadTheLivingNotAndARestartAlive) {
  const int n = 3;
  const std::vector<Identity> ids = Identities(n);
  collective::InProcessHub hub(n);
  std::vector<std::unique_ptr<RingLiveness>> l(n);
  for (int r = 0; r < n; ++r) {
    auto s = RingLiveness::Start(Fast(), ids[r], Publics(ids), r, hub.endpoint(r));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    l[r] = std::move(*s);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // many probe rounds, all answered
  for (int r = 0; r < n; ++r)
    for (int m = 0; m < n; ++m) EXPECT_FALSE(l[r]->Dead(m)) << r << " thinks " << m << " is dead";
  const auto stopped = Clock::now();
  l[2].reset();  // member 2 stops: no more answers
  hub.Disconnect(2);
  EXPECT_TRUE(Eventually(10, [&] { return l[0]->Dead(2) && l[1]->Dead(2); }));
  const double took = std::chrono::duration<double>(Clock::now() - stopped).count();
  std::printf("member 2 declared dead by both others %.2f s after it stopped\n", took);
  EXPECT_FALSE(l[0]->Dead(1));
  EXPECT_FALSE(l[1]->Dead(0));
  EXPECT_EQ(l[0]->deaths(), 1u);
  // Restarted: a new process, a new incarnation; the others hear from it and revive it.
  hub.Reconnect(2);
  auto again = RingLiveness::Start(Fast(), ids[2], Publics(ids), 2, hub.endpoint(2));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(Eventually(10, [&] { return !l[0]->Dead(2) && !l[1]->Dead(2); }));
  EXPECT_FALSE((*again)->Dead(0));
}

// An enrolled member (3) that runs no detector but sends junk on the SWIM transport: empty,
// random bytes, a truncated frame, another operation's chunk, a well-formed Ping that claims
// another sender. All dropped: the three detectors keep answering and keep each other alive
// (member 3, never heard from properly, never enters their view).
TEST(RingLiveness, JunkFromAnEnrolledMemberIsDropped) {
  const int n = 4;
  const std::vector<Identity> ids = Identities(n);
  collective::InProcessHub hub(n);
  std::vector<std::unique_ptr<RingLiveness>> l(3);
  for (int r = 0; r < 3; ++r) l[r] = std::move(RingLiveness::Start(Fast(), ids[r], Publics(ids), r, hub.endpoint(r))).value();
  wire::Message spoof;
  spoof.header.federation_id = "ring-test";
  spoof.header.sender_id = "site-1";  // sent by site-3
  wire::Membership ping;
  ping.kind = wire::MembershipKind::kPing;
  ping.probe_id = 7;
  spoof.body = ping;
  const wire::Frame frame = std::move(wire::Encode(spoof)).value().front();
  const std::string whole(frame.begin(), frame.end());
  const std::vector<std::pair<uint32_t, std::string>> junk = {
      {0x5317D00Du, ""}, {0x5317D00Du, std::string(64, '\x7f')}, {0x5317D00Du, whole.substr(0, whole.size() / 2)},
      {0x5317D00Du, whole}, {0x12345678u, whole}};
  const auto until = Clock::now() + std::chrono::milliseconds(2500);
  int sent = 0;
  while (Clock::now() < until) {
    for (const auto& [op, bytes] : junk) {
      for (int to = 0; to < 3; ++to) {
        collective::Chunk c;
        c.kind = collective::OpKind::kMessage;
        c.op = op;
        c.bytes = collective::Payload(bytes);
        if (hub.endpoint(3)->Send(to, std::move(c)).ok()) ++sent;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(sent, 500);
  for (int r = 0; r < 3; ++r)
    for (int m = 0; m < 3; ++m) EXPECT_FALSE(l[r]->Dead(m)) << r << " thinks " << m << " is dead";
}

TEST(RingLiveness, RefusesAGroupThatDoesNotListIt) {
  const std::vector<Identity> ids = Identities(2);
  collective::InProcessHub hub(2);
  EXPECT_EQ(RingLiveness::Start(Fast(), ids[0], Publics(ids), 1, hub.endpoint(0)).status().code(),
            StatusCode::kInvalidArgument);
  RingLivenessOptions o = Fast();
  o.group_id.clear();
  EXPECT_EQ(RingLiveness::Start(o, ids[0], Publics(ids), 0, hub.endpoint(0)).status().code(),
            StatusCode::kInvalidArgument);
  o = Fast();
  o.swim.probe_timeout_s = 1.0;  // not below the probe interval
  EXPECT_EQ(RingLiveness::Start(o, ids[0], Publics(ids), 0, hub.endpoint(0)).status().code(),
            StatusCode::kInvalidArgument);
}

// Four members average a toy gradient each step; member 2 stops after step 10. The ring's
// operation timeout is 30 s: without the detector the survivors would sit that long in the
// average of step 11. With it they re-form within about a second and finish.
TEST(RingLiveness, AnElasticRingGoesOnWithoutADeadMemberLongBeforeItsTimeout) {
  const int n = 4;
  const uint64_t steps = 30;
  const std::vector<Identity> ids = Identities(n);
  collective::InProcessHub ring_hub(n), swim_hub(n);
  std::vector<std::unique_ptr<RingLiveness>> l(n);
  for (int r = 0; r < n; ++r) l[r] = std::move(RingLiveness::Start(Fast(), ids[r], Publics(ids), r, swim_hub.endpoint(r))).value();
  std::vector<std::vector<float>> w(n, std::vector<float>(64, 1.0f));
  std::vector<Status> result(n);
  std::vector<uint64_t> reforms(n);
  std::vector<double> seconds(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collective::ElasticOptions o;
      o.comm.ring.chunk_bytes = 64;
      o.comm.timeout_ms = 30000;
      o.reform_window_ms = 20000;  // closes early: every member not declared dead answered
      o.start_window_ms = 10000;
      RingLiveness* mine = l[r].get();
      o.dead = [mine](int m) { return mine->Dead(m); };
      auto ring = collective::ElasticRing::Create(o, n, r, ring_hub.endpoint(r));
      ASSERT_TRUE(ring.ok());
      collective::ElasticHooks h;
      h.save = [&, r] { return w[r]; };
      h.restore = [&, r](std::span<const float> s) {
        w[r].assign(s.begin(), s.end());
        return Status::OK();
      };
      h.apply = [&, r](std::span<const float> avg) {
        for (size_t i = 0; i < w[r].size(); ++i) w[r][i] -= 0.1f * avg[i];
        return Status::OK();
      };
      collective::ElasticSteps e(ring->get(), std::move(h));
      const auto t0 = Clock::now();
      Status s = e.Start();
      while (s.ok() && e.steps_completed() < steps) {
        const uint64_t step = e.steps_completed() + 1;
        if (r == 2 && step == 11) {  // dies: its detector and its links go quiet
          l[2].reset();
          swim_hub.Disconnect(2);
          ring_hub.Disconnect(2);
          s = Status::Unavailable("died");
          break;
        }
        std::vector<float> g(w[r].size());
        for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.3f * r + 0.01f * step + 0.1f * i) + 0.5f * w[r][i];
        Status st = e.Step(std::span<float>(g));
        if (!st.ok() && !e.TakeResynced()) s = st;
        if (st.ok()) {
          for (size_t i = 0; i < g.size(); ++i) w[r][i] -= 0.1f * g[i];
        }
      }
      result[r] = s;
      reforms[r] = (*ring)->reforms();
      seconds[r] = std::chrono::duration<double>(Clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(result[r].ok()) << r << ": " << result[r].ToString();
    EXPECT_GE(reforms[r], 1u) << r;
    EXPECT_LT(seconds[r], 15.0) << r;  // the timeout alone would have taken 30 s (and the window 20)
    EXPECT_EQ(w[r], w[0]) << "member " << r << " differs";
  }
  std::printf("survivors finished %d steps in %.2f / %.2f / %.2f s (operation timeout 30 s)\n", static_cast<int>(steps),
              seconds[0], seconds[1], seconds[3]);
}

}  // namespace
}  // namespace fedmesh
