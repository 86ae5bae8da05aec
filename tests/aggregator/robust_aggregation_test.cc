// Robust aggregators (aggregator/robust_aggregation.h): hand-computed medians and trimmed
// means, Krum scores and selections, f lowered to keep n >= 2f + 3, and the point of them:
// with 2 of 9 updates sent by attackers (huge values, a huge claimed example count), the
// robust rules stay with the honest updates where FedAvg is dragged off. Bad options and
// bad updates are refused with the output untouched.
#include "aggregator/robust_aggregation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace fedmesh {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Strategy> Make(const std::string& name, StrategyOptions o = {}) {
  auto s = MakeStrategy(name, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::vector<float> Agg(Strategy& s, const std::vector<ClientUpdate>& u) {
  std::vector<float> g(u[0].params.size(), 0.0f), out(g.size(), -99.0f);
  Status st = s.Aggregate(g, u, out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(RobustAggregation, MedianOddAndEven) {
  auto m = Make("median");
  EXPECT_THAT(Agg(*m, {{"a", 1, {3.0f, -1.0f}}, {"b", 1, {1, 5}}, {"c", 1, {2, 0}}}), ElementsAre(2.0f, 0.0f));
  EXPECT_THAT(Agg(*m, {{"a", 1, {3.0f, -1.0f}}, {"b", 1, {1, 5}}, {"c", 1, {2, 0}}, {"d", 1, {10, 1}}}),
              ElementsAre(2.5f, 0.5f));
  EXPECT_THAT(Agg(*m, {{"a", 1, {4}}}), ElementsAre(4.0f));
}

TEST(RobustAggregation, TrimmedMeanDropsEachEnd) {
  StrategyOptions o;
  o.trim_fraction = 0.2;  // floor(0.2 * 5) = 1 from each end
  auto t = Make("trimmed_mean", o);
  EXPECT_THAT(Agg(*t, {{"a", 1, {1}}, {"b", 1, {2}}, {"c", 1, {3}}, {"d", 1, {4}}, {"e", 1, {100}}}),
              ElementsAre(3.0f));
  // 4 updates: floor(0.8) = 0, nothing trimmed, the plain mean.
  EXPECT_THAT(Agg(*t, {{"a", 1, {1}}, {"b", 1, {2}}, {"c", 1, {3}}, {"d", 1, {100}}}),
              ElementsAre(26.5f));
}

TEST(RobustAggregation, KrumScoresAndSelection) {
  // Points on a line: 0, 1, 2, 10. f = 0, so n - f - 2 = 2 nearest others.
  std::vector<ClientUpdate> u = {{"a", 1, {0}}, {"b", 1, {1}}, {"c", 1, {2}}, {"d", 1, {10}}};
  // a: 1 + 4; b: 1 + 1; c: 1 + 4; d: 64 + 81.
  EXPECT_THAT(RobustAggregator::KrumScores(u, 0), ElementsAre(5.0, 2.0, 5.0, 145.0));
  StrategyOptions o;
  o.byzantine_fraction = 0;
  auto k = RobustAggregator::Create(RobustRule::kKrum, o).value();
  EXPECT_THAT(Agg(*k, u), ElementsAre(1.0f));
  EXPECT_THAT(k->last_selected(), ElementsAre(1u));
  o.multikrum_select = 3;
  auto mk = RobustAggregator::Create(RobustRule::kMultiKrum, o).value();
  EXPECT_THAT(Agg(*mk, u), ElementsAre(1.0f));  // mean of 0, 1, 2
  EXPECT_THAT(mk->last_selected(), ElementsAre(0u, 1u, 2u));
}

TEST(RobustAggregation, AssumedByzantineKeepsKrumsCondition) {
  StrategyOptions o;
  o.byzantine_fraction = 0.4;
  auto k = RobustAggregator::Create(RobustRule::kKrum, o).value();
  EXPECT_EQ(k->AssumedByzantine(10), 3u);  // floor(4) = 4 needs n >= 11: lowered to 3
  EXPECT_EQ(k->AssumedByzantine(5), 1u);   // floor(2) = 2 needs n >= 7: lowered to 1
  EXPECT_EQ(k->AssumedByzantine(2), 0u);
  // Degenerate rounds still aggregate: one update is itself, two pick the first.
  EXPECT_THAT(Agg(*k, {{"a", 1, {4}}}), ElementsAre(4.0f));
  EXPECT_THAT(Agg(*k, {{"a", 1, {4}}, {"b", 1, {6}}}), ElementsAre(4.0f));
}

TEST(RobustAggregation, TwoAttackersOfNineDoNotMoveTheRobustRules) {
  std::vector<ClientUpdate> u;
  for (int i = 0; i < 7; ++i) {
    u.push_back({"honest-" + std::to_string(i), 100,
                 {1.0f + 0.01f * static_cast<float>(i), -1.0f - 0.01f * static_cast<float>(i)}});
  }
  u.push_back({"evil-1", 1000000000, {1e6f, 1e6f}});
  u.push_back({"evil-2", 1000000000, {-1e6f, 5e5f}});
  FedAvg avg;
  const auto dragged = Agg(avg, u);
  EXPECT_GT(std::abs(dragged[1] + 1.0f), 1e4f) << "FedAvg should be dragged off";
  StrategyOptions o;
  o.trim_fraction = 0.25;
  o.byzantine_fraction = 0.25;  // f = 2: multikrum averages the 7 best
  for (const char* name : {"median", "trimmed_mean", "krum", "multikrum"}) {
    auto s = Make(name, o);
    const auto r = Agg(*s, u);
    EXPECT_NEAR(r[0], 1.03f, 0.035f) << name;
    EXPECT_NEAR(r[1], -1.03f, 0.035f) << name;
  }
}

TEST(RobustAggregation, BadOptionsAndUpdatesAreRefused) {
  StrategyOptions o;
  o.trim_fraction = 0.5;
  auto s = MakeStrategy("trimmed_mean", o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("trim_fraction must be in [0, 0.5)"));
  o = {};
  o.byzantine_fraction = -0.1;
  s = MakeStrategy("krum", o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("byzantine_fraction"));

  for (const char* name : {"median", "trimmed_mean", "krum", "multikrum"}) {
    auto m = Make(name);
    std::vector<float> g = {0.0f, 0.0f}, out = {7.0f, 7.0f};
    Status st = m->Aggregate(g, {{"a", 1, {1, 2}}, {"x", 1, {1, std::numeric_limits<float>::infinity()}}}, out);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(st.message(), HasSubstr("node x"));
    EXPECT_THAT(st.message(), HasSubstr("+inf"));
    st = m->Aggregate(g, {{"a", 1, {1, 2, 3}}}, out);
    EXPECT_THAT(st.message(), HasSubstr("has 3 values but the model has 2"));
    st = m->Aggregate(g, {}, out);
    EXPECT_THAT(st.message(), HasSubstr("no client updates"));
    EXPECT_THAT(out, ElementsAre(7.0f, 7.0f)) << name;
  }
}

}  // namespace
}  // namespace fedmesh
