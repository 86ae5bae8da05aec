#include "aggregator/weighted_average.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.h"

namespace fedmesh {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Updates = std::vector<std::vector<float>>;

std::vector<std::span<const float>> Spans(const Updates& updates) {
  return {updates.begin(), updates.end()};
}

// Σ w_i u_i / Σ w_i in long double, element by element.
std::vector<double> Reference(const Updates& updates, const std::vector<double>& weights) {
  std::vector<double> ref(updates[0].size());
  long double total = 0;
  for (double w : weights) total += w;
  for (size_t j = 0; j < ref.size(); ++j) {
    long double acc = 0;
    for (size_t i = 0; i < updates.size(); ++i)
      acc += static_cast<long double>(weights[i]) * updates[i][j];
    ref[j] = static_cast<double>(acc / total);
  }
  return ref;
}

class WeightedAverageErrorTest : public ::testing::Test {
 protected:
  // Runs WeightedAverage expecting InvalidArgument, and checks `out` was not touched.
  Status ExpectInvalid(const Updates& updates, const std::vector<double>& weights,
                       size_t out_size = 4) {
    std::vector<float> out(out_size, -7.0f);
    Status s = WeightedAverage(Spans(updates), weights, out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    for (float v : out) EXPECT_EQ(v, -7.0f) << "out must be left untouched on error";
    return s;
  }
  const Updates good_ = {{1, 2, 3, 4}, {5, 6, 7, 8}, {0, 0, 0, 0}};
};

TEST(WeightedAverageTest, WeightedExampleIsExact) {
  const Updates updates = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  std::vector<float> out(4);
  ASSERT_TRUE(WeightedAverage(Spans(updates), {1.0, 3.0}, out).ok());
  // (1*1 + 3*5) / 4 = 4, (2 + 18) / 4 = 5, ...
  EXPECT_THAT(out, ElementsAre(4.0f, 5.0f, 6.0f, 7.0f));
}

TEST(WeightedAverageTest, ExampleCountsAsWeights) {
  // Three clients with 10, 30 and 60 examples.
  const Updates updates = {{10, -1}, {0, 1}, {5, 0.5f}};
  std::vector<float> out(2);
  ASSERT_TRUE(WeightedAverage(Spans(updates), {10, 30, 60}, out).ok());
  EXPECT_THAT(out, ElementsAre(4.0f, 0.5f));  // (100 + 0 + 300)/100, (-10 + 30 + 30)/100
}

TEST(WeightedAverageTest, ZeroWeightUpdateIsIgnored) {
  const Updates updates = {{1, -2, 3}, {1000, 1000, 1000}};
  std::vector<float> out(3);
  ASSERT_TRUE(WeightedAverage(Spans(updates), {2.0, 0.0}, out).ok());
  EXPECT_THAT(out, ElementsAre(1.0f, -2.0f, 3.0f));
}

TEST(WeightedAverageTest, ExtremeWeightsNeitherOverflowNorUnderflow) {
  const Updates updates = {{2, 4}, {4, 8}};
  std::vector<float> out(2);
  ASSERT_TRUE(WeightedAverage(Spans(updates), {1e300, 1e300}, out).ok());
  EXPECT_THAT(out, ElementsAre(3.0f, 6.0f));
  ASSERT_TRUE(WeightedAverage(Spans(updates), {1e-310, 3e-310}, out).ok());  // subnormal
  EXPECT_THAT(out, ElementsAre(3.5f, 7.0f));
}

TEST(WeightedAverageTest, OutMayBeOneOfTheUpdates) {
  Rng rng(5);
  Updates updates(3, std::vector<float>(3000));
  for (auto& u : updates) {
    for (auto& v : u) v = static_cast<float>(rng.Normal());
  }
  const std::vector<double> weights = {1, 2, 3};
  std::vector<float> expected(3000);
  ASSERT_TRUE(WeightedAverage(Spans(updates), weights, expected).ok());
  // Average into the first update's own buffer, as a server averaging into its model would.
  std::vector<std::span<const float>> spans = Spans(updates);
  ASSERT_TRUE(WeightedAverage(spans, weights, std::span<float>(updates[0])).ok());
  EXPECT_EQ(updates[0], expected);
}

TEST(WeightedAverageTest, MatchesReferenceAcrossBlockBoundaries) {
  for (size_t size : {1u, 1023u, 1024u, 1025u, 3000u}) {
    Rng rng(size);
    Updates updates(7, std::vector<float>(size));
    std::vector<double> weights;
    for (auto& u : updates) {
      for (auto& v : u) v = static_cast<float>(rng.Normal());
      weights.push_back(rng.Uniform(0.0, 10.0));
    }
    std::vector<float> out(size);
    ASSERT_TRUE(WeightedAverage(Spans(updates), weights, out).ok());
    const std::vector<double> ref = Reference(updates, weights);
    for (size_t j = 0; j < size; ++j) {
      // Correctly rounded to float: within half a float ulp of the exact value.
      ASSERT_NEAR(out[j], ref[j], std::abs(ref[j]) * 0x1p-24 + 1e-30)
          << "size " << size << " j " << j;
    }
  }
}

TEST(WeightedAverageTest, ThousandClientsStayWithin1e6OfDoubleReference) {
  constexpr size_t kClients = 1000, kSize = 10000;
  Rng rng(2024);
  Updates updates(kClients, std::vector<float>(kSize));
  std::vector<double> weights(kClients);
  for (size_t i = 0; i < kClients; ++i) {
    // A shared component plus client drift, so the average is not simply ~0.
    for (size_t j = 0; j < kSize; ++j) {
      updates[i][j] = static_cast<float>(std::sin(0.001 * static_cast<double>(j)) + rng.Normal());
    }
    weights[i] = static_cast<double>(1 + rng.UniformInt(600));  // examples per client
  }
  std::vector<float> out(kSize);
  ASSERT_TRUE(WeightedAverage(Spans(updates), weights, out).ok());

  std::vector<double> ref(kSize, 0.0);
  double total = 0;
  for (size_t i = 0; i < kClients; ++i) {
    total += weights[i];
    for (size_t j = 0; j < kSize; ++j) ref[j] += weights[i] * static_cast<double>(updates[i][j]);
  }
  double max_err = 0;
  for (size_t j = 0; j < kSize; ++j) max_err = std::max(max_err, std::abs(out[j] - ref[j] / total));
  EXPECT_LE(max_err, 1e-6);
}

TEST_F(WeightedAverageErrorTest, NoUpdates) {
  Status s = ExpectInvalid({}, {});
  EXPECT_THAT(s.message(), HasSubstr("no updates"));
}

TEST_F(WeightedAverageErrorTest, WeightCountMismatch) {
  Status s = ExpectInvalid(good_, {1, 2});
  EXPECT_THAT(s.message(), HasSubstr("3 updates but 2 weights"));
}

TEST_F(WeightedAverageErrorTest, SizeMismatchNamesUpdateAndBothSizes) {
  Updates updates = good_;
  updates[2] = {1, 2, 3};
  Status s = ExpectInvalid(updates, {1, 1, 1});
  EXPECT_EQ(s.message(), "update 2 has 3 values but the model has 4");
  // The output size is the model size too.
  s = ExpectInvalid(good_, {1, 1, 1}, 5);
  EXPECT_EQ(s.message(), "update 0 has 4 values but the model has 5");
}

TEST_F(WeightedAverageErrorTest, NegativeWeight) {
  Status s = ExpectInvalid(good_, {1, -0.5, 1});
  EXPECT_THAT(s.message(),
              HasSubstr("weight of update 1 is -0.5; weights must be finite and >= 0"));
}

TEST_F(WeightedAverageErrorTest, NonFiniteWeight) {
  EXPECT_THAT(ExpectInvalid(good_, {1, 1, std::numeric_limits<double>::quiet_NaN()}).message(),
              HasSubstr("weight of update 2 is nan"));
  EXPECT_THAT(ExpectInvalid(good_, {std::numeric_limits<double>::infinity(), 1, 1}).message(),
              HasSubstr("weight of update 0 is inf"));
}

TEST_F(WeightedAverageErrorTest, AllWeightsZero) {
  Status s = ExpectInvalid(good_, {0, 0, 0});
  EXPECT_THAT(s.message(), HasSubstr("all 3 weights are 0"));
}

TEST_F(WeightedAverageErrorTest, NonFiniteValueNamesUpdateAndIndex) {
  Updates updates = good_;
  updates[1][2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ExpectInvalid(updates, {1, 1, 1}).message(),
            "update 1 has a non-finite value (NaN) at index 2");

  // Deep inside a large update, in a later block, and with weight 0: still malformed.
  Updates big(2, std::vector<float>(5000, 1.0f));
  big[1][4321] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(ExpectInvalid(big, {1, 0}, 5000).message(),
            "update 1 has a non-finite value (-inf) at index 4321");
}

}  // namespace
}  // namespace fedmesh
