// Elastic rings (collective/elastic_ring.h, elastic_steps.h), ranks on threads over the
// in-process hub, each training a toy model (state = parameters and a step counter, the
// step's input a gradient that depends on the member, the step and the parameters): a
// member that dies leaves the others training with bit-identical models from the next step
// on; killing it at every point of an average (some survivors finished the step, others not)
// rolls the ahead ones back, and all still agree; a restarted member joins a running ring
// with the ring's state; too few members fail the run with a clear error; malformed control
// messages from an enrolled member are dropped.
#include "collective/elastic_steps.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <mutex>
#include <thread>

#include "collective/in_process_hub.h"

namespace fedmesh::collective {
namespace {

using ::testing::HasSubstr;

constexpr size_t kParams = 257;
constexpr float kLr = 0.1f;

ElasticOptions FastOptions() {
  ElasticOptions o;
  o.comm.ring.chunk_bytes = 128;  // several chunks a segment: averages take many messages
  o.comm.timeout_ms = 400;
  o.reform_window_ms = 300;
  o.start_window_ms = 5000;
  return o;
}

// A member's toy training: w -= lr * average(g), g depending on the member, step and w.
struct Member {
  int id = 0;
  std::vector<float> w = std::vector<float>(kParams, 0.5f);
  std::vector<std::string> log;

  std::vector<float> Gradient(uint64_t step) const {
    std::vector<float> g(kParams);
    for (size_t i = 0; i < kParams; ++i) g[i] = std::sin(0.3f * id + 0.01f * step + 0.1f * i) + 0.5f * w[i];
    return g;
  }
  ElasticHooks Hooks() {
    ElasticHooks h;
    h.save = [this] { return w; };
    h.restore = [this](std::span<const float> s) {
      if (s.size() != kParams) return Status::InvalidArgument("state of " + std::to_string(s.size()));
      w.assign(s.begin(), s.end());
      return Status::OK();
    };
    h.apply = [this](std::span<const float> avg) {
      for (size_t i = 0; i < kParams; ++i) w[i] -= kLr * avg[i];
      return Status::OK();
    };
    h.log = [this](const std::string& line) { log.push_back(line); };
    return h;
  }
};

// Trains `steps` steps: gradient, Step (the elastic average), apply. `before_step(step)`
// returning false stops the member (it dies) before that step's gradient.
Status Train(Member& m, ElasticSteps& e, uint64_t steps, const std::function<bool(uint64_t)>& before_step = {}) {
  while (e.steps_completed() < steps) {
    const uint64_t step = e.steps_completed() + 1;
    if (before_step && !before_step(step)) return Status::Unavailable("died before step " + std::to_string(step));
    std::vector<float> g = m.Gradient(step);
    Status s = e.Step(std::span<float>(g));
    if (!s.ok()) {
      if (e.TakeResynced()) continue;  // took the ring's state: go on from there
      return s;
    }
    for (size_t i = 0; i < kParams; ++i) m.w[i] -= kLr * g[i];
  }
  return Status::OK();
}

// One member's life over `transport`: forms (or joins) the ring, then Train. `after` (may be
// empty) sees the ring and the steps at the end.
Status Live(Member& m, CollectiveTransport* transport, int n, uint64_t steps, const ElasticOptions& options,
            const std::function<bool(uint64_t)>& before_step,
            const std::function<void(ElasticRing&, ElasticSteps&)>& after = {}) {
  FM_ASSIGN_OR_RETURN(std::unique_ptr<ElasticRing> ring, ElasticRing::Create(options, n, m.id, transport));
  ElasticSteps e(ring.get(), m.Hooks());
  FM_RETURN_IF_ERROR(e.Start());
  const Status s = Train(m, e, steps, before_step);
  if (after) after(*ring, e);
  return s;
}

// A before_step for Live: member `victim` dies (is disconnected from the hub) before step
// `step`; everyone else trains on.
std::function<bool(uint64_t)> DiesAt(InProcessHub& hub, int member, int victim, uint64_t step) {
  return [&hub, member, victim, step](uint64_t s) {
    if (member == victim && s == step) {
      hub.Disconnect(victim);
      return false;
    }
    return true;
  };
}

// n members of one group over an in-process hub, each with its result, and a way to run
// one body per member on threads of their own (joined before it returns).
struct Group {
  explicit Group(int n) : hub(n), members(n), result(n) {
    for (int r = 0; r < n; ++r) members[r].id = r;
  }
  void OnThreads(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < static_cast<int>(members.size()); ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }
  InProcessHub hub;
  std::vector<Member> members;
  std::vector<Status> result;
};

// The training computed directly: at each step the gradients of the members `alive(step)`
// names are averaged and applied to everyone's model. Returns the model after `steps`.
std::vector<float> Reference(int n, uint64_t steps, const std::function<std::vector<int>(uint64_t)>& alive) {
  std::vector<Member> ref(n);
  for (int r = 0; r < n; ++r) ref[r].id = r;
  for (uint64_t s = 1; s <= steps; ++s) {
    const std::vector<int> now = alive(s);
    std::vector<double> avg(kParams, 0.0);
    for (int r : now) {
      const std::vector<float> g = ref[r].Gradient(s);
      for (size_t i = 0; i < kParams; ++i) avg[i] += g[i] / static_cast<double>(now.size());
    }
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < kParams; ++i) ref[r].w[i] -= kLr * static_cast<float>(avg[i]);
  }
  return ref[0].w;
}

// Kills (disconnects) member `victim` once it has sent `after` chunks of step `step`'s
// average: a death in the middle of an operation, at any point of it.
class KillingTransport final : public CollectiveTransport {
 public:
  KillingTransport(InProcessHub* hub, int me, std::function<bool()> should_die)
      : hub_(hub), me_(me), base_(hub->endpoint(me)), should_die_(std::move(should_die)) {}
  Status Send(int to, Chunk chunk) override {
    if (should_die_ && should_die_()) {
      hub_->Disconnect(me_);
      dead_ = true;
    }
    return base_->Send(to, std::move(chunk));
  }
  Result<std::optional<std::pair<int, Chunk>>> Receive(int timeout_ms) override {
    if (dead_) return Status::Unavailable("this member is dead");
    return base_->Receive(timeout_ms);
  }

