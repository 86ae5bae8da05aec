// Float reductions in 8 interleaved partial sums. Kernels are built without -ffast-math, so
// a plain `acc += p[i]` loop stays scalar (the compiler may not reorder the additions); 8
// independent lanes vectorise and keep a fixed order, so results are the same on every run.
// The lanes are one GCC vector (AVX2: one register; SSE: two), written with the vector
// extension because lane loops with a select in them stayed scalar; they are combined
// pairwise, then the tail.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace fedmesh::graph::ops {

constexpr int kSumLanes = 8;
typedef float Lanes __attribute__((vector_size(kSumLanes * sizeof(float))));

// Unaligned load. An out parameter, not a return value: without AVX enabled (FEDMESH_ARCH_FLAGS
// emptied) a 32-byte vector passed by value draws GCC's ABI-change warning.
inline void Load(Lanes& v, const float* p) { std::memcpy(&v, p, sizeof v); }

inline float CombineLanes(const Lanes& v, float tail) {
  float acc[kSumLanes];
  std::memcpy(acc, &v, sizeof acc);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// sum p[i]
inline float LaneSum(const float* p, int64_t n) {
  Lanes acc = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    Lanes v;
    Load(v, p + i);
    acc += v;
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += p[i];
  return CombineLanes(acc, tail);
}

// *sum = sum (p[i] - k), *sum_sq = sum (p[i] - k)^2, in one pass: with k near the values'
// mean (a sample of them), the variance sum_sq/n - (sum/n)^2 keeps its precision.
inline void LaneShiftedSums(const float* p, int64_t n, float k, float* sum, float* sum_sq) {
  Lanes a = {}, b = {};
  const Lanes kv = Lanes{} + k;
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    Lanes d;
    Load(d, p + i);
    d -= kv;
    a += d;
    b += d * d;
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
  Lanes a = {}, b = {};
  const Lanes mv = Lanes{} + m;
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    Lanes gv, xv;
    Load(gv, g + i);
    Load(xv, x + i);
    a += gv;
    b += gv * (xv - mv);
  }
  float ta = 0.0f, tb = 0.0f;
  for (; i < n; ++i) {
    ta += g[i];
    tb += g[i] * (x[i] - m);
  }
  *sum_g = CombineLanes(a, ta);
  *sum_gx = CombineLanes(b, tb);
}

// The same over g masked by a Relu's output r: g[i] where r[i] > 0, else 0 (the sums
// LaneSumAndDot gives over the Relu's input gradient, up to rounding).
inline void LaneMaskedSumAndDot(const float* g, const float* r, const float* x, int64_t n, float m,
                                float* sum_g, float* sum_gx) {
  Lanes a = {}, b = {};
  const Lanes zero = {}, mv = zero + m;
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    Lanes rv, gv, xv;
    Load(rv, r + i);
    Load(gv, g + i);
    Load(xv, x + i);
    const Lanes gm = rv > zero ? gv : zero;
    a += gm;
    b += gm * (xv - mv);
  }
  float ta = 0.0f, tb = 0.0f;
  for (; i < n; ++i) {
    const float v = g[i];
    const float gm = r[i] > 0.0f ? v : 0.0f;
    ta += gm;
    tb += gm * (x[i] - m);
  }
  *sum_g = CombineLanes(a, ta);
  *sum_gx = CombineLanes(b, tb);
}

}  // namespace fedmesh::graph::ops
