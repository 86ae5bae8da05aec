// BatchNormalization and LayerNormalization on the GPU (CPU: core/graph/ops/normalization.cc),
// with the CPU kernel's semantics: BatchNorm normalises with the batch mean and biased
// variance in training and updates the running statistics in place (PyTorch's momentum,
// unbiased variance), the running statistics otherwise; LayerNorm normalises over dims
// [axis, rank). Statistics are double sums in a fixed order: BatchNorm splits each
// channel's values into a number of parts fixed by the shape, one block per (channel,
// part) writing a double partial into the workspace, one thread per channel adding the
// parts in order; LayerNorm reduces a row per block, and sums Scale's and B's gradients
// over fixed groups of rows, then the groups in order. No float atomics: the same results
// on every run. Doubles in the workspace (only 4-byte aligned) are stored as two words.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/cuda/graph/cuda_op_kernel.h"
#include "core/cuda/graph/cuda_ops.h"

namespace fedmesh::graph::cuda_ops {
namespace {

using fedmesh::cuda::kBlockThreads;
using fedmesh::cuda::LaunchConfig;

__device__ inline void PutDouble(float* p, double v) {
  const unsigned long long b = static_cast<unsigned long long>(__double_as_longlong(v));
  unsigned* u = reinterpret_cast<unsigned*>(p);
  u[0] = static_cast<unsigned>(b);
  u[1] = static_cast<unsigned>(b >> 32);
}

__device__ inline double GetDouble(const float* p) {
  const unsigned* u = reinterpret_cast<const unsigned*>(p);
  return __longlong_as_double(static_cast<long long>((static_cast<unsigned long long>(u[1]) << 32) | u[0]));
}


unsigned BlocksFor(const LaunchConfig& l, int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>(items, 1, std::max(1u, l.max_blocks)));
}

// ---- BatchNormalization -------------------------------------------------------------------

constexpr int64_t kPartValues = 4096;  // values per (channel, part) block, at least
constexpr int64_t kMaxParts = 64;

// X as [N, C, S]; `count` = N * S values per channel, split into `parts` ranges.
struct BnShape {
  int64_t n, c, s, parts;
  __host__ __device__ int64_t count() const { return n * s; }
  __host__ __device__ int64_t part_len() const { return (count() + parts - 1) / parts; }
};

BnShape BnShapeOf(const Dims& x) {
  BnShape b;
  b.n = x[0];
  b.c = x[1];
  b.s = NumElements(x) / std::max<int64_t>(1, b.n * b.c);
  b.parts = std::clamp<int64_t>((b.count() + kPartValues - 1) / kPartValues, 1, kMaxParts);
  return b;
}

// Workspace, in floats: per channel the float mean and inverse standard deviation Forward
// normalised with, Y = a * X + b's a and b, Backward's three coefficients; the flag (1 when
// Forward used batch statistics); per channel the double mean; per (channel, part) two
// double partial sums.
struct BnLayout {
  int64_t c, parts;
  __host__ __device__ int64_t mean() const { return 0; }
  __host__ __device__ int64_t inv() const { return c; }
  __host__ __device__ int64_t a() const { return 2 * c; }
  __host__ __device__ int64_t b() const { return 3 * c; }
  __host__ __device__ int64_t k() const { return 4 * c; }
  __host__ __device__ int64_t c0() const { return 5 * c; }
  __host__ __device__ int64_t c1() const { return 6 * c; }
  __host__ __device__ int64_t flag() const { return 7 * c; }
  __host__ __device__ int64_t mean_d() const { return 7 * c + 1; }
  __host__ __device__ int64_t part(int64_t ch, int64_t p, int which) const {
    return 9 * c + 1 + ((ch * parts + p) * 2 + which) * 2;
  }
  __host__ __device__ int64_t size() const { return 9 * c + 1 + 4 * c * parts; }
};

enum class BnSum { kValues, kSquaredDeviations, kGradients };

// One block per (channel, part): the part's sum of x, of (x - mean)^2 (float difference
// and square, as the CPU), or of dy and dy * (x - mean); double accumulation.
__global__ void BnPartialKernel(BnSum what, const float* __restrict__ x, const float* __restrict__ dy, BnShape sh,
                                float* __restrict__ ws) {
  const BnLayout lay{sh.c, sh.parts};
  const int64_t len = sh.part_len(), count = sh.count();
  for (int64_t blk = blockIdx.x; blk < sh.c * sh.parts; blk += gridDim.x) {
    const int64_t ch = blk / sh.parts, p = blk % sh.parts;
    const int64_t j0 = p * len, j1 = j0 + len < count ? j0 + len : count;
    const float mf = what == BnSum::kValues ? 0.0f : ws[lay.mean() + ch];
    double s0 = 0.0, s1 = 0.0;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      const int64_t at = ((j / sh.s) * sh.c + ch) * sh.s + j % sh.s;
      const float v = x[at];
      if (what == BnSum::kValues) {
        s0 += v;
      } else if (what == BnSum::kSquaredDeviations) {
        const float d = v - mf;
        s0 += d * d;
      } else {
        const float g = dy[at];
        s0 += g;
        s1 += g * (v - mf);
      }
    }
    s0 = BlockSum(s0);
    if (what == BnSum::kGradients) s1 = BlockSum(s1);
    if (threadIdx.x == 0) {
      PutDouble(ws + lay.part(ch, p, 0), s0);
      PutDouble(ws + lay.part(ch, p, 1), s1);
    }
  }
}

