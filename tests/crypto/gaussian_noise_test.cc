// GaussianNoise (crypto/dp/gaussian_noise.h): a seeded stream replays exactly and differs by
// seed; two OS-keyed streams differ; 400,000 samples have mean 0, variance 1, the normal
// 1-sigma and 2-sigma masses, and Add scales them by its stddev; Add's parallel path takes
// the same stream words as Standard() one by one, whatever the thread count.
#include "crypto/dp/gaussian_noise.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <vector>

namespace fedmesh {
namespace {

std::vector<double> Draw(GaussianNoise& g, size_t n) {
  std::vector<double> v(n);
  for (double& x : v) x = g.Standard();
  return v;
}

TEST(GaussianNoise, SeededStreamsReplayAndDifferBySeed) {
  auto a = GaussianNoise::Create(7).value();
  auto b = GaussianNoise::Create(7).value();
  auto c = GaussianNoise::Create(8).value();
  const auto va = Draw(a, 1000), vb = Draw(b, 1000), vc = Draw(c, 1000);
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  auto os1 = GaussianNoise::Create().value();
  auto os2 = GaussianNoise::Create().value();
  EXPECT_NE(Draw(os1, 100), Draw(os2, 100));
}

TEST(GaussianNoise, SamplesAreStandardNormal) {
  auto g = GaussianNoise::Create(1).value();
  const size_t n = 400000;
  const auto v = Draw(g, n);
  double sum = 0, sq = 0;
  size_t in1 = 0, in2 = 0;
  for (double x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += x * x;
    in1 += std::abs(x) < 1;
    in2 += std::abs(x) < 2;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  // Standard errors: mean 1/sqrt(n) = 0.0016, variance sqrt(2/n) = 0.0022; 5 of each.
  EXPECT_NEAR(mean, 0.0, 0.008);
  EXPECT_NEAR(var, 1.0, 0.011);
  EXPECT_NEAR(static_cast<double>(in1) / n, 0.682689, 0.004);
  EXPECT_NEAR(static_cast<double>(in2) / n, 0.954500, 0.002);
}

TEST(GaussianNoise, AddScalesByTheStandardDeviation) {
  auto g = GaussianNoise::Create(2).value();
  std::vector<float> x(200000, 5.0f);
  g.Add(x, 0.0);
  EXPECT_EQ(x, std::vector<float>(200000, 5.0f));
  g.Add(x, 3.0);
  double sum = 0, sq = 0;
  for (float v : x) {
    sum += v - 5.0;
    sq += (v - 5.0) * (v - 5.0);
  }
  EXPECT_NEAR(sum / x.size(), 0.0, 0.04);
  EXPECT_NEAR(std::sqrt(sq / x.size()), 3.0, 0.03);
}

TEST(GaussianNoise, ParallelAddTakesTheStreamInOrderForAnyThreadCount) {
  // Odd length after an odd draw: a spare first, whole pairs split over threads, one left.
  const size_t n = 2 * GaussianNoise::kParallelPairs + 1001;
  auto reference = GaussianNoise::Create(11).value();
  reference.Standard();
  std::vector<double> expect(n);
  for (double& v : expect) v = reference.Standard();
  const double after = reference.Standard();
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    auto g = GaussianNoise::Create(11).value();
    g.Standard();
    std::vector<float> x(n, 0.0f);
    g.Add(x, 1.0);
    // The stream goes on where Standard() one by one would be.
    EXPECT_EQ(g.Standard(), after);
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(x[i], expect[i], 1e-5) << i;
    runs.push_back(std::move(x));
  }
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

}  // namespace
}  // namespace fedmesh
