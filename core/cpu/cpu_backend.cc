#include "core/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/check.h"
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

void CpuBackend::Im2Col(const float* x, const WindowGeometry& g, float* cols) {
  const int oh_n = g.out_h(), ow_n = g.out_w(), C = g.channels;
  const size_t row_len = static_cast<size_t>(g.kernel_h) * g.kernel_w * C;
  const int rows = g.batch * oh_n * ow_n;
#pragma omp parallel for if (Parallel(size_t(rows) * row_len))
  for (int r = 0; r < rows; ++r) {
    const int n = r / (oh_n * ow_n);
    const int oh = (r / ow_n) % oh_n;
    const int ow = r % ow_n;
    float* dst = cols + static_cast<size_t>(r) * row_len;
    const float* img = x + static_cast<size_t>(n) * g.in_h * g.in_w * C;
    for (int kh = 0; kh < g.kernel_h; ++kh) {
      const int ih = oh * g.stride - g.pad + kh;
      for (int kw = 0; kw < g.kernel_w; ++kw, dst += C) {
        const int iw = ow * g.stride - g.pad + kw;
        if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) {
          std::memset(dst, 0, sizeof(float) * C);
        } else {
          std::memcpy(dst, img + (static_cast<size_t>(ih) * g.in_w + iw) * C, sizeof(float) * C);
        }
      }
    }
  }
}

void CpuBackend::Col2Im(const float* dcols, const WindowGeometry& g, float* dx) {
  const int oh_n = g.out_h(), ow_n = g.out_w(), C = g.channels;
  const size_t row_len = static_cast<size_t>(g.kernel_h) * g.kernel_w * C;
  const size_t img_size = static_cast<size_t>(g.in_h) * g.in_w * C;
  // One image per iteration: images never share pixels, so threads never collide.
#pragma omp parallel for if (Parallel(size_t(g.batch) * oh_n * ow_n * row_len))
  for (int n = 0; n < g.batch; ++n) {
    float* img = dx + n * img_size;
    std::fill(img, img + img_size, 0.0f);
    const float* src = dcols + static_cast<size_t>(n) * oh_n * ow_n * row_len;
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
    const float* z = logits + static_cast<size_t>(r) * classes;
    int best = 0;
    float zmax = z[0];
    for (int c = 1; c < classes; ++c) {
      if (z[c] > zmax) {
        zmax = z[c];
        best = c;
      }
    }
    double sum = 0.0;
    for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - zmax));
    const int label = labels[r];
    result.loss_sum += std::log(sum) - static_cast<double>(z[label] - zmax);
    result.correct += (best == label);
    if (dlogits != nullptr) {
      float* d = dlogits + static_cast<size_t>(r) * classes;
      const double inv_sum = 1.0 / sum;
      for (int c = 0; c < classes; ++c) {
        d[c] = static_cast<float>(std::exp(static_cast<double>(z[c] - zmax)) * inv_sum) * inv_rows;
      }
      d[label] -= inv_rows;
    }
  }
  return result;
}

void CpuBackend::SgdStep(float* w, const float* grad, float* velocity, const float* w_global,
                         size_t n, const SgdStepParams& p) {
  const float lr = p.lr, mom = p.momentum, wd = p.weight_decay, mu = p.prox_mu;
  const bool prox = w_global != nullptr && mu != 0.0f;
#pragma omp parallel for if (Parallel(n))
  for (size_t i = 0; i < n; ++i) {
    float d = grad[i] + wd * w[i];
    if (prox) d += mu * (w[i] - w_global[i]);
    const float v = mom * velocity[i] + d;
    velocity[i] = v;
    w[i] -= lr * v;
  }
}

std::unique_ptr<Backend> MakeCpuBackend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace fedmesh
