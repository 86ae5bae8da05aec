#include "gossip/consensus.h"

#include <algorithm>
#include <array>
#include <cstddef>

#include "core/check.h"

namespace fedmesh {
namespace {

// Elements per block: 1024 doubles (8 KiB) of running sums stay in L1 while every model's
// slice streams past once, so each input float is read from memory exactly once.
constexpr size_t kBlock = 1024;

size_t CommonSize(const std::vector<std::span<const float>>& models) {
  FM_CHECK(!models.empty());
  const size_t n = models[0].size();
  for (const auto& m : models) FM_CHECK_EQ(m.size(), n);
  return n;
}

// mean[j] = (1/K) Σ_k models[k][begin + j] for j < len. Sums of floats in double are exact
// for any realistic K (53 vs 24 mantissa bits), so the mean is correctly rounded once.
void MeanBlock(const std::vector<std::span<const float>>& models, size_t begin, size_t len,
               double* mean) {
  std::fill(mean, mean + len, 0.0);
  for (const auto& m : models) {
    const float* x = m.data() + begin;
    for (size_t j = 0; j < len; ++j) mean[j] += static_cast<double>(x[j]);
  }
  const double k = static_cast<double>(models.size());
  for (size_t j = 0; j < len; ++j) mean[j] /= k;
}

}  // namespace

std::vector<float> Average(const std::vector<std::span<const float>>& models) {
  const size_t n = CommonSize(models);
  std::vector<float> out(n);
  std::array<double, kBlock> mean;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t len = std::min(kBlock, n - begin);
    MeanBlock(models, begin, len, mean.data());
    for (size_t j = 0; j < len; ++j) out[begin + j] = static_cast<float>(mean[j]);
  }
  return out;
}

double ConsensusDistance(const std::vector<std::span<const float>>& models) {
  if (models.empty()) return 0.0;
  const size_t n = CommonSize(models);
  // The average stays in double: near consensus (the regime this metric watches) the
  // distances are far below a float ulp of the weights, and a float average would drown
  // them in rounding error. Two passes over each block, deviation then square, rather
  // than mean(||x||²) − ||x̄||², which cancels catastrophically for the same reason.
  std::array<double, kBlock> mean;
  std::array<double, kBlock> sq;  // per-element partial sums: vectorise without reassociation
  double total = 0.0;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t len = std::min(kBlock, n - begin);
    MeanBlock(models, begin, len, mean.data());
    std::fill(sq.begin(), sq.begin() + len, 0.0);
    for (const auto& m : models) {
      const float* x = m.data() + begin;
      for (size_t j = 0; j < len; ++j) {
        const double d = static_cast<double>(x[j]) - mean[j];
        sq[j] += d * d;
      }
    }
    for (size_t j = 0; j < len; ++j) total += sq[j];
  }
  return total / static_cast<double>(models.size());
}

}  // namespace fedmesh
