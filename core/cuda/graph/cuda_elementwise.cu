// The broadcasting binary graph ops (Add, Sub, Mul, Div, Pow) and Where on the GPU (CPU:
// core/graph/ops/elementwise.cc, where.cc). Forward: one thread per output element, each
// operand read through its broadcast strides. Backward: each operand element's gradient
// is the sum over the output elements that read it, computed by one thread, warp or
// block in a fixed order (cuda_shape.h), never by float atomics, so it repeats bit for
// bit; one launch per operand, so an operand passed twice (Add(x, x)) accumulates twice
// in stream order.
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

enum class BinOp { kAdd, kSub, kMul, kDiv, kPow };

// The CPU kernel's math, term for term.
__device__ __forceinline__ float Apply(BinOp op, float a, float b) {
  switch (op) {
    case BinOp::kAdd: return a + b;
    case BinOp::kSub: return a - b;
    case BinOp::kMul: return a * b;
    case BinOp::kDiv: return a / b;
    case BinOp::kPow: return b == 2.0f ? a * a : powf(a, b);
  }
  return 0.0f;
}
__device__ __forceinline__ float GradA(BinOp op, float a, float b) {
  switch (op) {
    case BinOp::kAdd: return 1.0f;
    case BinOp::kSub: return 1.0f;
    case BinOp::kMul: return b;
    case BinOp::kDiv: return 1.0f / b;
    case BinOp::kPow: return b == 2.0f ? 2.0f * a : b * powf(a, b - 1.0f);
  }
  return 0.0f;
}
__device__ __forceinline__ float GradB(BinOp op, float a, float b, float y) {
  switch (op) {
    case BinOp::kAdd: return 1.0f;
    case BinOp::kSub: return -1.0f;
    case BinOp::kMul: return a;
    case BinOp::kDiv: return -a / (b * b);
    case BinOp::kPow: return a > 0.0f ? y * logf(a) : 0.0f;
  }
  return 0.0f;
}

__global__ void BinaryForwardKernel(BinOp op, StridedDims<2> map, const float* __restrict__ a,
                                    const float* __restrict__ b, float* __restrict__ y, int64_t n) {
  FM_GRID_STRIDE(i, n) {
    int64_t off[2] = {0, 0};
    map.AddOffsets(i, off);
    y[i] = Apply(op, a[off[0]], b[off[1]]);
  }
}

// The gradient terms of one operand ("self"): output element o contributes
// dy[o] * d y[o] / d self. Stride sets: 0 the output, 1 the other operand.
struct BinaryGradTerm {
  BinOp op;
  bool wrt_a;
  const float* dy;
  const float* y;  // read only for Pow's exponent gradient
  const float* self;
  const float* other;
  StridedDims<2> kept, summed;

  struct Base {
    int64_t o, other;
    float self;
  };
  __device__ __forceinline__ Base Begin(int64_t j) const {
    int64_t off[2] = {0, 0};
    kept.AddOffsets(j, off);
    return {off[0], off[1], self[j]};
  }
  __device__ __forceinline__ float At(const Base& b, int64_t r) const {
    int64_t off[2] = {b.o, b.other};
    summed.AddOffsets(r, off);
    const float x = other[off[1]];
    const float g = wrt_a ? GradA(op, b.self, x)
                          : GradB(op, x, b.self, op == BinOp::kPow ? y[off[0]] : 0.0f);
    return dy[off[0]] * g;
  }
};

// Where's terms for a (take = true) or b: dy where the condition picked that operand.
// Stride sets: 0 the output, 1 the condition.
struct WhereGradTerm {
  bool take;
  const float* dy;
  const float* cond;
  StridedDims<2> kept, summed;

  struct Base {
    int64_t o, cond;
  };
  __device__ __forceinline__ Base Begin(int64_t j) const {
    int64_t off[2] = {0, 0};
    kept.AddOffsets(j, off);
    return {off[0], off[1]};
  }
  __device__ __forceinline__ float At(const Base& b, int64_t r) const {
    int64_t off[2] = {b.o, b.cond};
    summed.AddOffsets(r, off);
    return (cond[off[1]] != 0.0f) == take ? dy[off[0]] : 0.0f;
  }
};

// Out dims summed over for an operand of dims `operand`: those it is broadcast along.
std::vector<bool> BroadcastDimsOf(const Dims& operand, const Dims& out) {
  std::vector<bool> red(out.size(), true);
  const size_t off = out.size() - operand.size();
  for (size_t k = 0; k < operand.size(); ++k) red[k + off] = operand[k] == 1;
  return red;
}