 private:
  InProcessHub* hub_;
  int me_;
  CollectiveTransport* base_;
  std::function<bool()> should_die_;
  bool dead_ = false;
};

TEST(ElasticSteps, TheSurvivorsOfADeadMemberTrainOnWithIdenticalModels) {
  const int n = 4;
  const uint64_t steps = 30, dies_after = 10;
  Group g(n);
  auto& [hub, members, result] = g;
  std::vector<uint64_t> reforms(n);
  g.OnThreads([&](int r) {
    result[r] = Live(members[r], hub.endpoint(r), n, steps, FastOptions(), DiesAt(hub, r, 2, dies_after + 1),
                     [&, r](ElasticRing& ring, ElasticSteps&) {
                       reforms[r] = ring.reforms();
                       if (r != 2) {
                         EXPECT_EQ(ring.view(), (std::vector<int>{0, 1, 3}));
                       }
                     });
  });
  EXPECT_THAT(result[2].message(), HasSubstr("died before step 11"));
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(result[r].ok()) << r << ": " << result[r].ToString();
    EXPECT_EQ(members[r].w, members[0].w) << "member " << r << " differs";
    EXPECT_GE(reforms[r], 1u);
  }
  // The same training computed directly: 4 members' gradients averaged for steps 1..10,
  // then the 3 survivors'.
  const std::vector<float> ref = Reference(n, steps, [&](uint64_t s) {
    return s <= dies_after ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 1, 3};
  });
  for (size_t i = 0; i < kParams; ++i) EXPECT_NEAR(members[0].w[i], ref[i], 1e-4) << i;
}

// The death at every point of step 6's average: depending on where, some survivors complete
// the step and others do not; the ahead ones roll back. Whatever the point, the survivors
// end with identical models, and across the points some rollbacks happened.
TEST(ElasticSteps, ADeathAtAnyPointOfAnAverageLeavesTheSurvivorsIdentical) {
  const int n = 3;
  const uint64_t steps = 8;
  uint64_t total_rollbacks = 0;
  for (int kill_at : {3, 7, 9, 10, 11}) {
    SCOPED_TRACE("member 1 dies after sending " + std::to_string(kill_at) + " chunks of step 6");
    Group g(n);
    auto& [hub, members, result] = g;
    std::vector<uint64_t> rollbacks(n);
    std::atomic<uint64_t> victim_step{0};
    g.OnThreads([&](int r) {
      int sent = 0;
      KillingTransport t(&hub, r, [&, r] { return r == 1 && victim_step.load() == 6 && ++sent > kill_at; });
      const auto count = [&, r](uint64_t step) {
        if (r == 1) victim_step = step;
        return true;
      };
      result[r] = Live(members[r], &t, n, steps, FastOptions(), count,
                       [&, r](ElasticRing&, ElasticSteps& e) { rollbacks[r] = e.rollbacks(); });
    });
    EXPECT_FALSE(result[1].ok());
    ASSERT_TRUE(result[0].ok()) << result[0].ToString();
    ASSERT_TRUE(result[2].ok()) << result[2].ToString();
    EXPECT_EQ(members[0].w, members[2].w);
    total_rollbacks += rollbacks[0] + rollbacks[2];
  }
  EXPECT_GT(total_rollbacks, 0u) << "no kill point left one survivor ahead of the other";
}

