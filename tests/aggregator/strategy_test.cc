#include "aggregator/strategy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace fedmesh {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(FedAvgTest, WeightsByNumExamplesLikeTheHandComputation) {
  // (100 * 1 + 300 * 5) / 400 = 4 and (100 * 2 + 300 * 6) / 400 = 5, exactly.
  FedAvg fedavg;
  std::vector<float> global = {0.0f, 0.0f};
  std::vector<ClientUpdate> updates = {{"a", 100, {1.0f, 2.0f}}, {"b", 300, {5.0f, 6.0f}}};
  std::vector<float> out(2, -1.0f);
  ASSERT_TRUE(fedavg.Aggregate(global, updates, out).ok());
  EXPECT_THAT(out, ElementsAre(4.0f, 5.0f));
  EXPECT_EQ(fedavg.name(), "fedavg");
  EXPECT_EQ(fedavg.prox_mu(), 0.0);
}

TEST(FedAvgTest, IgnoresTheOldGlobalValuesAndMayWriteInPlace) {
  FedAvg fedavg;
  std::vector<float> global = {100.0f, -100.0f};
  std::vector<ClientUpdate> updates = {{"a", 1, {1.0f, 1.0f}}, {"b", 3, {3.0f, -1.0f}}};
  ASSERT_TRUE(fedavg.Aggregate(global, updates, global).ok());
  EXPECT_THAT(global, ElementsAre(2.5f, -0.5f));
}

TEST(FedAvgTest, ErrorsLeaveTheOutputUntouched) {
  FedAvg fedavg;
  std::vector<float> global = {0.0f, 0.0f};
  std::vector<float> out = {7.0f, 7.0f};

  Status s = fedavg.Aggregate(global, {}, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no client updates"));

  std::vector<float> short_out(1);
  s = fedavg.Aggregate(global, {{"a", 1, {1.0f, 1.0f}}}, short_out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);

  s = fedavg.Aggregate(global, {{"a", 1, {1.0f, 1.0f, 1.0f}}}, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("fedavg"));

  s = fedavg.Aggregate(global, {{"a", 1, {std::numeric_limits<float>::quiet_NaN(), 1.0f}}}, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);

  s = fedavg.Aggregate(global, {{"a", 0, {1.0f, 1.0f}}}, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out, ElementsAre(7.0f, 7.0f));
}

TEST(FedProxTest, AggregatesLikeFedAvgAndExposesMu) {
  FedProx fedprox(0.1);
  EXPECT_EQ(fedprox.name(), "fedprox");
  EXPECT_EQ(fedprox.prox_mu(), 0.1);
  std::vector<float> global = {0.0f};
  std::vector<float> out(1);
  ASSERT_TRUE(fedprox.Aggregate(global, {{"a", 100, {1.0f}}, {"b", 300, {5.0f}}}, out).ok());
  EXPECT_EQ(out[0], 4.0f);
}

TEST(MakeStrategyTest, BuildsKnownStrategiesCaseInsensitively) {
  auto avg = MakeStrategy("fedavg");
  ASSERT_TRUE(avg.ok()) << avg.status().ToString();
  EXPECT_EQ((*avg)->name(), "fedavg");
  EXPECT_EQ((*avg)->prox_mu(), 0.0);

  auto prox = MakeStrategy("FedProx", StrategyOptions{.prox_mu = 0.5});
  ASSERT_TRUE(prox.ok()) << prox.status().ToString();
  EXPECT_EQ((*prox)->name(), "fedprox");
  EXPECT_EQ((*prox)->prox_mu(), 0.5);
}

TEST(MakeStrategyTest, UnknownNameListsTheKnownOnes) {
  auto s = MakeStrategy("fedfoo");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("\"fedfoo\""));
  EXPECT_THAT(s.status().message(),
              HasSubstr("fedavg, fedprox, fedavgm, fedadam, fedyogi, fedadagrad, median, "
                        "trimmed_mean, krum, multikrum"));
  for (std::string_view name : KnownStrategyNames()) {
    auto made = MakeStrategy(name);
    ASSERT_TRUE(made.ok()) << name << ": " << made.status().ToString();
    EXPECT_EQ((*made)->name(), name);
  }
}

TEST(MakeStrategyTest, FedProxNeedsAPositiveFiniteMu) {
  for (double mu : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto s = MakeStrategy("fedprox", StrategyOptions{.prox_mu = mu});
    ASSERT_FALSE(s.ok()) << mu;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("prox_mu"));
  }
}

}  // namespace
}  // namespace fedmesh
