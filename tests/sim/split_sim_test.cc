// fedmesh-sim split mode (sim/split_mode.cc): the real LabelParty / FeatureParty trained in
// virtual time. It learns, its bytes are exactly the split messages' wire format, micro-
// batches shorten the step when transfers dominate and cannot beat the latency floor, and
// the same seed gives the same lines.
#include <string>

#include <gtest/gtest.h>

#include "sim/client_traits.h"
#include "sim/sim_config.h"
#include "sim/simulation.h"
#include "tests/sim/sim_test_util.h"

namespace fedmesh {
namespace {

constexpr uint64_t kHeader = 48;  // vertical/split_messages.h

SimOptions SplitSim(uint32_t micro) {
  SimOptions o = SmallSim(2);
  o.mode = SimMode::kSplit;
  o.split.microbatches = micro;
  o.split.steps_per_round = 30;
  o.trainer.batch_size = 128;
  o.trainer.sgd.lr = 0.05f;
  o.trainer.sgd.momentum = 0.9f;
  o.compute_sigma = 0;
  o.bandwidth_sigma = 0;
  return o;
}

TEST(SplitSim, LearnsAndSendsExactlyTheWireFormatsBytes) {
  REQUIRE_DATA();
  for (const std::string codec : {"none", "fp16", "int8"}) {
    SimOptions o = SplitSim(4);
    o.codec = codec;
    auto run = RunSimulation(o);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    ASSERT_EQ(run->rounds.size(), 2u);
    const SimRoundMetrics& last = run->rounds.back();
    ASSERT_TRUE(last.test_accuracy.has_value());
    std::printf("split, %s: test accuracy %.4f after 60 steps, step %.4f s, idle %.3f\n", codec.c_str(),
                *last.test_accuracy, *last.step_s, *last.idle_fraction);
    EXPECT_GE(*last.test_accuracy, 0.70);
    EXPECT_EQ(last.participants, 2u);
    // The bytes of one message of n values: 4 or 2 a value, or (int8) 1 a value and a
    // 4-byte scale per 256.
    auto values = [&](uint64_t n) -> uint64_t {
      return codec == "none" ? 4 * n : codec == "fp16" ? 2 * n : n + 4 * ((n + 255) / 256);
    };
    // Per step: 4 activation messages (32 rows x 64 cut values each); then the evaluation's
    // 4 over the 1,000 test rows (250 rows each).
    const uint64_t m = 4, b = 128, cut = 64, test = 1000, steps = 30;
    EXPECT_EQ(last.bytes_up, steps * m * (kHeader + values(b / m * cut)) + m * (kHeader + values(test / m * cut)));
    // Forwards carry u64 row indices; gradients travel like activations.
    EXPECT_EQ(last.bytes_down,
              steps * (m * kHeader + b * 8 + m * (kHeader + values(b / m * cut))) + m * kHeader + test * 8);
  }
}

TEST(SplitSim, MicroBatchesHideTransfersButNotLatency) {
  REQUIRE_DATA();
  // Transfers dominate: no latency, a slow link; each micro-batch's activations travel
  // while the next one is computed. (With a fast link and equal parties the step is
  // compute-bound and 4 micro-batches gain nothing over 1: each party computes its whole
  // forward and backward either way, and nothing is recomputed.)
  SimOptions o1 = SplitSim(1);
  o1.latency_ms = 0;
  o1.up_mbps = 20;
  SimOptions o4 = o1;
  o4.split.microbatches = 4;
  auto r1 = RunSimulation(o1), r4 = RunSimulation(o4);
  ASSERT_TRUE(r1.ok() && r4.ok());
  const double s1 = *r1->rounds.back().step_s, s4 = *r4->rounds.back().step_s;
  std::printf("transfer-bound step: %.5f s unpipelined, %.5f s with 4 micro-batches (%.2fx)\n", s1, s4, s4 / s1);
  EXPECT_LT(s4, 0.7 * s1);
  EXPECT_LT(*r4->rounds.back().idle_fraction, *r1->rounds.back().idle_fraction);
  EXPECT_NEAR(*r4->rounds.back().test_accuracy, *r1->rounds.back().test_accuracy, 0.01);

  // Latency dominates: a step is a forward there and activations back at least.
  SimOptions l1 = o1, l4 = o4;
  for (SimOptions* o : {&l1, &l4}) {
    o->latency_ms = 200;
    o->up_mbps = 100000;
    o->compute_speed = 1e7;
  }
  auto q1 = RunSimulation(l1), q4 = RunSimulation(l4);
  ASSERT_TRUE(q1.ok() && q4.ok());
  const double t1 = *q1->rounds.back().step_s, t4 = *q4->rounds.back().step_s;
  std::printf("latency-bound step: %.5f s unpipelined, %.5f s with 4 micro-batches\n", t1, t4);
  const double floor = TraitsOf(l1, 0).link.latency_s + TraitsOf(l1, 1).link.latency_s;
  EXPECT_GE(t1, floor);
  EXPECT_GE(t4, floor);
  EXPECT_LT(t1, floor * 1.2);
  EXPECT_LT(t4, t1 * 1.05);
  EXPECT_GT(t4, t1 * 0.9);
}

// Staleness 1 hides the round trip that exact steps cannot: the next step's forwards
// travel while this step's gradients do, so a latency-bound step takes about half as long.
TEST(SplitSim, StalenessOneHidesTheRoundTrip) {
  REQUIRE_DATA();
  SimOptions exact = SplitSim(4);
  exact.latency_ms = 200;
  exact.up_mbps = 100000;
  exact.compute_speed = 1e7;
  SimOptions stale = exact;
  stale.split.staleness = 1;
  auto e = RunSimulation(exact), s = RunSimulation(stale);
  ASSERT_TRUE(e.ok() && s.ok()) << s.status().ToString();
  const double te = *e->rounds.back().step_s, ts = *s->rounds.back().step_s;
  std::printf("latency-bound step, 4 micro-batches: %.5f s exact, %.5f s with staleness 1 (%.2fx); accuracy %.4f / %.4f\n",
              te, ts, ts / te, *e->rounds.back().test_accuracy, *s->rounds.back().test_accuracy);
  EXPECT_LT(ts, 0.6 * te);
  EXPECT_GE(*s->rounds.back().test_accuracy, *e->rounds.back().test_accuracy - 0.03);
  // Compute-bound (fast link, no latency): nothing to hide, the step stays as long.
  SimOptions ce = SplitSim(4), cs = SplitSim(4);
  cs.split.staleness = 1;
  for (SimOptions* o : {&ce, &cs}) {
    o->latency_ms = 0;
    o->up_mbps = 100000;
  }
  auto a = RunSimulation(ce), b = RunSimulation(cs);
  ASSERT_TRUE(a.ok() && b.ok());
  std::printf("compute-bound step: %.5f s exact, %.5f s with staleness 1\n", *a->rounds.back().step_s,
              *b->rounds.back().step_s);
  EXPECT_GT(*b->rounds.back().step_s, 0.9 * *a->rounds.back().step_s);
}

TEST(SplitSim, TheSameSeedGivesTheSameLines) {
  REQUIRE_DATA();
  SimOptions o = SplitSim(2);
  o.split.parties = 3;
  auto a = RunSimulation(o), b = RunSimulation(o);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  ASSERT_EQ(a->rounds.size(), b->rounds.size());
  for (size_t i = 0; i < a->rounds.size(); ++i) {
    EXPECT_EQ(a->rounds[i].ToJson().str(), b->rounds[i].ToJson().str());
  }
  EXPECT_EQ(a->final_model, b->final_model);
  EXPECT_EQ(a->rounds[0].participants, 3u);
}

TEST(SplitSim, BadSettingsAreRefusedNamingTheKey) {
  SimOptions o = SplitSim(4);
  o.split.microbatches = 200;  // more than the batch of 128
  auto r = RunSimulation(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("split microbatches (200) must not exceed the batch (128)"), std::string::npos)
      << r.status().ToString();
  o = SplitSim(1);
  o.split.parties = 17;
  EXPECT_NE(RunSimulation(o).status().message().find("split parties must be in [2, 16]"), std::string::npos);
  if (HaveData()) {
    o = SplitSim(1);
    o.codec = "topk:0.1";
    EXPECT_NE(RunSimulation(o).status().message().find("split mode sends activations and gradients as none, fp16, bf16 or int8"),
              std::string::npos);
  }
  auto c = LoadSimConfig("", {"sim.mode=split", "split.microbatches=64", "train.batch=32"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("[split] microbatches"), std::string::npos) << c.status().ToString();
  auto st = LoadSimConfig("", {"sim.mode=split", "split.staleness=2"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("[split] staleness"), std::string::npos) << st.status().ToString();
}

}  // namespace
}  // namespace fedmesh
