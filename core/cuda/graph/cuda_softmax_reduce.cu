// Softmax, LogSoftmax, ReduceMean and ReduceSum on the GPU (CPU: core/graph/ops/softmax.cc,
// reduce.cc), with the CPU kernels' attribute semantics (below opset 13 Softmax coerces
// the input to 2-D at `axis`; reductions take axes from the attribute or the constant
// input, keepdims, noop_with_empty_axes).
// Softmax over the innermost extent (the usual case, and every opset < 13 one) runs a warp
// per row, coalesced; over an outer axis, a thread per (outer, inner) column, whose
// neighbours read neighbouring memory. Sums are in float in a fixed order (the CPU sums
// the exponentials in double; float keeps well within 1e-6 relative for any row length
// a model has). Reductions use cuda_shape.h's fixed-order sums. Nothing uses atomics, so
// every result repeats bit for bit.
#include <cmath>
#include <cstdint>
#include <string>

#include "core/cuda/graph/cuda_op_kernel.h"
#include "core/cuda/graph/cuda_ops.h"
#include "core/cuda/graph/cuda_shape.h"

namespace fedmesh::graph::cuda_ops {
namespace {

using fedmesh::cuda::kBlockThreads;
using fedmesh::cuda::LaunchConfig;

constexpr int kWarpsPerBlock = kBlockThreads / 32;

// Butterfly reductions: every lane ends with the same value (float + and max commute).
__device__ __forceinline__ float WarpAllSum(float s) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
  return s;
}
__device__ __forceinline__ float WarpAllMax(float m) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  return m;
}

// Rows of `len` contiguous elements, a warp per row.
__global__ void SoftmaxRowsForwardKernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                                         int64_t len, bool take_log) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32; row < rows;
       row += int64_t{gridDim.x} * kWarpsPerBlock) {
    const float* xr = x + row * len;
    float* yr = y + row * len;
    float mx = -INFINITY;
    for (int64_t j = lane; j < len; j += 32) mx = fmaxf(mx, xr[j]);
    mx = WarpAllMax(mx);
    float s = 0.0f;
    for (int64_t j = lane; j < len; j += 32) s += expf(xr[j] - mx);
    const float lse = mx + logf(WarpAllSum(s));
    for (int64_t j = lane; j < len; j += 32) {
      const float v = xr[j] - lse;
      yr[j] = take_log ? v : expf(v);
    }
  }
}

__global__ void SoftmaxRowsBackwardKernel(const float* __restrict__ y, const float* __restrict__ dy,
                                          float* __restrict__ dx, int64_t rows, int64_t len, bool take_log) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32; row < rows;
       row += int64_t{gridDim.x} * kWarpsPerBlock) {
    const int64_t base = row * len;
    float s = 0.0f;
    for (int64_t j = lane; j < len; j += 32) s += take_log ? dy[base + j] : dy[base + j] * y[base + j];
    s = WarpAllSum(s);
    for (int64_t j = lane; j < len; j += 32) {
      const int64_t p = base + j;
      dx[p] += take_log ? dy[p] - expf(y[p]) * s : y[p] * (dy[p] - s);
    }
  }
}

// outer x len x inner with inner > 1: a thread per (outer, inner) column.
__global__ void SoftmaxColumnsForwardKernel(const float* __restrict__ x, float* __restrict__ y, int64_t outer,
                                            int64_t len, int64_t inner, bool take_log) {
  const int64_t n = outer * inner;
  FM_GRID_STRIDE(t, n) {
    const int64_t o = t / inner;
    const int64_t base = o * len * inner + (t - o * inner);
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; ++j) mx = fmaxf(mx, x[base + j * inner]);
    float s = 0.0f;
    for (int64_t j = 0; j < len; ++j) s += expf(x[base + j * inner] - mx);
    const float lse = mx + logf(s);
    for (int64_t j = 0; j < len; ++j) {
      const float v = x[base + j * inner] - lse;
      y[base + j * inner] = take_log ? v : expf(v);
    }
  }
}