__device__ double SumParts(const float* ws, const BnLayout& lay, int64_t ch, int which) {
  double s = 0.0;
  for (int64_t p = 0; p < lay.parts; ++p) s += GetDouble(ws + lay.part(ch, p, which));
  return s;
}

__global__ void BnMeanKernel(BnShape sh, float* __restrict__ ws) {
  const BnLayout lay{sh.c, sh.parts};
  FM_GRID_STRIDE(ch, sh.c) {
    const double m = SumParts(ws, lay, ch, 0) / static_cast<double>(sh.count());
    PutDouble(ws + lay.mean_d() + 2 * ch, m);
    ws[lay.mean() + ch] = static_cast<float>(m);
  }
}

// Per channel: the statistics (batch or running), the running update, Y's coefficients and
// the optional outputs, as the CPU kernel computes them.
struct BnOutputs {
  float *run_mean, *run_var, *batch_mean, *batch_var;
};

__global__ void BnFinalizeKernel(BnShape sh, bool training, float eps, float momentum, const float* __restrict__ scale,
                                 const float* __restrict__ bias, float* __restrict__ run_mean,
                                 float* __restrict__ run_var, BnOutputs out, float* __restrict__ ws) {
  const BnLayout lay{sh.c, sh.parts};
  FM_GRID_STRIDE(ch, sh.c) {
    double m, v;
    if (training) {
      m = GetDouble(ws + lay.mean_d() + 2 * ch);
      const double q = SumParts(ws, lay, ch, 0);
      const double count = static_cast<double>(sh.count());
      v = q / count;
      const double unbiased = q / (count - 1.0);
      run_mean[ch] = static_cast<float>(momentum * run_mean[ch] + (1.0 - momentum) * m);
      run_var[ch] = static_cast<float>(momentum * run_var[ch] + (1.0 - momentum) * unbiased);
    } else {
      m = run_mean[ch];
      v = run_var[ch];
    }
    const double inv = 1.0 / sqrt(v + eps);
    ws[lay.mean() + ch] = static_cast<float>(m);
    ws[lay.inv() + ch] = static_cast<float>(inv);
    ws[lay.a() + ch] = static_cast<float>(scale[ch] * inv);
    ws[lay.b() + ch] = static_cast<float>(bias[ch] - scale[ch] * inv * m);
    if (ch == 0) ws[lay.flag()] = training ? 1.0f : 0.0f;
    if (out.run_mean) out.run_mean[ch] = run_mean[ch];
    if (out.run_var) out.run_var[ch] = run_var[ch];
    if (out.batch_mean) out.batch_mean[ch] = static_cast<float>(m);
    if (out.batch_var) out.batch_var[ch] = static_cast<float>(v);
  }
}