// A member that dies and is restarted (a new process: fresh state) joins the running ring at
// a step boundary with the ring's state; everyone ends with the same model.
TEST(ElasticSteps, ARestartedMemberRejoinsWithTheRingsState) {
  const int n = 3;
  const uint64_t steps = 80;
  Group g(n);
  auto& [hub, members, result] = g;
  std::vector<uint64_t> joined_at(n);
  std::atomic<bool> rejoined{false};
  g.OnThreads([&](int r) {
    const auto first_life = [&, r, dies = DiesAt(hub, r, 1, 6)](uint64_t step) {
      // The survivors slow down until the restarted member is back, so that it finds them
      // running however slowly a busy machine restarts it (74 x 20 ms at most).
      if (r != 1 && step > 5 && !rejoined.load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return dies(step);
    };
    result[r] = Live(members[r], hub.endpoint(r), n, steps, FastOptions(), first_life);
    if (r != 1) return;
    // The restart: a new member 1 with fresh state.
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    hub.Reconnect(1);
    members[1] = Member();
    members[1].id = 1;
    members[1].w.assign(kParams, -3.0f);  // not the ring's: it must take theirs
    const auto second_life = [&](uint64_t step) {
      if (joined_at[1] == 0) joined_at[1] = step - 1;
      rejoined = true;
      return true;
    };
    result[1] = Live(members[1], hub.endpoint(1), n, steps, FastOptions(), second_life,
                     [](ElasticRing& ring, ElasticSteps&) { EXPECT_EQ(ring.view(), (std::vector<int>{0, 1, 2})); });
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(result[r].ok()) << r << ": " << result[r].ToString();
  EXPECT_GT(joined_at[1], 5u);
  EXPECT_LT(joined_at[1], steps);
  EXPECT_EQ(members[1].w, members[0].w);
  EXPECT_EQ(members[2].w, members[0].w);
}

// Fewer members than min_members: the run fails saying so, it does not train alone.
TEST(ElasticSteps, TooFewMembersFailTheRun) {
  const int n = 2;
  Group g(n);
  auto& [hub, members, result] = g;
  g.OnThreads([&](int r) {
    ElasticOptions o = FastOptions();
    o.min_members = 2;
    result[r] = Live(members[r], hub.endpoint(r), n, 10, o, DiesAt(hub, r, 1, 4));
  });
  EXPECT_THAT(result[0].ToString(), HasSubstr("at least 2 are needed (min_members)"));
}

// Members whose models differ in size (a misconfigured group): the joiner cannot take the
// ring's state, and it fails saying so; it must not re-form as a member with state of its
// own (it did: the models then differed silently), nor re-form for ever. The other goes on.
TEST(ElasticSteps, AStateOfAnotherSizeFailsTheMemberNotForever) {
  const int n = 2;
  Group g(n);
  auto& [hub, members, result] = g;
  g.OnThreads([&](int r) {
    ElasticHooks hooks = members[r].Hooks();
    if (r == 1) hooks.save = [] { return std::vector<float>(kParams + 5, 0.0f); };
    auto ring = ElasticRing::Create(FastOptions(), n, r, hub.endpoint(r));
    ASSERT_TRUE(ring.ok());
    ElasticSteps e(ring->get(), std::move(hooks));
    result[r] = e.Start();
    if (result[r].ok()) result[r] = Train(members[r], e, 5);
  });
  EXPECT_EQ(result[1].code(), StatusCode::kInvalidArgument) << result[1].ToString();
  EXPECT_TRUE(result[0].ok()) << result[0].ToString();
}

// An enrolled member that sends malformed control messages (truncated, trailing bytes, an
// unknown type, member lists unsorted, repeated, out of range or of an absurd length) at a
// later generation, while the others form the ring and train: every one is dropped. Had one
// been taken for a JOIN or VIEW, the ring would have re-formed or adopted its view.
TEST(ElasticRing, MalformedControlMessagesAreDroppedNotObeyed) {
  const int n = 3;  // member 2 never joins: it only sends junk
  const uint64_t steps = 20, generation = 50;
  const auto u32 = [](uint32_t v) {  // little-endian, as on the wire
    std::string out;
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return out;
  };
  const std::string head = std::string(1, '\x02') + std::string(8, '\0') + std::string(1, '\0');  // VIEW, step 0
  const std::string join = std::string(1, '\x01') + std::string(8, '\0') + std::string(1, '\0');
  const std::vector<std::string> junk = {
      "",
      join.substr(0, 5),                                  // a truncated JOIN
      join + "x",                                         // trailing bytes
      std::string(1, '\x09') + join.substr(1),            // an unknown type
      head + u32(2) + u32(1) + u32(0) + u32(0),           // members unsorted
      head + u32(2) + u32(0) + u32(0) + u32(0),           // a member twice
      head + u32(2) + u32(0) + u32(7) + u32(0),           // member 7 of 3
      head + u32(0xFFFFFFFFu) + u32(0),                   // an absurd count
      head + u32(2) + u32(0) + u32(1) + u32(1),           // the joiner list cut short
  };
  InProcessHub hub(n);
  std::vector<Member> members(2);
  std::vector<Status> result(2);
  std::vector<uint64_t> reforms(2), generations(2);
  std::atomic<int> running{2};
  std::atomic<int> sent{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    members[r].id = r;
    threads.emplace_back([&, r] {
      ElasticOptions o = FastOptions();
      o.start_window_ms = 500;  // then the two form without member 2
      result[r] = Live(members[r], hub.endpoint(r), n, steps, o, {}, [&, r](ElasticRing& ring, ElasticSteps&) {
        reforms[r] = ring.reforms();
        generations[r] = ring.generation();
        EXPECT_EQ(ring.view(), (std::vector<int>{0, 1}));
      });
      --running;
    });
  }
  threads.emplace_back([&] {
    while (running.load() > 0) {
      for (const std::string& bytes : junk) {
        for (int to : {0, 1}) {
          Chunk c;
          c.kind = OpKind::kMessage;
          c.op = 0xE1A571C0u;  // the elastic ring's control messages
          c.generation = generation;
          c.bytes = Payload(bytes);
          if (hub.endpoint(2)->Send(to, std::move(c)).ok()) ++sent;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_GT(sent.load(), 100);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(result[r].ok()) << r << ": " << result[r].ToString();
    EXPECT_EQ(reforms[r], 0u) << r;
    EXPECT_EQ(generations[r], 1u) << r;
  }
  EXPECT_EQ(members[1].w, members[0].w);
  const std::vector<float> ref = Reference(n, steps, [](uint64_t) { return std::vector<int>{0, 1}; });
  for (size_t i = 0; i < kParams; ++i) EXPECT_NEAR(members[0].w[i], ref[i], 1e-4) << i;
}

// A failure detector (ElasticOptions::dead) that declares member 2 dead while it is alive
// and knocking (its JOINs reach the ring, its detector's messages would not): the ring of
// 0 and 1 does not let it pull them into re-forming again and again; its JOIN waits, and
// once the detector sees it alive it joins with the ring's state. Everyone ends equal.
TEST(ElasticRing, AMemberDeclaredDeadWaitsOutsideUntilSeenAlive) {
  const int n = 3;
  const uint64_t steps = 100;
  Group g(n);
  auto& [hub, members, result] = g;
  std::atomic<bool> seen_alive{false};
  std::vector<uint64_t> reforms(n), generations(n);
  std::atomic<uint64_t> progress{0};
  std::thread flip([&] {
    // Member 2 knocks from the start; the detector sees it alive once the others are at step 30.
    while (progress.load() < 30) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    seen_alive = true;
  });
  g.OnThreads([&](int r) {
    ElasticOptions o = FastOptions();
    o.start_window_ms = r == 2 ? 20000 : 500;  // 0 and 1 start without member 2, which waits to be let in
    if (r != 2) o.dead = [&](int m) { return m == 2 && !seen_alive.load(); };
    const auto slow = [&, r](uint64_t step) {
      if (r == 0) progress = step;
      if (r != 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return true;
    };
    if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(700));  // after the others formed
    result[r] = Live(members[r], hub.endpoint(r), n, steps, o, slow, [&, r](ElasticRing& ring, ElasticSteps&) {
      reforms[r] = ring.reforms();
      generations[r] = ring.generation();
      EXPECT_EQ(ring.view(), (std::vector<int>{0, 1, 2})) << r;
    });
  });
  flip.join();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(result[r].ok()) << r << ": " << result[r].ToString();
  EXPECT_EQ(members[1].w, members[0].w);
  EXPECT_EQ(members[2].w, members[0].w);
  // Held, not obeyed: 0 and 1 re-formed once, to let member 2 in when it was seen alive (an
  // obeyed JOIN would have re-formed them, left it out of the view, and again, and again).
  EXPECT_EQ(reforms[0], 1u);
  EXPECT_EQ(reforms[1], 1u);
  EXPECT_EQ(generations[0], generations[2]);
}

TEST(ElasticRing, RefusesBadOptions) {
  InProcessHub hub(2);
  EXPECT_FALSE(ElasticRing::Create(FastOptions(), 2, 2, hub.endpoint(0)).ok());
  EXPECT_FALSE(ElasticRing::Create(FastOptions(), 2, 0, nullptr).ok());
  ElasticOptions o = FastOptions();
  o.reform_window_ms = 0;
  EXPECT_THAT(ElasticRing::Create(o, 2, 0, hub.endpoint(0)).status().message(), HasSubstr("reform_window_ms"));
}

}  // namespace
}  // namespace fedmesh::collective
