// Device-side shapes for the CUDA graph kernels: dims plus one or more stride sets, passed
// to kernels by value, that turn the flat row-major index of an element into its offset in
// each of several buffers (numpy broadcasting: stride 0 on a broadcast dim). Also the
// deterministic sums that run broadcasting backwards (a gradient summed over broadcast
// dims, ReduceSum): one result element per thread, warp or block, each summing its terms
// in an order fixed by the shapes alone, so two runs agree bit for bit (no float atomics).
// Host builders drop size-1 dims and merge dims every stride set walks contiguously, so
// the common cases (same shape, bias over rows) cost at most one or two divisions.
// Include only from CUDA sources.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/cuda/cuda_kernels.h"
#include "core/cuda/graph/cuda_op_kernel.h"
#include "core/graph/graph.h"
#include "core/status.h"

namespace fedmesh::graph::cuda_ops {

inline constexpr int kMaxRank = 8;

// Fails (at plan time, from InferShapes) when a shape has more dims than a kernel takes.
inline Status CheckRanks(const std::vector<Dims>& shapes, const std::string& label) {
  for (const Dims& d : shapes)
    if (d.size() > static_cast<size_t>(kMaxRank))
      return Status::Unimplemented(label + ": the CUDA kernel takes tensors of rank " +
                                   std::to_string(kMaxRank) + " at most, not " + DimsToString(d));
  return Status::OK();
}

template <int kSets>
struct StridedDims {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kSets][kMaxRank] = {};

  // Adds to off[s] the offset in set s of the element with row-major index `flat`.
  __device__ __forceinline__ void AddOffsets(int64_t flat, int64_t (&off)[kSets]) const {
#pragma unroll
    for (int k = kMaxRank - 1; k > 0; --k) {
      if (k >= rank) continue;
      const int64_t q = flat / dims[k];
      const int64_t d = flat - q * dims[k];
#pragma unroll
      for (int s = 0; s < kSets; ++s) off[s] += d * strides[s][k];
      flat = q;
    }
    if (rank > 0) {
#pragma unroll
      for (int s = 0; s < kSets; ++s) off[s] += flat * strides[s][0];
    }
  }
  __device__ __forceinline__ int64_t Offset(int64_t flat) const {
    static_assert(kSets == 1, "Offset is for one stride set");
    int64_t off[1] = {0};
    AddOffsets(flat, off);
    return off[0];
  }
};

// Row-major strides of dense dims.
inline std::vector<int64_t> DenseStrides(const Dims& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (size_t k = d.size(); k-- > 1;) s[k - 1] = s[k] * d[k];
  return s;
}

// Strides of `operand` in the index space of `out` (numpy alignment from the right): its
// dense strides, 0 where it is broadcast (its dim is 1 or missing).
inline std::vector<int64_t> BroadcastStrides(const Dims& operand, const Dims& out) {
  std::vector<int64_t> s(out.size(), 0);
  const std::vector<int64_t> dense = DenseStrides(operand);
  const size_t off = out.size() - operand.size();
  for (size_t k = 0; k < operand.size(); ++k) s[k + off] = operand[k] == 1 ? 0 : dense[k];
  return s;
}

// Dims with kSets stride sets over them, with size-1 dims dropped and adjacent dims merged
// where every set walks them as one (the element order stays row-major over `dims`).
template <int kSets>
StridedDims<kSets> MakeStrided(const Dims& dims, const std::array<std::vector<int64_t>, kSets>& strides) {
  std::vector<int64_t> d;
  std::array<std::vector<int64_t>, kSets> s;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1) continue;
    bool merge = !d.empty();
    for (int t = 0; t < kSets && merge; ++t) merge = s[t].back() == strides[t][k] * dims[k];
    if (merge) {
      d.back() *= dims[k];
      for (int t = 0; t < kSets; ++t) s[t].back() = strides[t][k];
    } else {
      d.push_back(dims[k]);
      for (int t = 0; t < kSets; ++t) s[t].push_back(strides[t][k]);
    }
  }
  FM_CHECK_LE(d.size(), static_cast<size_t>(kMaxRank));  // InferShapes checked the ranks
  StridedDims<kSets> r;
  r.rank = static_cast<int>(d.size());
  for (size_t k = 0; k < d.size(); ++k) {
    r.dims[k] = d[k];
    for (int t = 0; t < kSets; ++t) r.strides[t][k] = s[t][k];
  }
  return r;
}

// The output dims of a sum split into the dims a result element keeps (its index walks
// them row-major) and the dims it sums over, each with kSets stride sets. innermost_kept:
// the last dim that is not 1 is kept, so neighbouring results read neighbouring memory.
template <int kSets>
struct SumSplit {
  StridedDims<kSets> kept, summed;
  int64_t results = 1, terms = 1;
  bool innermost_kept = true;
};

// `reduced[k]`: out dim k is summed over. Sizes are `dims`; strides[t] for set t.
template <int kSets>
SumSplit<kSets> MakeSumSplit(const Dims& dims, const std::vector<bool>& reduced,
                             const std::array<std::vector<int64_t>, kSets>& strides) {
  Dims kd, rd;
  std::array<std::vector<int64_t>, kSets> ks, rs;
  SumSplit<kSets> p;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1) continue;
    const bool red = reduced[k];
    p.innermost_kept = !red;
    (red ? rd : kd).push_back(dims[k]);
    for (int t = 0; t < kSets; ++t) (red ? rs : ks)[t].push_back(strides[t][k]);
    (red ? p.terms : p.results) *= dims[k];
  }
  p.kept = MakeStrided<kSets>(kd, ks);
  p.summed = MakeStrided<kSets>(rd, rs);
  return p;
}