__global__ void BnApplyKernel(const float* __restrict__ x, BnShape sh, const float* __restrict__ ws,
                              float* __restrict__ y) {
  const BnLayout lay{sh.c, sh.parts};
  FM_GRID_STRIDE(e, sh.n * sh.c * sh.s) {
    const int64_t ch = (e / sh.s) % sh.c;
    y[e] = ws[lay.a() + ch] * x[e] + ws[lay.b() + ch];
  }
}

// Per channel: Scale's and B's gradients, and dX's coefficients.
__global__ void BnGradFinalizeKernel(BnShape sh, const float* __restrict__ scale, float* __restrict__ dscale,
                                     float* __restrict__ dbias, float* __restrict__ ws) {
  const BnLayout lay{sh.c, sh.parts};
  const bool batch_stats = ws[lay.flag()] != 0.0f;
  const double count = static_cast<double>(sh.count());
  FM_GRID_STRIDE(ch, sh.c) {
    const double inv = ws[lay.inv() + ch];
    const double sg = SumParts(ws, lay, ch, 0);
    const double sgx = SumParts(ws, lay, ch, 1) * inv;
    if (dscale) dscale[ch] += static_cast<float>(sgx);
    if (dbias) dbias[ch] += static_cast<float>(sg);
    const double k = scale[ch] * inv;
    const double mg = batch_stats ? sg / count : 0.0;
    const double mgx = batch_stats ? sgx / count : 0.0;
    ws[lay.k() + ch] = static_cast<float>(k);
    ws[lay.c0() + ch] = static_cast<float>(k * mg);
    ws[lay.c1() + ch] = static_cast<float>(k * inv * mgx);
  }
}

__global__ void BnGradApplyKernel(const float* __restrict__ x, const float* __restrict__ dy, BnShape sh,
                                  const float* __restrict__ ws, float* __restrict__ dx) {
  const BnLayout lay{sh.c, sh.parts};
  FM_GRID_STRIDE(e, sh.n * sh.c * sh.s) {
    const int64_t ch = (e / sh.s) % sh.c;
    dx[e] += ws[lay.k() + ch] * dy[e] - ws[lay.c0() + ch] - ws[lay.c1() + ch] * (x[e] - ws[lay.mean() + ch]);
  }
}

class CudaBatchNorm final : public CudaOpKernel {
 public:
  CudaBatchNorm(std::unique_ptr<OpKernel> cpu, const Node& n)
      : CudaOpKernel(std::move(cpu)),
        label_(n.Label()),
        eps_(n.Float("epsilon", 1e-5f)),
        momentum_(n.Float("momentum", 0.9f)) {}