__global__ void SoftmaxColumnsBackwardKernel(const float* __restrict__ y, const float* __restrict__ dy,
                                             float* __restrict__ dx, int64_t outer, int64_t len, int64_t inner,
                                             bool take_log) {
  const int64_t n = outer * inner;
  FM_GRID_STRIDE(t, n) {
    const int64_t o = t / inner;
    const int64_t base = o * len * inner + (t - o * inner);
    float s = 0.0f;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t p = base + j * inner;
      s += take_log ? dy[p] : dy[p] * y[p];
    }
    for (int64_t j = 0; j < len; ++j) {
      const int64_t p = base + j * inner;
      dx[p] += take_log ? dy[p] - expf(y[p]) * s : y[p] * (dy[p] - s);
    }
  }
}

class CudaSoftmax final : public CudaOpKernel {
 public:
  CudaSoftmax(std::unique_ptr<OpKernel> cpu, bool log, int64_t axis, bool coerce_2d)
      : CudaOpKernel(std::move(cpu)), log_(log), axis_(axis), coerce_(coerce_2d) {}

  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    int64_t outer, len, inner;
    Extents(*c.in_dims[0], &outer, &len, &inner);
    if (len == 0 || outer * inner == 0) return Status::OK();
    if (inner == 1) {
      SoftmaxRowsForwardKernel<<<Blocks(l, outer * 32), kBlockThreads, 0, l.stream>>>(c.in[0], c.out[0], outer,
                                                                                       len, log_);
      Launched(c, cudaGetLastError(), "SoftmaxRowsForwardKernel");
    } else {
      SoftmaxColumnsForwardKernel<<<Blocks(l, outer * inner), kBlockThreads, 0, l.stream>>>(
          c.in[0], c.out[0], outer, len, inner, log_);
      Launched(c, cudaGetLastError(), "SoftmaxColumnsForwardKernel");
    }
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.din[0] || !c.dout[0] || !Begin(c, &l)) return;
    int64_t outer, len, inner;
    Extents(*c.in_dims[0], &outer, &len, &inner);
    if (len == 0 || outer * inner == 0) return;
    if (inner == 1) {
      SoftmaxRowsBackwardKernel<<<Blocks(l, outer * 32), kBlockThreads, 0, l.stream>>>(c.out[0], c.dout[0],
                                                                                        c.din[0], outer, len, log_);
      Launched(c, cudaGetLastError(), "SoftmaxRowsBackwardKernel");
    } else {
      SoftmaxColumnsBackwardKernel<<<Blocks(l, outer * inner), kBlockThreads, 0, l.stream>>>(
          c.out[0], c.dout[0], c.din[0], outer, len, inner, log_);
      Launched(c, cudaGetLastError(), "SoftmaxColumnsBackwardKernel");
    }
  }

 private:
  // As the CPU kernel: outer x len x inner, softmax over len (InferShapes checked axis).
  void Extents(const Dims& d, int64_t* outer, int64_t* len, int64_t* inner) const {
    const int64_t r = static_cast<int64_t>(d.size());
    const int64_t ax = axis_ < 0 ? axis_ + r : axis_;
    *outer = *len = *inner = 1;
    for (int64_t k = 0; k < ax; ++k) *outer *= d[k];
    if (coerce_) {
      for (int64_t k = ax; k < r; ++k) *len *= d[k];
    } else {
      *len = d[ax];
      for (int64_t k = ax + 1; k < r; ++k) *inner *= d[k];
    }
  }

  bool log_;
  int64_t axis_;
  bool coerce_;
};

CudaKernelResult MakeSoftmaxKernel(bool log, const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  const bool old = ctx.opset < 13;
  return std::unique_ptr<OpKernel>(new CudaSoftmax(std::move(cpu), log, ctx.node->Int("axis", old ? 1 : -1), old));
}

// A reduction's terms: result j (a kept element) sums x over the reduced dims.
struct ReduceTerm {
  const float* x;
  StridedDims<1> kept, summed;

  using Base = int64_t;
  __device__ __forceinline__ Base Begin(int64_t j) const { return kept.Offset(j); }
  __device__ __forceinline__ float At(const Base& b, int64_t r) const { return x[b + summed.Offset(r)]; }
};

