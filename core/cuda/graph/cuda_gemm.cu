// Gemm and MatMul on the GPU (CPU: core/graph/ops/gemm.cc). The products are the backend's
// cuBLAS GEMMs, with the CPU kernel's arguments; Gemm's C operand (broadcast to [M, N]
// along either dim) is written into Y before the product and its gradient summed back by
// one thread per element of C over the elements of Y it fed, in a fixed order
// (deterministic). MatMul's CPU kernel calls nothing but the backend's Gemm, so on the GPU
// it is that kernel itself.
#include <cstdint>
#include <string>

#include "core/cuda/graph/cuda_op_kernel.h"
#include "core/cuda/graph/cuda_ops.h"

namespace fedmesh::graph::cuda_ops {
namespace {

using fedmesh::cuda::kBlockThreads;
using fedmesh::cuda::LaunchConfig;

// C seen as [cm, cn] with cm in {1, m} and cn in {1, n} (any C that broadcasts to [m, n]).
struct BiasShape {
  int64_t cm = 1, cn = 1;
};

BiasShape ShapeOf(const Dims& cd, int64_t m, int64_t n) {
  BiasShape b;
  if (cd.size() == 2) {
    b.cm = cd[0];
    b.cn = cd[1];
  } else if (cd.size() == 1) {
    b.cn = cd[0];
  }
  (void)m, (void)n;
  return b;
}

__global__ void BroadcastBiasKernel(const float* __restrict__ cv, BiasShape b, float beta, float* __restrict__ y,
                                    int64_t m, int64_t n) {
  FM_GRID_STRIDE(i, m * n) {
    const int64_t r = i / n, j = i % n;
    y[i] = beta * cv[(b.cm == 1 ? 0 : r) * b.cn + (b.cn == 1 ? 0 : j)];
  }
}

// dC[e] += s * sum of dY over the rows and columns that read C element e, in increasing
// order of row then column.
__global__ void BiasGradKernel(const float* __restrict__ dy, BiasShape b, float s, float* __restrict__ dc,
                               int64_t m, int64_t n) {
  const int64_t count = b.cm * b.cn;
  FM_GRID_STRIDE(e, count) {
    const int64_t ci = e / b.cn, cj = e % b.cn;
    const int64_t r0 = b.cm == 1 ? 0 : ci, r1 = b.cm == 1 ? m : ci + 1;
    const int64_t j0 = b.cn == 1 ? 0 : cj, j1 = b.cn == 1 ? n : cj + 1;
    float sum = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = j0; j < j1; ++j) sum += dy[r * n + j];
    dc[e] += s * sum;
  }
}

class CudaGemm final : public CudaOpKernel {
 public:
  CudaGemm(std::unique_ptr<OpKernel> cpu, const Node& n)
      : CudaOpKernel(std::move(cpu)),
        alpha_(n.Float("alpha", 1.0f)),
        beta_(n.Float("beta", 1.0f)),
        trans_a_(n.Int("transA", 0) != 0),
        trans_b_(n.Int("transB", 0) != 0),
        has_c_(n.inputs.size() > 2 && !n.inputs[2].empty()) {}

  Status Forward(const KernelCall& c) override {
    const Dims& a = *c.in_dims[0];
    const Dims& y = *c.out_dims[0];
    const int m = static_cast<int>(y[0]), n = static_cast<int>(y[1]);
    const int k = static_cast<int>(trans_a_ ? a[0] : a[1]);
    if (m == 0 || n == 0) return Status::OK();
    float beta = 0.0f;
    if (has_c_) {
      LaunchConfig l;
      if (!Begin(c, &l)) return Status::OK();
      const int64_t mn = int64_t{m} * n;
      if (mn > 0) {
        BroadcastBiasKernel<<<Blocks(l, mn), kBlockThreads, 0, l.stream>>>(
            c.in[2], ShapeOf(*c.in_dims[2], m, n), beta_, c.out[0], m, n);
        Launched(c, cudaGetLastError(), "BroadcastBiasKernel");
      }
      beta = 1.0f;
    }
    if (k == 0) {  // an empty product: cuBLAS refuses its leading dimensions, the sum is 0
      if (!has_c_) c.be->Fill(c.out[0], static_cast<size_t>(m) * n, 0.0f);
      return Status::OK();
    }
    c.be->Gemm(trans_a_, trans_b_, m, n, k, alpha_, c.in[0], trans_a_ ? m : k, c.in[1], trans_b_ ? k : n, beta,
               c.out[0], n);
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    const Dims& a = *c.in_dims[0];
    const Dims& y = *c.out_dims[0];
    const int m = static_cast<int>(y[0]), n = static_cast<int>(y[1]);
    const int k = static_cast<int>(trans_a_ ? a[0] : a[1]);
    const float* A = c.in[0];
    const float* B = c.in[1];
    const float* dY = c.dout[0];
    const int lda = trans_a_ ? m : k, ldb = trans_b_ ? k : n;
    const bool product = m > 0 && n > 0 && k > 0;  // else dA and dB get nothing
    if (float* dA = product ? c.din[0] : nullptr) {
      if (!trans_a_)  // dA[m,k] += alpha dY op(B)^T
        c.be->Gemm(false, !trans_b_, m, k, n, alpha_, dY, n, B, ldb, 1.0f, dA, k);
      else  // dA[k,m] += alpha op(B) dY^T
        c.be->Gemm(trans_b_, true, k, m, n, alpha_, B, ldb, dY, n, 1.0f, dA, m);
    }
    if (float* dB = product ? c.din[1] : nullptr) {
      if (!trans_b_)  // dB[k,n] += alpha op(A)^T dY
        c.be->Gemm(!trans_a_, false, k, n, m, alpha_, A, lda, dY, n, 1.0f, dB, n);
      else  // dB[n,k] += alpha dY^T op(A)
        c.be->Gemm(true, trans_a_, n, k, m, alpha_, dY, n, A, lda, 1.0f, dB, k);
    }
    if (has_c_ && c.din[2]) {
      LaunchConfig l;
      if (!Begin(c, &l)) return;
      const BiasShape b = ShapeOf(*c.in_dims[2], m, n);
      const int64_t count = b.cm * b.cn;
      if (count == 0) return;
      BiasGradKernel<<<Blocks(l, count), kBlockThreads, 0, l.stream>>>(dY, b, beta_, c.din[2], m, n);
      Launched(c, cudaGetLastError(), "BiasGradKernel");
    }
  }

 private:
  float alpha_, beta_;
  bool trans_a_, trans_b_, has_c_;
};

}  // namespace

CudaKernelResult MakeCudaGemm(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaGemm(std::move(cpu), *ctx.node));
}

CudaKernelResult MakeCudaMatMul(const KernelContext&, std::unique_ptr<OpKernel> cpu) {
  // Backend-generic: its Forward and Backward only call c.be->Gemm (cuBLAS here).
  return CudaKernelResult(std::move(cpu));
}

}  // namespace fedmesh::graph::cuda_ops
