// The site's privacy ledger (node/record_privacy.h): budget checks, what the store keeps,
// damaged stored state, and --local-only's [privacy] overrides.
#include "node/record_privacy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace fedmesh {
namespace {

using ::testing::HasSubstr;

RecordPrivacyOptions DpSgd(double budget) {
  RecordPrivacyOptions o;
  o.mode = "dp-sgd";
  o.noise_multiplier = 1.0;
  o.delta = 1e-5;
  o.epsilon_budget = budget;
  return o;
}

TEST(RecordPrivacyLedger, SpendsLikeTheAccountantAndRefusesPastTheBudget) {
  auto ledger = RecordPrivacyLedger::Create(DpSgd(2.0));
  ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
  const double q = 256.0 / 60000.0;
  // The reference: the accountant itself (tested against dp-accounting in crypto_tests).
  auto acc = RdpAccountant::Create();
  ASSERT_TRUE(acc.ok());
  ASSERT_TRUE(acc->Compose(q, 1.0, 235).ok());
  const double one_epoch = acc->Epsilon(1e-5)->epsilon;
  ASSERT_TRUE(ledger->CheckBudget(q, 235).ok());
  ASSERT_TRUE(ledger->Spend(q, 235).ok());
  EXPECT_DOUBLE_EQ(ledger->epsilon(), one_epoch);
  EXPECT_EQ(ledger->steps(), 235);
  // A hundred more epochs would pass 2 (15 epochs in all spend about 1.56).
  ASSERT_GT(ledger->EpsilonAfter(q, 23500).value(), 2.0);
  const Status s = ledger->CheckBudget(q, 23500);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("privacy budget"));
  EXPECT_THAT(s.message(), HasSubstr("over its budget of 2"));
  // No budget: never refused, still counted.
  auto open = RecordPrivacyLedger::Create(DpSgd(0.0));
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE(open->CheckBudget(q, 1000000).ok());
}

TEST(RecordPrivacyLedger, StoredStateRoundTripsExactlyAndDamageIsCorruption) {
  auto ledger = RecordPrivacyLedger::Create(DpSgd(0.0));
  ASSERT_TRUE(ledger.ok());
  ASSERT_TRUE(ledger->Spend(0.01, 123).ok());
  ASSERT_TRUE(ledger->Spend(0.02, 7).ok());
  const auto attributes = ledger->ToAttributes();
  auto restored = RecordPrivacyLedger::Create(DpSgd(0.0));
  ASSERT_TRUE(restored.ok());
  ASSERT_TRUE(restored->FromAttributes(attributes).ok());
  EXPECT_EQ(restored->epsilon(), ledger->epsilon());  // bit for bit: %.17g round-trips
  EXPECT_EQ(restored->steps(), 130);
  EXPECT_TRUE(restored->FromAttributes({}).ok());  // nothing stored: nothing spent

  auto broken = attributes;
  broken["privacy/rdp"] = "0.1,abc";
  auto fresh = RecordPrivacyLedger::Create(DpSgd(0.0));
  Status s = fresh->FromAttributes(broken);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("will not train"));
  broken = attributes;
  broken["privacy/rdp"] = "0.1,0.2";  // not one value per order
  EXPECT_EQ(fresh->FromAttributes(broken).code(), StatusCode::kCorruption);
  broken = attributes;
  broken.erase("privacy/steps");
  EXPECT_EQ(fresh->FromAttributes(broken).code(), StatusCode::kCorruption);
  broken = attributes;
  broken["privacy/steps"] = "-4";
  EXPECT_EQ(fresh->FromAttributes(broken).code(), StatusCode::kCorruption);
}

TEST(RecordPrivacyLedger, TrainerOptionsAddNoiseOfTheAskedScale) {
  auto ledger = RecordPrivacyLedger::Create(DpSgd(0.0));
  ASSERT_TRUE(ledger.ok());
  auto dp = ledger->TrainerOptions();
  ASSERT_TRUE(dp.ok());
  EXPECT_TRUE(dp->enabled);
  std::vector<float> x(200000, 0.0f);
  dp->add_noise(x, 2.0);
  double sum = 0, sq = 0;
  for (float v : x) sum += v, sq += double(v) * v;
  const double mean = sum / x.size(), sd = std::sqrt(sq / x.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sd, 2.0, 0.02);
}

TEST(RecordPrivacyOverrides, OnlyPrivacyKeysAndTheirChecks) {
  auto ok = RecordPrivacyFromOverrides({"privacy.mode=dp-sgd", "privacy.noise_multiplier=0.8"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->enabled());
  EXPECT_DOUBLE_EQ(ok->noise_multiplier, 0.8);
  EXPECT_FALSE(RecordPrivacyFromOverrides({}).value().enabled());
  EXPECT_THAT(RecordPrivacyFromOverrides({"train.lr=1"}).status().message(), HasSubstr("[train]"));
  EXPECT_THAT(RecordPrivacyFromOverrides({"privacy.clip=-1"}).status().message(),
              HasSubstr("[privacy] clip"));
  EXPECT_THAT(RecordPrivacyFromOverrides({"privacy.clipp=1"}).status().message(), HasSubstr("clip"));
}

}  // namespace
}  // namespace fedmesh