// din[i] += dy[map(i)] * scale: each input element reads its result.
__global__ void ReduceBackwardKernel(StridedDims<1> map, const float* __restrict__ dy, float* __restrict__ dx,
                                     int64_t n, float scale) {
  FM_GRID_STRIDE(i, n)
    dx[i] += dy[map.Offset(i)] * scale;
}

class CudaReduce final : public CudaOpKernel {
 public:
  CudaReduce(std::unique_ptr<OpKernel> cpu, bool mean, std::vector<int64_t> axes, bool noop_empty, std::string label)
      : CudaOpKernel(std::move(cpu)), mean_(mean), axes_(std::move(axes)), noop_(noop_empty),
        label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_RETURN_IF_ERROR(CudaOpKernel::InferShapes(in, out));
    return CheckRanks({in[0]}, label_);
  }

  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    const Dims& in = *c.in_dims[0];
    const std::vector<bool> red = Reduced(in.size());
    const auto split = MakeSumSplit<1>(in, red, {DenseStrides(in)});
    const int64_t n = NumElements(in), m = NumElements(Kept(in, red));
    if (m == 0) return Status::OK();
    // As the CPU: the sum, then times m / n in float.
    const float scale = mean_ ? static_cast<float>(m) / static_cast<float>(n) : 1.0f;
    const ReduceTerm t{c.in[0], split.kept, split.summed};
    LaunchSums(c, l, t, split, scale, false, c.out[0], "ReduceForward");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.din[0] || !c.dout[0] || !Begin(c, &l)) return;
    const Dims& in = *c.in_dims[0];
    const std::vector<bool> red = Reduced(in.size());
    const Dims kept = Kept(in, red);
    const int64_t n = NumElements(in), m = NumElements(kept);
    if (n == 0) return;
    const float scale = mean_ ? static_cast<float>(m) / static_cast<float>(n) : 1.0f;
    const auto map = MakeStrided<1>(in, {BroadcastStrides(kept, in)});
    ReduceBackwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(map, c.dout[0], c.din[0], n, scale);
    Launched(c, cudaGetLastError(), "ReduceBackwardKernel");
  }

 private:
  // As the CPU kernel's KeptDims / IsReduced (InferShapes checked the axes).
  std::vector<bool> Reduced(size_t rank) const {
    std::vector<bool> red(rank, axes_.empty() && !noop_);
    for (int64_t a : axes_) red[a < 0 ? a + static_cast<int64_t>(rank) : a] = true;
    return red;
  }
  static Dims Kept(const Dims& in, const std::vector<bool>& red) {
    Dims kept = in;
    for (size_t k = 0; k < in.size(); ++k)
      if (red[k]) kept[k] = 1;
    return kept;
  }

  bool mean_;
  std::vector<int64_t> axes_;
  bool noop_;
  std::string label_;
};

CudaKernelResult MakeReduceKernel(bool mean, const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  const Node& n = *ctx.node;
  std::vector<int64_t> axes = n.Ints("axes", {});
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {  // ReduceSum >= 13, ReduceMean >= 18
    const Tensor* t = ctx.constant(n.inputs[1]);
    if (!t || t->dtype != DType::kInt64)  // the CPU factory refused this already
      return Status::InvalidArgument(n.Label() + ": axes must be a constant int64 tensor");
    axes = t->i;
  }
  return std::unique_ptr<OpKernel>(
      new CudaReduce(std::move(cpu), mean, std::move(axes), n.Int("noop_with_empty_axes", 0) != 0, n.Label()));
}

}  // namespace

CudaKernelResult MakeCudaSoftmax(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeSoftmaxKernel(false, ctx, std::move(cpu));
}
CudaKernelResult MakeCudaLogSoftmax(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeSoftmaxKernel(true, ctx, std::move(cpu));
}
CudaKernelResult MakeCudaReduceMean(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeReduceKernel(true, ctx, std::move(cpu));
}
CudaKernelResult MakeCudaReduceSum(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeReduceKernel(false, ctx, std::move(cpu));
}

}  // namespace fedmesh::graph::cuda_ops