class CudaBinary final : public CudaOpKernel {
 public:
  CudaBinary(std::unique_ptr<OpKernel> cpu, BinOp op, std::string label)
      : CudaOpKernel(std::move(cpu)), op_(op), label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_RETURN_IF_ERROR(CudaOpKernel::InferShapes(in, out));
    return CheckRanks(*out, label_);
  }

  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    const Dims& od = *c.out_dims[0];
    const int64_t n = NumElements(od);
    if (n == 0) return Status::OK();
    const auto map = MakeStrided<2>(od, {BroadcastStrides(*c.in_dims[0], od), BroadcastStrides(*c.in_dims[1], od)});
    BinaryForwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(op_, map, c.in[0], c.in[1], c.out[0], n);
    Launched(c, cudaGetLastError(), "BinaryForwardKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.dout[0] || (!c.din[0] && !c.din[1]) || !Begin(c, &l)) return;
    const Dims& od = *c.out_dims[0];
    if (NumElements(od) == 0) return;
    for (int i = 0; i < 2; ++i) {
      if (!c.din[i]) continue;
      const Dims& self = *c.in_dims[i];
      const auto split = MakeSumSplit<2>(od, BroadcastDimsOf(self, od),
                                         {DenseStrides(od), BroadcastStrides(*c.in_dims[1 - i], od)});
      const BinaryGradTerm t{op_, i == 0, c.dout[0], c.out[0], c.in[i], c.in[1 - i], split.kept, split.summed};
      LaunchSums(c, l, t, split, 1.0f, true, c.din[i], "BinaryBackward");
    }
  }

 private:
  BinOp op_;
  std::string label_;
};

__global__ void WhereForwardKernel(StridedDims<3> map, const float* __restrict__ cond, const float* __restrict__ a,
                                   const float* __restrict__ b, float* __restrict__ y, int64_t n) {
  FM_GRID_STRIDE(i, n) {
    int64_t off[3] = {0, 0, 0};
    map.AddOffsets(i, off);
    y[i] = cond[off[0]] != 0.0f ? a[off[1]] : b[off[2]];
  }
}

class CudaWhere final : public CudaOpKernel {
 public:
  CudaWhere(std::unique_ptr<OpKernel> cpu, std::string label) : CudaOpKernel(std::move(cpu)), label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_RETURN_IF_ERROR(CudaOpKernel::InferShapes(in, out));
    return CheckRanks(*out, label_);
  }

  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    const Dims& od = *c.out_dims[0];
    const int64_t n = NumElements(od);
    if (n == 0) return Status::OK();
    const auto map = MakeStrided<3>(od, {BroadcastStrides(*c.in_dims[0], od), BroadcastStrides(*c.in_dims[1], od),
                                         BroadcastStrides(*c.in_dims[2], od)});
    WhereForwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(map, c.in[0], c.in[1], c.in[2], c.out[0], n);
    Launched(c, cudaGetLastError(), "WhereForwardKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.dout[0] || !Begin(c, &l)) return;
    const Dims& od = *c.out_dims[0];
    if (NumElements(od) == 0) return;
    for (size_t i = 1; i < 3 && i < c.din.size(); ++i) {
      if (!c.din[i]) continue;
      const auto split = MakeSumSplit<2>(od, BroadcastDimsOf(*c.in_dims[i], od),
                                         {DenseStrides(od), BroadcastStrides(*c.in_dims[0], od)});
      const WhereGradTerm t{i == 1, c.dout[0], c.in[0], split.kept, split.summed};
      LaunchSums(c, l, t, split, 1.0f, true, c.din[i], "WhereBackward");
    }
  }

 private:
  std::string label_;
};

CudaKernelResult MakeBinary(BinOp op, const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaBinary(std::move(cpu), op, ctx.node->Label()));
}

}  // namespace

CudaKernelResult MakeCudaAdd(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeBinary(BinOp::kAdd, ctx, std::move(cpu));
}
CudaKernelResult MakeCudaSub(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeBinary(BinOp::kSub, ctx, std::move(cpu));
}
CudaKernelResult MakeCudaMul(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeBinary(BinOp::kMul, ctx, std::move(cpu));
}
CudaKernelResult MakeCudaDiv(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeBinary(BinOp::kDiv, ctx, std::move(cpu));
}
CudaKernelResult MakeCudaPow(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeBinary(BinOp::kPow, ctx, std::move(cpu));
}
CudaKernelResult MakeCudaWhere(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaWhere(std::move(cpu), ctx.node->Label()));
}

}  // namespace fedmesh::graph::cuda_ops