  size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>&) const override {
    const BnShape sh = BnShapeOf(in[0]);
    return static_cast<size_t>(BnLayout{sh.c, sh.parts}.size());
  }

  bool IsStateInput(size_t i) const override { return i == 3 || i == 4; }

  Status Forward(const KernelCall& c) override {
    const Dims& xd = *c.in_dims[0];
    const BnShape sh = BnShapeOf(xd);
    if (c.training && sh.count() < 2)
      return Status::InvalidArgument(label_ +
                                     ": training needs more than one value per "
                                     "channel to estimate a variance, got X " +
                                     DimsToString(xd));
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    float* ws = c.workspace;
    if (c.training) {
      const unsigned blocks = BlocksFor(l, sh.c * sh.parts);
      BnPartialKernel<<<blocks, kBlockThreads, 0, l.stream>>>(BnSum::kValues, c.in[0], nullptr, sh, ws);
      Launched(c, cudaGetLastError(), "BnPartialKernel");
      BnMeanKernel<<<Blocks(l, sh.c), kBlockThreads, 0, l.stream>>>(sh, ws);
      Launched(c, cudaGetLastError(), "BnMeanKernel");
      BnPartialKernel<<<blocks, kBlockThreads, 0, l.stream>>>(BnSum::kSquaredDeviations, c.in[0], nullptr, sh, ws);
      Launched(c, cudaGetLastError(), "BnPartialKernel");
    }
    auto out = [&](size_t k) { return c.out.size() > k ? c.out[k] : nullptr; };
    BnFinalizeKernel<<<Blocks(l, sh.c), kBlockThreads, 0, l.stream>>>(
        sh, c.training, eps_, momentum_, c.in[1], c.in[2], c.in[3], c.in[4], BnOutputs{out(1), out(2), out(3), out(4)},
        ws);
    Launched(c, cudaGetLastError(), "BnFinalizeKernel");
    const int64_t total = sh.n * sh.c * sh.s;
    if (total > 0) {
      BnApplyKernel<<<Blocks(l, total), kBlockThreads, 0, l.stream>>>(c.in[0], sh, ws, c.out[0]);
      Launched(c, cudaGetLastError(), "BnApplyKernel");
    }
    return Status::OK();
  }

  // The gradient through Y only (the statistics outputs carry none), as the CPU kernel.
  void Backward(const KernelCall& c) override {
    float* dx = c.din[0];
    float* dscale = c.din[1];
    float* dbias = c.din[2];
    const float* dy = c.dout[0];
    LaunchConfig l;
    if (!dy || (!dx && !dscale && !dbias) || !Begin(c, &l)) return;
    const BnShape sh = BnShapeOf(*c.in_dims[0]);
    float* ws = c.workspace;
    BnPartialKernel<<<BlocksFor(l, sh.c * sh.parts), kBlockThreads, 0, l.stream>>>(BnSum::kGradients, c.in[0], dy,
                                                                                    sh, ws);
    Launched(c, cudaGetLastError(), "BnPartialKernel");
    BnGradFinalizeKernel<<<Blocks(l, sh.c), kBlockThreads, 0, l.stream>>>(sh, c.in[1], dscale, dbias, ws);
    Launched(c, cudaGetLastError(), "BnGradFinalizeKernel");
    const int64_t total = sh.n * sh.c * sh.s;
    if (dx && total > 0) {
      BnGradApplyKernel<<<Blocks(l, total), kBlockThreads, 0, l.stream>>>(c.in[0], dy, sh, ws, dx);
      Launched(c, cudaGetLastError(), "BnGradApplyKernel");
    }
  }

 private:
  std::string label_;
  float eps_, momentum_;
};

// ---- LayerNormalization -------------------------------------------------------------------

constexpr int64_t kRowsPerGroup = 64;  // rows per partial column sum, at least
constexpr int64_t kMaxGroups = 64;

// X as [rows, len]; Scale's and B's gradients sum `groups` ranges of rows.
struct LnShape {
  int64_t rows, len, groups;
  __host__ __device__ int64_t group_rows() const { return (rows + groups - 1) / groups; }
  // Workspace floats: per row the float mean and inverse standard deviation, then per
  // (group, column) two double partial sums.
  __host__ __device__ int64_t part(int64_t g, int64_t j, int which) const {
    return 2 * rows + ((g * len + j) * 2 + which) * 2;
  }
  __host__ __device__ int64_t size() const { return 2 * rows + 4 * groups * len; }
};

