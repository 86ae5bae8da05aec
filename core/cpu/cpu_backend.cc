#include "core/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "core/check.h"
#include "core/cuda/kernel_math.h"
#include "core/rng.h"

namespace fedmesh {
namespace {

// Below this many elements an element-wise loop runs on one thread: an OpenMP fork/join
// costs a few microseconds, as much as streaming ~64k floats through one core.
constexpr size_t kParallelElements = 1 << 16;

inline bool Parallel(size_t n) { return n >= kParallelElements; }

}  // namespace

CpuBackend::CpuBackend(int threads) { set_threads(threads); }

void CpuBackend::set_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  threads_ = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

void* CpuBackend::Allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void CpuBackend::Free(void* p) { std::free(p); }
void CpuBackend::CopyFromHost(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::Copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::Fill(float* x, size_t n, float value) { std::fill(x, x + n, value); }

void CpuBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                      const float* a, int lda, const float* b, int ldb, float beta, float* c,
                      int ldc) {
  // A dense layer's forward pass, x[m,k] * W[n,k]^T with few rows and a large W: OpenBLAS
  // packs W, the big operand, with a 16-wide transposing copy. As C^T = W * x^T it packs W
  // on the other side, a 4-wide copy: 10-14% less time for 32 x 784 -> 256, the mlp's first
  // layer (bench/dense_gemm.cc). The [n, m] product is transposed into C afterwards.
  if (!trans_a && trans_b && beta == 0.0f && m <= 64 && n >= 4 * m && k >= 128) {
    // Per thread, not per instance: CpuBatchedOps calls one backend from all its threads.
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(m) * n);
    float* t = scratch.data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, alpha, b, ldb, a, lda, 0.0f, t, m);
    for (int i = 0; i < m; ++i) {
      float* row = c + static_cast<size_t>(i) * ldc;
      for (int j = 0; j < n; ++j) row[j] = t[static_cast<size_t>(j) * m + i];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void CpuBackend::AddBias(float* y, const float* bias, int rows, int cols) {
#pragma omp parallel for if (Parallel(size_t(rows) * cols))
  for (int r = 0; r < rows; ++r) {
    float* row = y + static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void CpuBackend::BiasGrad(const float* dy, float* dbias, int rows, int cols) {
  std::fill(dbias, dbias + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* row = dy + static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) dbias[c] += row[c];
  }
}

void CpuBackend::Axpy(size_t n, float alpha, const float* x, float* y) {
#pragma omp parallel for if (Parallel(n))
  for (size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void CpuBackend::Scale(size_t n, float alpha, float* x) {
#pragma omp parallel for if (Parallel(n))
  for (size_t i = 0; i < n; ++i) x[i] *= alpha;
}

double CpuBackend::SquaredNorm(size_t n, const float* x) {
  double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) if (Parallel(n))
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

void CpuBackend::ReluForward(const float* x, float* y, size_t n) {
#pragma omp parallel for if (Parallel(n))
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void CpuBackend::ReluBackward(const float* y, const float* dy, float* dx, size_t n) {
#pragma omp parallel for if (Parallel(n))
  for (size_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void CpuBackend::DropoutForward(const float* x, float* y, float* mask, size_t n, float p,
                                uint64_t seed) {
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for if (Parallel(n))
  for (size_t i = 0; i < n; ++i) {
    mask[i] = CounterUniform(seed, i) >= p ? keep_scale : 0.0f;
    y[i] = x[i] * mask[i];
  }
}

void CpuBackend::Multiply(const float* a, const float* b, float* out, size_t n) {
#pragma omp parallel for if (Parallel(n))
  for (size_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

namespace {

// im2col of output rows [r0, r1) (rows are (n, oh, ow) in NHWC order). Plain loops, not
// memcpy: with C = 1 (the first conv layer) a call per tap would dominate.
void Im2ColRows(const float* x, const WindowGeometry& g, int r0, int r1, float* cols) {
  const int oh_n = g.out_h(), ow_n = g.out_w(), C = g.channels;
  const size_t row_len = static_cast<size_t>(g.kernel_h) * g.kernel_w * C;
  for (int r = r0; r < r1; ++r) {
    const int n = r / (oh_n * ow_n);
    const int oh = (r / ow_n) % oh_n;
    const int ow = r % ow_n;
    float* dst = cols + static_cast<size_t>(r - r0) * row_len;
    const float* img = x + static_cast<size_t>(n) * g.in_h * g.in_w * C;
    for (int kh = 0; kh < g.kernel_h; ++kh) {
      const int ih = oh * g.stride - g.pad + kh;
      for (int kw = 0; kw < g.kernel_w; ++kw, dst += C) {
        const int iw = ow * g.stride - g.pad + kw;
        if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) {
          for (int c = 0; c < C; ++c) dst[c] = 0.0f;
        } else {
          const float* src = img + (static_cast<size_t>(ih) * g.in_w + iw) * C;
          for (int c = 0; c < C; ++c) dst[c] = src[c];
        }
      }
    }
  }
}

// The adjoint of Im2ColRows for whole images [n0, n1): dx of those images is overwritten.
// `dcols` starts at image n0's first row.
void Col2ImImages(const float* dcols, const WindowGeometry& g, int n0, int n1, float* dx) {
  const int oh_n = g.out_h(), ow_n = g.out_w(), C = g.channels;
  const size_t img_size = static_cast<size_t>(g.in_h) * g.in_w * C;
  const float* src = dcols;
  for (int n = n0; n < n1; ++n) {
    float* img = dx + n * img_size;
    std::fill(img, img + img_size, 0.0f);
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        for (int kh = 0; kh < g.kernel_h; ++kh) {
          const int ih = oh * g.stride - g.pad + kh;
          for (int kw = 0; kw < g.kernel_w; ++kw, src += C) {
            const int iw = ow * g.stride - g.pad + kw;
            if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
            float* d = img + (static_cast<size_t>(ih) * g.in_w + iw) * C;
            for (int c = 0; c < C; ++c) d[c] += src[c];
          }
        }
      }
    }
  }
}

// Per-thread share of the convolution workspace: one image's columns, one image's
// column gradients, and private dW/db accumulators.
struct ConvThreadSpace {
  size_t cols, dw;
  size_t total() const { return 2 * cols + dw; }
};
ConvThreadSpace ConvSpace(const WindowGeometry& g, int out_channels) {
  const size_t row_len = static_cast<size_t>(g.kernel_h) * g.kernel_w * g.channels;
  const size_t cols = static_cast<size_t>(g.out_h()) * g.out_w() * row_len;
  return {(cols + 15) / 16 * 16, (out_channels * (row_len + 1) + 15) / 16 * 16};
}

}  // namespace

void CpuBackend::Im2Col(const float* x, const WindowGeometry& g, float* cols) {
  const size_t row_len = static_cast<size_t>(g.kernel_h) * g.kernel_w * g.channels;
  const int rows = g.batch * g.out_h() * g.out_w();
  constexpr int kRowsPerTask = 64;
#pragma omp parallel for if (Parallel(size_t(rows) * row_len))
  for (int r0 = 0; r0 < rows; r0 += kRowsPerTask) {
    Im2ColRows(x, g, r0, std::min(rows, r0 + kRowsPerTask), cols + r0 * row_len);
  }
}

void CpuBackend::Col2Im(const float* dcols, const WindowGeometry& g, float* dx) {
  const size_t row_len = static_cast<size_t>(g.kernel_h) * g.kernel_w * g.channels;
  const size_t img_rows = static_cast<size_t>(g.out_h()) * g.out_w();
  // One image per iteration: images never share pixels, so threads never collide.
#pragma omp parallel for if (Parallel(g.batch * img_rows * row_len))
  for (int n = 0; n < g.batch; ++n) Col2ImImages(dcols + n * img_rows * row_len, g, n, n + 1, dx);
}

// The batch is split by image over the threads; each runs im2col and a single-threaded
// GEMM per image (OpenBLAS's OpenMP build runs serially inside a parallel region), so a
// column matrix (~0.6 MB for the cnn's second layer) is consumed from cache instead of
// one batch-wide matrix (~20 MB) going through memory twice.
size_t CpuBackend::ConvWorkspaceFloats(const WindowGeometry& g, int out_channels) {
  return ConvSpace(g, out_channels).total() * threads_;
}

void CpuBackend::Conv2dForward(const float* x, const WindowGeometry& g, const float* w,
                               const float* bias, int out_channels, float* y, float* workspace,
                               size_t workspace_floats) {
  const ConvThreadSpace sp = ConvSpace(g, out_channels);
  const int teams = std::max<int>(1, std::min<size_t>(threads_, workspace_floats / sp.total()));
  FM_CHECK_GE(workspace_floats, sp.total());
  const int img_rows = g.out_h() * g.out_w();
  const int row_len = g.kernel_h * g.kernel_w * g.channels;
#pragma omp parallel num_threads(teams)
  {
    float* cols = workspace + sp.total() * omp_get_thread_num();
#pragma omp for schedule(static)
    for (int n = 0; n < g.batch; ++n) {
      Im2ColRows(x, g, n * img_rows, (n + 1) * img_rows, cols);
      float* yn = y + static_cast<size_t>(n) * img_rows * out_channels;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, img_rows, out_channels, row_len, 1.0f,
                  cols, row_len, w, row_len, 0.0f, yn, out_channels);
      for (int r = 0; r < img_rows; ++r) {
        float* row = yn + static_cast<size_t>(r) * out_channels;
        for (int c = 0; c < out_channels; ++c) row[c] += bias[c];
      }
    }
  }
}

namespace {

// Image n's share of a convolution's backward pass: dw and db get (accumulate) or are set to
// (otherwise) dy_n^T cols_n and the sum of dy_n's rows; image n of dx is written when dx is
// not null. cols and dcols: scratch of one image's im2col size each.
void ConvImageBackward(const float* x, const WindowGeometry& g, int n, const float* w,
                       int out_channels, const float* dy, float* cols, float* dcols, float* dw,
                       float* db, bool accumulate, float* dx) {
  const int img_rows = g.out_h() * g.out_w();
  const int row_len = g.kernel_h * g.kernel_w * g.channels;
  const float* dyn = dy + static_cast<size_t>(n) * img_rows * out_channels;
  Im2ColRows(x, g, n * img_rows, (n + 1) * img_rows, cols);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_channels, row_len, img_rows, 1.0f, dyn,
              out_channels, cols, row_len, accumulate ? 1.0f : 0.0f, dw, row_len);
  if (!accumulate) std::fill(db, db + out_channels, 0.0f);
  for (int r = 0; r < img_rows; ++r) {
    const float* row = dyn + static_cast<size_t>(r) * out_channels;
    for (int c = 0; c < out_channels; ++c) db[c] += row[c];
  }
  if (dx != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, img_rows, row_len, out_channels, 1.0f,
                dyn, out_channels, w, row_len, 0.0f, dcols, row_len);
    Col2ImImages(dcols, g, n, n + 1, dx);
  }
}

}  // namespace

void CpuBackend::Conv2dBackward(const float* x, const WindowGeometry& g, const float* w,
                                int out_channels, const float* dy, float* dw, float* dbias,
                                float* dx, float* workspace, size_t workspace_floats) {
  const ConvThreadSpace sp = ConvSpace(g, out_channels);
  const int teams = std::max<int>(1, std::min<size_t>(threads_, workspace_floats / sp.total()));
  FM_CHECK_GE(workspace_floats, sp.total());
  const size_t nw = static_cast<size_t>(out_channels) * g.kernel_h * g.kernel_w * g.channels;
  int team_size = 1;  // the team actually formed (1 when called inside another region)
#pragma omp parallel num_threads(teams)
  {
#pragma omp single
    team_size = omp_get_num_threads();
    float* cols = workspace + sp.total() * omp_get_thread_num();
    float* dcols = cols + sp.cols;
    float* my_dw = dcols + sp.cols;  // [out_channels * row_len] then [out_channels] bias
    std::fill(my_dw, my_dw + nw + out_channels, 0.0f);
#pragma omp for schedule(static)
    for (int n = 0; n < g.batch; ++n) {
      ConvImageBackward(x, g, n, w, out_channels, dy, cols, dcols, my_dw, my_dw + nw,
                        /*accumulate=*/true, dx);
    }
  }
  // Sum the per-thread partial gradients (small: out_channels * (row_len + 1) floats).
  const float* first = workspace + 2 * sp.cols;
  std::copy(first, first + nw, dw);
  std::copy(first + nw, first + nw + out_channels, dbias);
  for (int t = 1; t < team_size; ++t) {
    const float* part = workspace + sp.total() * t + 2 * sp.cols;
    for (size_t i = 0; i < nw; ++i) dw[i] += part[i];
    for (int c = 0; c < out_channels; ++c) dbias[c] += part[nw + c];
  }
}

Status CpuBackend::Conv2dPerExampleBackward(const float* x, const WindowGeometry& g,
                                            const float* w, int out_channels, const float* dy,
                                            float* per_example, float* dx, float* workspace,
                                            size_t workspace_floats) {
  const ConvThreadSpace sp = ConvSpace(g, out_channels);
  const int teams = std::max<int>(1, std::min<size_t>(threads_, workspace_floats / sp.total()));
  FM_CHECK_GE(workspace_floats, sp.total());
  const size_t nw = static_cast<size_t>(out_channels) * g.kernel_h * g.kernel_w * g.channels;
#pragma omp parallel for schedule(static) num_threads(teams)
  for (int n = 0; n < g.batch; ++n) {
    float* cols = workspace + sp.total() * omp_get_thread_num();
    float* dw = per_example + static_cast<size_t>(n) * (nw + out_channels);
    ConvImageBackward(x, g, n, w, out_channels, dy, cols, cols + sp.cols, dw, dw + nw,
                      /*accumulate=*/false, dx);
  }
  return Status::OK();
}

void CpuBackend::MaxPoolForward(const float* x, const WindowGeometry& g, float* y,
                                int32_t* argmax) {
  const int oh_n = g.out_h(), ow_n = g.out_w(), C = g.channels;
  const int rows = g.batch * oh_n * ow_n;
#pragma omp parallel for if (Parallel(size_t(rows) * C * g.kernel_h * g.kernel_w))
  for (int r = 0; r < rows; ++r) {
    const int n = r / (oh_n * ow_n);
    const int oh = (r / ow_n) % oh_n;
    const int ow = r % ow_n;
    float* out = y + static_cast<size_t>(r) * C;
    int32_t* arg = argmax + static_cast<size_t>(r) * C;
    for (int c = 0; c < C; ++c) {
      out[c] = -INFINITY;
      arg[c] = -1;
    }
    for (int kh = 0; kh < g.kernel_h; ++kh) {
      const int ih = oh * g.stride - g.pad + kh;
      if (ih < 0 || ih >= g.in_h) continue;
      for (int kw = 0; kw < g.kernel_w; ++kw) {
        const int iw = ow * g.stride - g.pad + kw;
        if (iw < 0 || iw >= g.in_w) continue;
        const int32_t base = ((n * g.in_h + ih) * g.in_w + iw) * C;
        for (int c = 0; c < C; ++c) {
          // Strict '>' keeps the first maximum: ties resolve the same on every backend.
          if (x[base + c] > out[c] || arg[c] < 0) {
            out[c] = x[base + c];
            arg[c] = base + c;
          }
        }
      }
    }
  }
}

void CpuBackend::MaxPoolBackward(const float* dy, const int32_t* argmax, size_t out_size,
                                 float* dx, size_t in_size) {
  std::fill(dx, dx + in_size, 0.0f);
  for (size_t i = 0; i < out_size; ++i) dx[argmax[i]] += dy[i];
}

Backend::LossResult CpuBackend::SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                                    int rows, int classes, float* dlogits) {
  LossResult result;
  const float inv_rows = 1.0f / static_cast<float>(rows);
  for (int r = 0; r < rows; ++r) {
    const size_t at = static_cast<size_t>(r) * classes;
    // The row math the CUDA kernel runs too (one definition, so the backends agree).
    kmath::SoftmaxCrossEntropyRow(logits + at, classes, labels[r], inv_rows,
                                  dlogits != nullptr ? dlogits + at : nullptr, &result.loss_sum,
                                  &result.correct);
  }
  return result;
}

namespace {

// One SGD step over [0, n): the arithmetic of every variant, element by element. Restrict
// pointers and the prox term as a template flag let the compiler vectorize it (a loop
// that may alias, with a branch inside, it left scalar).
template <bool kProx>
void SgdStepKernel(float* __restrict w, const float* __restrict grad, float* __restrict velocity,
                   const float* __restrict w_global, size_t n, float lr, float mom, float wd,
                   float mu) {
  if (velocity == nullptr) {  // momentum 0, no velocity kept: v = d
#pragma omp parallel for simd if (Parallel(n))
    for (size_t i = 0; i < n; ++i) {
      float d = grad[i] + wd * w[i];
      if constexpr (kProx) d += mu * (w[i] - w_global[i]);
      w[i] -= lr * d;
    }
    return;
  }
#pragma omp parallel for simd if (Parallel(n))
  for (size_t i = 0; i < n; ++i) {
    float d = grad[i] + wd * w[i];
    if constexpr (kProx) d += mu * (w[i] - w_global[i]);
    const float v = mom * velocity[i] + d;
    velocity[i] = v;
    w[i] -= lr * v;
  }
}

}  // namespace

void CpuBackend::SgdStep(float* w, const float* grad, float* velocity, const float* w_global,
                         size_t n, const SgdStepParams& p) {
  FM_CHECK(velocity != nullptr || p.momentum == 0.0f);
  if (w_global != nullptr && p.prox_mu != 0.0f) {
    SgdStepKernel<true>(w, grad, velocity, w_global, n, p.lr, p.momentum, p.weight_decay, p.prox_mu);
  } else {
    SgdStepKernel<false>(w, grad, velocity, nullptr, n, p.lr, p.momentum, p.weight_decay, 0.0f);
  }
}

std::unique_ptr<Backend> MakeCpuBackend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace fedmesh
