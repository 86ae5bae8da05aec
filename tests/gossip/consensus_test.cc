#include "gossip/consensus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"

namespace fedmesh {
namespace {

using Models = std::vector<std::vector<float>>;

std::vector<std::span<const float>> Spans(const Models& models) {
  return {models.begin(), models.end()};
}

Models RandomModels(size_t count, size_t size, uint64_t seed) {
  Rng rng(seed);
  Models m(count, std::vector<float>(size));
  for (auto& model : m) {
    for (auto& v : model) v = static_cast<float>(rng.Normal());
  }
  return m;
}

// The definition, term by term, in long double.
long double ReferenceDistance(const Models& models) {
  const size_t n = models[0].size();
  long double total = 0;
  for (size_t j = 0; j < n; ++j) {
    long double mean = 0;
    for (const auto& m : models) mean += m[j];
    mean /= models.size();
    for (const auto& m : models) total += (m[j] - mean) * (m[j] - mean);
  }
  return total / models.size();
}

TEST(AverageTest, IsTheElementwiseMean) {
  const Models models = {{1, 2, -3}, {3, 6, 5}};
  EXPECT_THAT(Average(Spans(models)), ::testing::ElementsAre(2.0f, 4.0f, 1.0f));
}

TEST(AverageTest, AccumulatesInDouble) {
  // In float, 1e8 + 1 rounds back to 1e8 and the 1 is lost; in double it survives.
  const Models models = {{1e8f}, {1.0f}, {-1e8f}};
  EXPECT_EQ(Average(Spans(models))[0], static_cast<float>(1.0 / 3.0));
}

TEST(ConsensusDistanceTest, IdenticalModelsAreAtZero) {
  const Models one = RandomModels(1, 3000, 7);
  const Models models(5, one[0]);
  EXPECT_EQ(ConsensusDistance(Spans(models)), 0.0);
  EXPECT_EQ(ConsensusDistance(Spans(one)), 0.0);
}

TEST(ConsensusDistanceTest, NoModelsIsZero) { EXPECT_EQ(ConsensusDistance({}), 0.0); }

TEST(ConsensusDistanceTest, KnownTwoVectorExample) {
  // Average (2, 2, 1); each model is at squared distance 1 + 0 + 4 = 5; the mean is 5.
  const Models models = {{1, 2, 3}, {3, 2, -1}};
  EXPECT_EQ(ConsensusDistance(Spans(models)), 5.0);
}

TEST(ConsensusDistanceTest, KnownThreeVectorExample) {
  // Average (1, 1); squared distances 2, 5, 5; mean 4.
  const Models models = {{0, 0}, {3, 0}, {0, 3}};
  EXPECT_EQ(ConsensusDistance(Spans(models)), 4.0);
}

TEST(ConsensusDistanceTest, ScalesWithTheSquareOfTheModels) {
  const Models x = RandomModels(6, 2500, 11);  // 2500: blocks plus a ragged tail
  const double base = ConsensusDistance(Spans(x));
  ASSERT_GT(base, 0.0);
  for (float c : {2.0f, 0.5f, 3.0f, -1.7f}) {
    Models scaled = x;
    for (auto& m : scaled) {
      for (auto& v : m) v *= c;
    }
    const double expected = static_cast<double>(c) * c * base;
    // Powers of two scale floats exactly, so the result must match to the last bit; other
    // factors round each scaled weight to float (relative 2^-24).
    const double tolerance = (c == 2.0f || c == 0.5f) ? 0.0 : 1e-6 * expected;
    EXPECT_NEAR(ConsensusDistance(Spans(scaled)), expected, tolerance) << "c = " << c;
  }
}

TEST(ConsensusDistanceTest, MatchesTheDefinitionAcrossBlockBoundaries) {
  for (size_t size : {1u, 1023u, 1024u, 1025u, 5000u}) {
    const Models models = RandomModels(4, size, size);
    EXPECT_NEAR(ConsensusDistance(Spans(models)), static_cast<double>(ReferenceDistance(models)),
                1e-12 * static_cast<double>(ReferenceDistance(models)))
        << "size " << size;
  }
}

TEST(ConsensusDistanceTest, StaysAccurateNearConsensus) {
  // Weights around 1000 that disagree by ~1e-3: a float average (ulp ~6e-5) would be
  // off by a sizeable fraction of each deviation.
  Rng rng(3);
  Models models(8, std::vector<float>(4096));
  for (auto& m : models) {
    for (size_t j = 0; j < m.size(); ++j) {
      m[j] = static_cast<float>(1000.0 + 0.01 * static_cast<double>(j % 7) + 1e-3 * rng.Normal());
    }
  }
  const long double ref = ReferenceDistance(models);
  EXPECT_NEAR(ConsensusDistance(Spans(models)), static_cast<double>(ref),
              1e-9 * static_cast<double>(ref));
}

TEST(ConsensusDistanceDeathTest, MismatchedSizesAreAProgrammerError) {
  const Models models = {{1, 2, 3}, {1, 2}};
  EXPECT_DEATH(ConsensusDistance(Spans(models)), "check failed.*\\(2 vs 3\\)");
  EXPECT_DEATH(Average(Spans(models)), "check failed");
  EXPECT_DEATH(Average({}), "check failed");
}

}  // namespace
}  // namespace fedmesh
