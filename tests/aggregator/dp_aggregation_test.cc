// Central DP (aggregator/dp_aggregation.h): clipping and the fixed denominator by hand,
// example counts ignored, the noise's standard deviation z C / m measured, epsilon equal to
// the RDP accountant's for the same rounds, the budget stopping the round engine before the
// round that would exceed it, adaptive clipping settling near the target quantile of the
// update norms, state surviving a restart, and every bad option and state refused.
#include "aggregator/dp_aggregation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "crypto/dp/rdp_accountant.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;

DpOptions Dp(double clip, double z, uint32_t m, uint64_t population = 0) {
  DpOptions o;
  o.central = true;
  o.clip = clip;
  o.noise_multiplier = z;
  o.expected_clients = m;
  o.population = population;
  o.noise_seed = 42;
  return o;
}

std::unique_ptr<Strategy> Private(const DpOptions& dp, const std::string& inner = "fedavg") {
  StrategyOptions o;
  o.dp = dp;
  auto s = MakeStrategy(inner, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(CentralDp, ClipsEachUpdateAndDividesByTheExpectedClients) {
  auto s = Private(Dp(1.0, 0.0, 4));  // no noise: the arithmetic alone
  EXPECT_EQ(s->name(), "dp+fedavg");
  std::vector<float> g = {1.0f, 1.0f}, out(2);
  // Changes (3, 4) (norm 5, clipped to (0.6, 0.8)) and (0.3, 0) (kept); example counts play
  // no part; the sum is divided by m = 4, not by the 2 that answered.
  std::vector<ClientUpdate> u = {{"a", 1000, {4.0f, 5.0f}}, {"b", 1, {1.3f, 1.0f}}};
  ASSERT_TRUE(s->Aggregate(g, u, out).ok());
  EXPECT_NEAR(out[0], 1.0 + 0.9 / 4, 1e-6);
  EXPECT_NEAR(out[1], 1.0 + 0.8 / 4, 1e-6);
  const auto p = s->privacy();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->rounds, 1u);
  EXPECT_TRUE(std::isinf(p->epsilon));  // no noise, no privacy
}

TEST(CentralDp, NoiseHasStandardDeviationZTimesClipOverM) {
  const size_t d = 200000;
  auto s = Private(Dp(0.5, 1.0, 4));
  std::vector<float> g(d, 0.0f), out(d);
  ASSERT_TRUE(s->Aggregate(g, {{"a", 1, std::vector<float>(d, 0.0f)}}, out).ok());
  double sum = 0, sq = 0;
  for (float v : out) {
    sum += v;
    sq += double(v) * v;
  }
  EXPECT_NEAR(sum / d, 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(sq / d), 1.0 * 0.5 / 4, 0.002);  // 0.125
}

TEST(CentralDp, EpsilonIsTheAccountantsAndTheBudgetStopsInTime) {
  const double z = 1.1, delta = 1e-5;
  DpOptions dp = Dp(1.0, z, 10, 1000);  // q = 0.01
  dp.delta = delta;
  auto reference = RdpAccountant::Create().value();
  std::vector<double> eps;
  for (int r = 1; r <= 400; ++r) {
    ASSERT_TRUE(reference.Compose(0.01, z).ok());
    eps.push_back(reference.Epsilon(delta)->epsilon);
  }
  dp.epsilon_budget = (eps[299] + eps[300]) / 2;  // room for exactly 300 rounds
  auto s = Private(dp);
  std::vector<float> g = {0.0f}, out(1);
  int rounds = 0;
  while (s->CanRunAnotherRound().ok()) {
    ASSERT_TRUE(s->Aggregate(g, {{"a", 1, {0.1f}}}, out).ok());
    ++rounds;
    EXPECT_DOUBLE_EQ(s->privacy()->epsilon, eps[rounds - 1]);
    ASSERT_LE(rounds, 400);
  }
  EXPECT_EQ(rounds, 300);
  EXPECT_LE(s->privacy()->epsilon, dp.epsilon_budget);
  EXPECT_THAT(s->CanRunAnotherRound().message(), HasSubstr("privacy budget"));
  EXPECT_DOUBLE_EQ(s->privacy()->sampling_rate, 0.01);
}

TEST(CentralDp, AdaptiveClippingSettlesNearTheTargetQuantile) {
  DpOptions dp = Dp(0.2, 0.5, 100);
  dp.adaptive_clip = true;
  dp.target_quantile = 0.5;
  auto s = Private(dp);
  auto* c = dynamic_cast<CentralDpAggregation*>(s.get());
  ASSERT_NE(c, nullptr);
  // sigma_b = 100 / 20 = 5: z_update = (0.5^-2 - 10^-2)^(-1/2).
  EXPECT_NEAR(c->update_noise_multiplier(), 1 / std::sqrt(4.0 - 0.01), 1e-12);
  // 100 updates a round whose norms spread evenly over [1, 3]: the median norm is 2.
  std::vector<float> g(4, 0.0f), out(4);
  std::vector<ClientUpdate> u;
  for (int i = 0; i < 100; ++i) {
    ClientUpdate c{std::to_string(i), 1, {1.0f + 0.02f * static_cast<float>(i), 0, 0, 0}};
    u.push_back(std::move(c));
  }
  std::vector<double> late;
  for (int r = 0; r < 60; ++r) {
    ASSERT_TRUE(s->Aggregate(g, u, out).ok());
    if (r >= 40) late.push_back(s->privacy()->clip_norm);
  }
  double mean = 0;
  for (double v : late) mean += v / late.size();
  EXPECT_NEAR(mean, 2.0, 0.25) << "the bound should track the median norm";
}

TEST(CentralDp, StateSurvivesARestart) {
  DpOptions dp = Dp(0.3, 1.0, 20);
  dp.adaptive_clip = true;
  StrategyOptions o;
  o.dp = dp;
  o.server_lr = 0.5;
  auto s = MakeStrategy("fedavgm", o).value();
  std::vector<float> g = {0.0f, 0.0f}, out(2);
  for (int r = 0; r < 5; ++r) ASSERT_TRUE(s->Aggregate(g, {{"a", 1, {1.0f, -1.0f}}}, out).ok());
  const std::vector<float> state = s->SaveState();
  ASSERT_EQ(state.size(), 2u + 2u);  // rounds, clip, fedavgm's velocity
  EXPECT_EQ(state[0], 5.0f);
  auto restarted = MakeStrategy("fedavgm", o).value();
  ASSERT_TRUE(restarted->RestoreState(state, 2).ok());
  EXPECT_DOUBLE_EQ(restarted->privacy()->epsilon, s->privacy()->epsilon);
  EXPECT_FLOAT_EQ(static_cast<float>(restarted->privacy()->clip_norm), state[1]);
  EXPECT_EQ(restarted->SaveState(), state);
  // Nothing spent yet (a store at model version 0) restores as a fresh start.
  auto fresh = MakeStrategy("fedavgm", o).value();
  ASSERT_TRUE(fresh->RestoreState({}, 2).ok());
  EXPECT_EQ(fresh->privacy()->rounds, 0u);

  EXPECT_THAT(restarted->RestoreState(std::vector<float>{1.5f, 1.0f, 0, 0}, 2).message(),
              HasSubstr("not a count"));
  EXPECT_THAT(restarted->RestoreState(std::vector<float>{3.0f, -1.0f, 0, 0}, 2).message(),
              HasSubstr("clip bound"));
  EXPECT_THAT(restarted->RestoreState(std::vector<float>{3.0f, 1.0f, 0}, 2).message(),
              HasSubstr("does not fit a model of 2"));
  EXPECT_EQ(restarted->SaveState(), state);  // refused restores changed nothing
}

TEST(CentralDp, BadOptionsAreRefusedNamingTheField) {
  auto expect = [](DpOptions dp, const char* mentions, const char* inner = "fedavg") {
    StrategyOptions o;
    o.dp = dp;
    auto s = MakeStrategy(inner, o);
    ASSERT_FALSE(s.ok()) << mentions;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(mentions));
  };
  expect(Dp(0, 1, 10), "clip must be finite and > 0");
  expect(Dp(std::numeric_limits<double>::infinity(), 1, 10), "clip");
  expect(Dp(1, -1, 10), "noise_multiplier");
  expect(Dp(1, 1, 0), "expected_clients");
  expect(Dp(1, 1, 10, 5), "population (5) is smaller");
  DpOptions d = Dp(1, 1, 10);
  d.delta = 1;
  expect(d, "delta");
  d = Dp(1, 1, 10);
  d.epsilon_budget = -1;
  expect(d, "epsilon_budget");
  d = Dp(1, 1, 10);
  d.adaptive_clip = true;  // z = 1 needs m > 10
  expect(d, "adaptive_clip needs 0 < noise_multiplier < expected_clients / 10");
  d = Dp(1, 0.5, 100);
  d.adaptive_clip = true;
  d.target_quantile = 1;
  expect(d, "target_quantile");
  d.target_quantile = 0.5;
  d.clip_lr = 0;
  expect(d, "clip_lr");
  expect(Dp(1, 1, 10), "nothing to choose from", "median");
  expect(Dp(1, 1, 10), "nothing to choose from", "krum");
}

TEST(CentralDp, BadUpdatesSpendNothing) {
  auto s = Private(Dp(1.0, 1.0, 4));
  std::vector<float> g = {0.0f}, out = {7.0f};
  Status st = s->Aggregate(g, {{"x", 1, {std::numeric_limits<float>::quiet_NaN()}}}, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("node x"));
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(s->privacy()->rounds, 0u);
  EXPECT_EQ(s->privacy()->epsilon, 0.0);
}

}  // namespace
}  // namespace fedmesh