__global__ void LnForwardKernel(const float* __restrict__ x, const float* __restrict__ scale,
                                const float* __restrict__ bias, LnShape sh, float eps, float* __restrict__ y,
                                float* __restrict__ mean_out, float* __restrict__ inv_out, float* __restrict__ ws) {
  const double n = static_cast<double>(sh.len);
  for (int64_t r = blockIdx.x; r < sh.rows; r += gridDim.x) {
    const float* p = x + r * sh.len;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < sh.len; j += blockDim.x) s += p[j];
    const double m = BlockSum(s) / n;
    double v = 0.0;
    for (int64_t j = threadIdx.x; j < sh.len; j += blockDim.x) v += (p[j] - m) * (p[j] - m);
    const double inv = 1.0 / sqrt(BlockSum(v) / n + eps);
    float* q = y + r * sh.len;
    for (int64_t j = threadIdx.x; j < sh.len; j += blockDim.x) {
      const double h = (p[j] - m) * inv;
      q[j] = static_cast<float>(h * scale[j] + (bias ? bias[j] : 0.0f));
    }
    if (threadIdx.x == 0) {
      ws[r] = static_cast<float>(m);
      ws[sh.rows + r] = static_cast<float>(inv);
      if (mean_out) mean_out[r] = ws[r];
      if (inv_out) inv_out[r] = ws[sh.rows + r];
    }
  }
}

// dX, one block per row, from the statistics Forward kept (as floats, as the CPU).
__global__ void LnBackwardRowsKernel(const float* __restrict__ x, const float* __restrict__ scale,
                                     const float* __restrict__ dy, const float* __restrict__ dmean,
                                     const float* __restrict__ dinv, LnShape sh, const float* __restrict__ ws,
                                     float* __restrict__ dx) {
  const double n = static_cast<double>(sh.len);
  for (int64_t r = blockIdx.x; r < sh.rows; r += gridDim.x) {
    const float* p = x + r * sh.len;
    const float* g = dy + r * sh.len;
    const double m = ws[r], inv = ws[sh.rows + r];
    double sg = 0.0, sgx = 0.0;  // sum of dy*scale, and of dy*scale*xhat
    for (int64_t j = threadIdx.x; j < sh.len; j += blockDim.x) {
      const double gs = double(g[j]) * scale[j];
      sg += gs;
      sgx += gs * (p[j] - m) * inv;
    }
    sg = BlockSum(sg);
    sgx = BlockSum(sgx);
    const double from_mean = dmean ? dmean[r] / n : 0.0;
    const double from_inv = dinv ? -double(dinv[r]) * inv * inv / n : 0.0;
    float* d = dx + r * sh.len;
    for (int64_t j = threadIdx.x; j < sh.len; j += blockDim.x) {
      const double xhat = (p[j] - m) * inv;
      const double gs = double(g[j]) * scale[j];
      d[j] += static_cast<float>(inv * (gs - sg / n - xhat * sgx / n) + from_mean + from_inv * xhat);
    }
  }
}

// Per (group, column): sum over the group's rows of dy * xhat and of dy.
__global__ void LnColumnPartialKernel(const float* __restrict__ x, const float* __restrict__ dy, LnShape sh,
                                      float* __restrict__ ws) {
  const int64_t per = sh.group_rows();
  FM_GRID_STRIDE(e, sh.groups * sh.len) {
    const int64_t gi = e / sh.len, j = e % sh.len;
    const int64_t r0 = gi * per, r1 = r0 + per < sh.rows ? r0 + per : sh.rows;
    double ss = 0.0, sb = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
      const double m = ws[r], inv = ws[sh.rows + r];
      const float g = dy[r * sh.len + j];
      ss += double(g) * (x[r * sh.len + j] - m) * inv;
      sb += g;
    }
    PutDouble(ws + sh.part(gi, j, 0), ss);
    PutDouble(ws + sh.part(gi, j, 1), sb);
  }
}

__global__ void LnColumnFinalKernel(LnShape sh, const float* __restrict__ ws, float* __restrict__ dscale,
                                    float* __restrict__ dbias) {
  FM_GRID_STRIDE(j, sh.len) {
    double ss = 0.0, sb = 0.0;
    for (int64_t gi = 0; gi < sh.groups; ++gi) {
      ss += GetDouble(ws + sh.part(gi, j, 0));
      sb += GetDouble(ws + sh.part(gi, j, 1));
    }
    if (dscale) dscale[j] += static_cast<float>(ss);
    if (dbias) dbias[j] += static_cast<float>(sb);
  }
}

