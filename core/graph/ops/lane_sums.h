// Float reductions in 8 interleaved partial sums. Kernels are built without -ffast-math, so
// a plain `acc += p[i]` loop stays scalar (the compiler may not reorder the additions); 8
// independent lanes vectorise (AVX2: one register) and keep a fixed order, so results are
// the same on every run. The lanes are combined pairwise, then the tail.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace fedmesh::graph::ops {

constexpr int kSumLanes = 8;

inline float CombineLanes(const float* acc, float tail) {
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// sum p[i]
inline float LaneSum(const float* p, int64_t n) {
  float acc[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int j = 0; j < kSumLanes; ++j) acc[j] += p[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += p[i];
  return CombineLanes(acc, tail);
}

// *sum = sum (p[i] - k), *sum_sq = sum (p[i] - k)^2, in one pass: with k near the values'
// mean (a sample of them), the variance sum_sq/n - (sum/n)^2 keeps its precision.
inline void LaneShiftedSums(const float* p, int64_t n, float k, float* sum, float* sum_sq) {
  float a[kSumLanes] = {}, b[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int j = 0; j < kSumLanes; ++j) {
      const float d = p[i + j] - k;
      a[j] += d;
      b[j] += d * d;
    }
  float ta = 0.0f, tb = 0.0f;
  for (; i < n; ++i) {
    ta += p[i] - k;
    tb += (p[i] - k) * (p[i] - k);
  }
  *sum = CombineLanes(a, ta);
  *sum_sq = CombineLanes(b, tb);
}

// *sum_g = sum g[i], *sum_gx = sum g[i] * (x[i] - m)
inline void LaneSumAndDot(const float* g, const float* x, int64_t n, float m, float* sum_g, float* sum_gx) {
  float a[kSumLanes] = {}, b[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int j = 0; j < kSumLanes; ++j) {
      a[j] += g[i + j];
      b[j] += g[i + j] * (x[i + j] - m);
    }
  float ta = 0.0f, tb = 0.0f;
  for (; i < n; ++i) {
    ta += g[i];
    tb += g[i] * (x[i] - m);
  }
  *sum_g = CombineLanes(a, ta);
  *sum_gx = CombineLanes(b, tb);
}

}  // namespace fedmesh::graph::ops