// The sums. A Term has `struct Base`, `Base Begin(int64_t j) const` (what result j's terms
// share) and `float At(const Base&, int64_t r) const` (its r-th term); result j gets
// dst[j] = (accumulate ? dst[j] : 0) + scale * sum_r At(Begin(j), r).

__device__ __forceinline__ void StoreSum(float* dst, int64_t j, float s, float scale, bool accumulate) {
  dst[j] = accumulate ? dst[j] + scale * s : scale * s;
}

// One thread per result, terms in order: few terms, or neighbouring results contiguous.
template <typename Term>
__global__ void ThreadSumKernel(Term t, int64_t results, int64_t terms, float scale, bool accumulate,
                                float* __restrict__ dst) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < results;
       j += int64_t{gridDim.x} * blockDim.x) {
    const typename Term::Base b = t.Begin(j);
    float s = 0.0f;
    for (int64_t r = 0; r < terms; ++r) s += t.At(b, r);
    StoreSum(dst, j, s, scale, accumulate);
  }
}

// Blocks of 32 neighbouring results (one per lane); warp w sums terms w, w + 8, ... and the
// 8 partials are added in warp order: coalesced reads when the results are the inner dims.
constexpr int kSumWarps = fedmesh::cuda::kBlockThreads / 32;

template <typename Term>
__global__ void ColumnSumKernel(Term t, int64_t results, int64_t terms, float scale, bool accumulate,
                                float* __restrict__ dst) {
  __shared__ float part[kSumWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t j0 = blockIdx.x * int64_t{32}; j0 < results; j0 += int64_t{gridDim.x} * 32) {
    const int64_t j = j0 + lane;
    float s = 0.0f;
    if (j < results) {
      const typename Term::Base b = t.Begin(j);
      for (int64_t r = warp; r < terms; r += kSumWarps) s += t.At(b, r);
    }
    part[warp][lane] = s;
    __syncthreads();
    if (warp == 0 && j < results) {
      float total = part[0][lane];
      for (int w = 1; w < kSumWarps; ++w) total += part[w][lane];
      StoreSum(dst, j, total, scale, accumulate);
    }
    __syncthreads();
  }
}

__device__ __forceinline__ float WarpSum(float s) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
  return s;  // in lane 0
}

// kGroup threads (32: a warp; kBlockThreads: the block) per result, striding over its
// terms, then a tree in a fixed order: when the summed dims are the inner ones.
template <typename Term, int kGroup>
__global__ void RowSumKernel(Term t, int64_t results, int64_t terms, float scale, bool accumulate,
                             float* __restrict__ dst) {
  constexpr int kGroups = fedmesh::cuda::kBlockThreads / kGroup;
  const int g = threadIdx.x / kGroup, lane = threadIdx.x % kGroup;
  // Every thread runs the same number of rounds, so the block-wide barriers are safe.
  for (int64_t j0 = blockIdx.x * int64_t{kGroups}; j0 < results; j0 += int64_t{gridDim.x} * kGroups) {
    const int64_t j = j0 + g;
    float s = 0.0f;
    if (j < results) {
      const typename Term::Base b = t.Begin(j);
      for (int64_t r = lane; r < terms; r += kGroup) s += t.At(b, r);
    }
    s = WarpSum(s);
    if constexpr (kGroup == 32) {
      if (lane == 0 && j < results) StoreSum(dst, j, s, scale, accumulate);
    } else {
      __shared__ float part[kSumWarps];
      if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
      __syncthreads();
      if (threadIdx.x == 0 && j < results) {
        float total = part[0];
        for (int w = 1; w < kSumWarps; ++w) total += part[w];
        StoreSum(dst, j, total, scale, accumulate);
      }
      __syncthreads();
    }
  }
}

// Queues the sums with the kernel that suits the split; which one depends on the shapes
// only, so a given shape always sums in the same order.
template <typename Term, int kSets>
void LaunchSums(const KernelCall& c, const fedmesh::cuda::LaunchConfig& l, const Term& t,
                const SumSplit<kSets>& split, float scale, bool accumulate, float* dst, const char* what) {
  using fedmesh::cuda::kBlockThreads;
  const int64_t m = split.results, r = split.terms;
  if (m == 0) return;
  if (r <= 16 || (split.innermost_kept && m >= 65536)) {
    ThreadSumKernel<Term><<<Blocks(l, m), kBlockThreads, 0, l.stream>>>(t, m, r, scale, accumulate, dst);
  } else if (split.innermost_kept) {
    ColumnSumKernel<Term><<<Blocks(l, (m + 31) / 32 * kBlockThreads), kBlockThreads, 0, l.stream>>>(
        t, m, r, scale, accumulate, dst);
  } else if (m >= 1024) {
    RowSumKernel<Term, 32><<<Blocks(l, m * 32), kBlockThreads, 0, l.stream>>>(t, m, r, scale, accumulate, dst);
  } else {
    RowSumKernel<Term, kBlockThreads><<<Blocks(l, m * kBlockThreads), kBlockThreads, 0, l.stream>>>(
        t, m, r, scale, accumulate, dst);
  }
  Launched(c, cudaGetLastError(), what);
}

}  // namespace fedmesh::graph::cuda_ops