class CudaLayerNorm final : public CudaOpKernel {
 public:
  CudaLayerNorm(std::unique_ptr<OpKernel> cpu, const Node& n)
      : CudaOpKernel(std::move(cpu)),
        axis_(n.Int("axis", -1)),
        eps_(n.Float("epsilon", 1e-5f)),
        has_bias_(n.inputs.size() > 2 && !n.inputs[2].empty()) {}

  size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>&) const override {
    return static_cast<size_t>(Shape(in[0]).size());
  }

  Status Forward(const KernelCall& c) override {
    const LnShape sh = Shape(*c.in_dims[0]);
    LaunchConfig l;
    if (sh.rows == 0 || !Begin(c, &l)) return Status::OK();
    float* mean_out = c.out.size() > 1 ? c.out[1] : nullptr;
    float* inv_out = c.out.size() > 2 ? c.out[2] : nullptr;
    LnForwardKernel<<<BlocksFor(l, sh.rows), kBlockThreads, 0, l.stream>>>(
        c.in[0], c.in[1], has_bias_ ? c.in[2] : nullptr, sh, eps_, c.out[0], mean_out, inv_out, c.workspace);
    Launched(c, cudaGetLastError(), "LnForwardKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    const LnShape sh = Shape(*c.in_dims[0]);
    const float* dy = c.dout[0];
    float* dx = c.din[0];
    float* dscale = c.din[1];
    float* dbias = has_bias_ ? c.din[2] : nullptr;
    const float* dmean = c.dout.size() > 1 ? c.dout[1] : nullptr;
    const float* dinv = c.dout.size() > 2 ? c.dout[2] : nullptr;
    LaunchConfig l;
    if (!dy || sh.rows == 0 || !Begin(c, &l)) return;
    if (dx) {
      LnBackwardRowsKernel<<<BlocksFor(l, sh.rows), kBlockThreads, 0, l.stream>>>(c.in[0], c.in[1], dy, dmean, dinv,
                                                                                   sh, c.workspace, dx);
      Launched(c, cudaGetLastError(), "LnBackwardRowsKernel");
    }
    if ((!dscale && !dbias) || sh.len == 0) return;
    LnColumnPartialKernel<<<Blocks(l, sh.groups * sh.len), kBlockThreads, 0, l.stream>>>(c.in[0], dy, sh,
                                                                                         c.workspace);
    Launched(c, cudaGetLastError(), "LnColumnPartialKernel");
    LnColumnFinalKernel<<<Blocks(l, sh.len), kBlockThreads, 0, l.stream>>>(sh, c.workspace, dscale, dbias);
    Launched(c, cudaGetLastError(), "LnColumnFinalKernel");
  }

 private:
  // As the CPU kernel: rows of the dims before axis, each of the dims from axis on.
  LnShape Shape(const Dims& x) const {
    const int64_t ax = axis_ < 0 ? axis_ + static_cast<int64_t>(x.size()) : axis_;
    LnShape sh{1, 1, 1};
    for (int64_t k = 0; k < static_cast<int64_t>(x.size()); ++k) (k < ax ? sh.rows : sh.len) *= x[k];
    sh.groups = std::clamp<int64_t>((sh.rows + kRowsPerGroup - 1) / kRowsPerGroup, 1, kMaxGroups);
    return sh;
  }

  int64_t axis_;
  float eps_;
  bool has_bias_;
};

}  // namespace

CudaKernelResult MakeCudaBatchNormalization(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaBatchNorm(std::move(cpu), *ctx.node));
}

CudaKernelResult MakeCudaLayerNormalization(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaLayerNorm(std::move(cpu), *ctx.node));
}

}  // namespace fedmesh::graph::cuda_ops
