#include "aggregator/weighted_average.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace fedmesh {
namespace {

// Elements per block: the 1024 double accumulators (8 KiB) stay in L1 while each update's
// slice streams through once.
constexpr size_t kBlock = 1024;

std::string FormatWeight(double w) { return FormatNumber(w); }

}  // namespace

// The common all-finite case runs as a branch-free, vectorisable scan of the exponent bits;
// only a block that contains a bad value is searched element by element.
size_t FirstNonFinite(std::span<const float> x) {
  constexpr uint32_t kExponent = 0x7f800000u;  // all ones: inf or NaN
  for (size_t begin = 0; begin < x.size(); begin += kBlock) {
    const size_t len = std::min(kBlock, x.size() - begin);
    const float* p = x.data() + begin;
    uint32_t bad = 0;
    for (size_t j = 0; j < len; ++j) {
      uint32_t bits;
      std::memcpy(&bits, &p[j], sizeof(bits));
      bad |= static_cast<uint32_t>((bits & kExponent) == kExponent);
    }
    if (bad != 0) {
      for (size_t j = 0; j < len; ++j) {
        if (!std::isfinite(p[j])) return begin + j;
      }
    }
  }
  return x.size();
}

std::string DescribeNonFinite(float v) {
  if (std::isnan(v)) return "NaN";
  return v > 0 ? "+inf" : "-inf";
}

Status WeightedAverage(const std::vector<std::span<const float>>& updates,
                       const std::vector<double>& weights, std::span<float> out) {
  if (updates.empty()) return Status::InvalidArgument("no updates to average");
  if (weights.size() != updates.size()) {
    return Status::InvalidArgument("got " + std::to_string(updates.size()) + " updates but " +
                                   std::to_string(weights.size()) +
                                   " weights; need one weight per update");
  }

  // Validate everything before writing: `out` is often the global model itself, and a
  // single malformed update must not leave it half-overwritten.
  double max_weight = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0.0) {
      return Status::InvalidArgument("weight of update " + std::to_string(i) + " is " +
                                     FormatWeight(weights[i]) +
                                     "; weights must be finite and >= 0");
    }
    max_weight = std::max(max_weight, weights[i]);
  }
  if (max_weight == 0.0) {
    return Status::InvalidArgument("all " + std::to_string(weights.size()) +
                                   " weights are 0; at least one update needs a positive weight");
  }
  for (size_t i = 0; i < updates.size(); ++i) {
    if (updates[i].size() != out.size()) {
      return Status::InvalidArgument("update " + std::to_string(i) + " has " +
                                     std::to_string(updates[i].size()) +
                                     " values but the model has " + std::to_string(out.size()));
    }
  }
  // Zero-weight updates are checked too: a non-finite update is malformed whatever its
  // weight, and the caller should learn which client sent it. One update per thread; the
  // first bad one in input order is reported.
  std::vector<size_t> first_bad(updates.size());
  const int64_t count = static_cast<int64_t>(updates.size());
#pragma omp parallel for schedule(dynamic) if (out.size() * updates.size() >= (size_t{1} << 18))
  for (int64_t i = 0; i < count; ++i) first_bad[i] = FirstNonFinite(updates[i]);
  for (size_t i = 0; i < updates.size(); ++i) {
    if (first_bad[i] != updates[i].size()) {
      return Status::InvalidArgument("update " + std::to_string(i) + " has a non-finite value (" +
                                     DescribeNonFinite(updates[i][first_bad[i]]) + ") at index " +
                                     std::to_string(first_bad[i]));
    }
  }

  // Scale weights by a power of two so the largest is in [0.5, 1): exact (only the
  // exponent changes) and it keeps Σ w_i u_i finite for any finite weights, even 1e300.
  int exponent = 0;
  std::frexp(max_weight, &exponent);
  std::vector<const float*> inputs;
  std::vector<double> w;
  inputs.reserve(updates.size());
  w.reserve(updates.size());
  double total = 0.0;
  for (size_t i = 0; i < updates.size(); ++i) {
    if (weights[i] == 0.0) continue;  // skipped, not multiplied by 0: saves a pass
    inputs.push_back(updates[i].data());
    w.push_back(std::ldexp(weights[i], -exponent));
    total += w.back();
  }

  // Block-wise: every update's slice is read before `out`'s slice is written, which is what
  // makes out == updates[k] safe. The inner loop is a plain multiply-add over contiguous
  // arrays that the compiler vectorises (float -> double convert + FMA).
  const size_t n = out.size();
  // Blocks are independent: split them over the OpenMP threads (small models stay serial).
  const int64_t blocks = static_cast<int64_t>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (n * inputs.size() >= (size_t{1} << 18))
  for (int64_t b = 0; b < blocks; ++b) {
    std::array<double, kBlock> acc;
    const size_t begin = static_cast<size_t>(b) * kBlock;
    const size_t len = std::min(kBlock, n - begin);
    std::fill(acc.begin(), acc.begin() + len, 0.0);
    for (size_t k = 0; k < inputs.size(); ++k) {
      const float* x = inputs[k] + begin;
      const double wk = w[k];
      for (size_t j = 0; j < len; ++j) acc[j] += wk * static_cast<double>(x[j]);
    }
    float* o = out.data() + begin;
    for (size_t j = 0; j < len; ++j) o[j] = static_cast<float>(acc[j] / total);
  }
  return Status::OK();
}

}  // namespace fedmesh
