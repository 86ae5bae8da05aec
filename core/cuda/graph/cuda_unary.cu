// The elementwise unary graph ops on the GPU (CPU: core/graph/ops/unary.cc), Identity and
// Dropout. One thread per element; the derivative is written from x and y = F(x) as on the
// CPU, in float32 with CUDA's erff/tanhf/expf (within 1e-6 relative of the host's libm).
#include <cmath>
#include <cstdint>
#include <string>

#include "core/cuda/graph/cuda_op_kernel.h"
#include "core/cuda/graph/cuda_ops.h"
#include "core/rng.h"

namespace fedmesh::graph::cuda_ops {
namespace {

using fedmesh::cuda::kBlockThreads;
using fedmesh::cuda::LaunchConfig;

enum class Fn { kRelu, kLeakyRelu, kSigmoid, kTanh, kGelu, kGeluTanh, kErf, kSqrt, kNeg, kExp, kLog, kIsNaN };

constexpr float kSqrt2 = 1.41421356237309505f;
constexpr float kInvSqrt2Pi = 0.398942280401432678f;
constexpr float kSqrt2OverPi = 0.797884560802865356f;

__device__ inline float F(Fn fn, float alpha, float x) {
  switch (fn) {
    case Fn::kRelu: return x > 0.0f ? x : 0.0f;
    case Fn::kLeakyRelu: return x > 0.0f ? x : alpha * x;
    case Fn::kSigmoid: return 1.0f / (1.0f + expf(-x));
    case Fn::kTanh: return tanhf(x);
    case Fn::kGelu: return 0.5f * x * (1.0f + erff(x / kSqrt2));
    case Fn::kGeluTanh: return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    case Fn::kErf: return erff(x);
    case Fn::kSqrt: return sqrtf(x);
    case Fn::kNeg: return -x;
    case Fn::kExp: return expf(x);
    case Fn::kLog: return logf(x);
    case Fn::kIsNaN: return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u ? 1.0f : 0.0f;
  }
  return 0.0f;
}

__device__ inline float D(Fn fn, float alpha, float x, float y) {
  switch (fn) {
    case Fn::kRelu: return x > 0.0f ? 1.0f : 0.0f;
    case Fn::kLeakyRelu: return x > 0.0f ? 1.0f : alpha;
    case Fn::kSigmoid: return y * (1.0f - y);
    case Fn::kTanh: return 1.0f - y * y;
    case Fn::kGelu: return 0.5f * (1.0f + erff(x / kSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
    case Fn::kGeluTanh: {
      const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
      const float t = tanhf(u);
      const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
      return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    }
    case Fn::kErf: return 2.0f * kInvSqrt2Pi * kSqrt2 * expf(-x * x);
    case Fn::kSqrt: return 0.5f / y;
    case Fn::kNeg: return -1.0f;
    case Fn::kExp: return y;
    case Fn::kLog: return 1.0f / x;
    case Fn::kIsNaN: return 0.0f;
  }
  return 0.0f;
}

__global__ void UnaryForwardKernel(Fn fn, float alpha, const float* __restrict__ x, float* __restrict__ y,
                                   int64_t n) {
  FM_GRID_STRIDE(i, n)
    y[i] = F(fn, alpha, x[i]);
}

// As the CPU: Relu selects (a non-finite dy stays out where x <= 0), the rest multiply (an
// IsNaN input takes dy * 0, NaN where dy is).
__global__ void UnaryBackwardKernel(Fn fn, float alpha, const float* __restrict__ x, const float* __restrict__ y,
                                    const float* __restrict__ dy, float* __restrict__ dx, int64_t n) {
  FM_GRID_STRIDE(i, n)
    dx[i] += fn == Fn::kRelu ? (x[i] > 0.0f ? dy[i] : 0.0f) : dy[i] * D(fn, alpha, x[i], y[i]);
}

class CudaUnary final : public CudaOpKernel {
 public:
  CudaUnary(std::unique_ptr<OpKernel> cpu, Fn fn, float alpha) : CudaOpKernel(std::move(cpu)), fn_(fn), alpha_(alpha) {}

  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    const int64_t n = NumElements(*c.in_dims[0]);
    if (n == 0) return Status::OK();
    UnaryForwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(fn_, alpha_, c.in[0], c.out[0], n);
    Launched(c, cudaGetLastError(), "UnaryForwardKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.din[0] || !Begin(c, &l)) return;
    const int64_t n = NumElements(*c.in_dims[0]);
    if (n == 0) return;
    UnaryBackwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(fn_, alpha_, c.in[0], c.out[0], c.dout[0],
                                                                       c.din[0], n);
    Launched(c, cudaGetLastError(), "UnaryBackwardKernel");
  }

 private:
  Fn fn_;
  float alpha_;
};

CudaKernelResult Wrap(std::unique_ptr<OpKernel> cpu, Fn fn, float alpha = 0.0f) {
  return std::unique_ptr<OpKernel>(new CudaUnary(std::move(cpu), fn, alpha));
}

// Output = input, element for element: a device copy; the gradient passes through.
class CudaCopy final : public CudaOpKernel {
 public:
  explicit CudaCopy(std::unique_ptr<OpKernel> cpu) : CudaOpKernel(std::move(cpu)) {}
  Status Forward(const KernelCall& c) override {
    const int64_t n = NumElements(*c.in_dims[0]);
    c.be->Copy(c.out[0], c.in[0], n * sizeof(float));
    return Status::OK();
  }
  void Backward(const KernelCall& c) override {
    if (!c.din[0]) return;
    c.be->Axpy(NumElements(*c.in_dims[0]), 1.0f, c.dout[0], c.din[0]);
  }
};

// Inverted dropout with the CPU kernel's mask: CounterUniform(seed, i) >= ratio keeps an
// element (scaled by 1 / (1 - ratio)); outside training (or ratio 0) the identity. The mask
// stays in the workspace for Backward; the optional second output is it as 0 / 1.
__global__ void DropoutForwardKernel(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ mask,
                                     float* __restrict__ keep, int64_t n, float ratio, bool drop, uint64_t seed) {
  const float scale = drop ? 1.0f / (1.0f - ratio) : 1.0f;
  FM_GRID_STRIDE(i, n) {
    const float m = !drop || CounterUniform(seed, static_cast<uint64_t>(i)) >= ratio ? scale : 0.0f;
    mask[i] = m;
    y[i] = x[i] * m;
    if (keep) keep[i] = m != 0.0f ? 1.0f : 0.0f;
  }
}

__global__ void MaskedAccumulateKernel(const float* __restrict__ dy, const float* __restrict__ mask,
                                       float* __restrict__ dx, int64_t n) {
  FM_GRID_STRIDE(i, n)
    dx[i] += dy[i] * mask[i];
}

class CudaDropout final : public CudaOpKernel {
 public:
  CudaDropout(std::unique_ptr<OpKernel> cpu, float ratio) : CudaOpKernel(std::move(cpu)), ratio_(ratio) {}
  size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>&) const override {
    return static_cast<size_t>(NumElements(in[0]));
  }
  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    const int64_t n = NumElements(*c.in_dims[0]);
    if (n == 0) return Status::OK();
    float* keep = c.out.size() > 1 ? c.out[1] : nullptr;
    DropoutForwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(c.in[0], c.out[0], c.workspace, keep, n,
                                                                        ratio_, c.training && ratio_ > 0.0f, c.seed);
    Launched(c, cudaGetLastError(), "DropoutForwardKernel");
    return Status::OK();
  }
  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.din[0] || !Begin(c, &l)) return;
    const int64_t n = NumElements(*c.in_dims[0]);
    if (n == 0) return;
    MaskedAccumulateKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(c.dout[0], c.workspace, c.din[0], n);
    Launched(c, cudaGetLastError(), "MaskedAccumulateKernel");
  }

 private:
  float ratio_;
};

}  // namespace

CudaKernelResult MakeCudaRelu(const KernelContext&, std::unique_ptr<OpKernel> cpu) { return Wrap(std::move(cpu), Fn::kRelu); }
CudaKernelResult MakeCudaLeakyRelu(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return Wrap(std::move(cpu), Fn::kLeakyRelu, ctx.node->Float("alpha", 0.01f));
}
CudaKernelResult MakeCudaSigmoid(const KernelContext&, std::unique_ptr<OpKernel> cpu) { return Wrap(std::move(cpu), Fn::kSigmoid); }
CudaKernelResult MakeCudaTanh(const KernelContext&, std::unique_ptr<OpKernel> cpu) { return Wrap(std::move(cpu), Fn::kTanh); }
CudaKernelResult MakeCudaGelu(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return Wrap(std::move(cpu), ctx.node->String("approximate", "none") == "tanh" ? Fn::kGeluTanh : Fn::kGelu);
}
CudaKernelResult MakeCudaErf(const KernelContext&, std::unique_ptr<OpKernel> cpu) { return Wrap(std::move(cpu), Fn::kErf); }
CudaKernelResult MakeCudaSqrt(const KernelContext&, std::unique_ptr<OpKernel> cpu) { return Wrap(std::move(cpu), Fn::kSqrt); }
CudaKernelResult MakeCudaNeg(const KernelContext&, std::unique_ptr<OpKernel> cpu) { return Wrap(std::move(cpu), Fn::kNeg); }
CudaKernelResult MakeCudaExp(const KernelContext&, std::unique_ptr<OpKernel> cpu) { return Wrap(std::move(cpu), Fn::kExp); }
CudaKernelResult MakeCudaLog(const KernelContext&, std::unique_ptr<OpKernel> cpu) { return Wrap(std::move(cpu), Fn::kLog); }
CudaKernelResult MakeCudaIsNaN(const KernelContext&, std::unique_ptr<OpKernel> cpu) { return Wrap(std::move(cpu), Fn::kIsNaN); }

CudaKernelResult MakeCudaIdentity(const KernelContext&, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaCopy(std::move(cpu)));
}
// Flatten, Reshape, Squeeze and Unsqueeze keep the elements in order: only the dims differ,
// and the CPU kernel (shape inference) knows them.
CudaKernelResult MakeCudaFlatten(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeCudaIdentity(ctx, std::move(cpu));
}
CudaKernelResult MakeCudaReshape(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeCudaIdentity(ctx, std::move(cpu));
}
CudaKernelResult MakeCudaSqueeze(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeCudaIdentity(ctx, std::move(cpu));
}
CudaKernelResult MakeCudaUnsqueeze(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return MakeCudaIdentity(ctx, std::move(cpu));
}

CudaKernelResult MakeCudaDropout(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  const Node& n = *ctx.node;
  float ratio = n.Float("ratio", 0.5f);  // as MakeDropout, which validated it
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const Tensor* t = ctx.constant(n.inputs[1]);
    ratio = t->dtype == DType::kFloat32 ? t->f[0] : static_cast<float>(t->i[0]);
  }
  return std::unique_ptr<OpKernel>(new CudaDropout(std::move(cpu), ratio));
}

}  // namespace fedmesh::graph::cuda_ops
