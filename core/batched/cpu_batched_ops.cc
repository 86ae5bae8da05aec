#include "core/batched/cpu_batched_ops.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace fedmesh {

CpuBatchedOps::CpuBatchedOps(int threads)
    : threads_(threads > 0 ? threads
                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
      backend_(1) {}

std::string CpuBatchedOps::name() const {
  return "cpu (" + std::to_string(threads_) + (threads_ == 1 ? " thread)" : " threads)");
}

template <typename Fn>
void CpuBatchedOps::ForClients(int batch, Fn&& fn) {
  const int teams = std::min(threads_, batch);
  if (teams <= 1) {
    for (int b = 0; b < batch; ++b) fn(b);
    return;
  }
  // Static: client b always runs on the same thread for a given team, though nothing
  // depends on it (every client's work is independent).
#pragma omp parallel for num_threads(teams) schedule(static)
  for (int b = 0; b < batch; ++b) fn(b);
}

Result<void*> CpuBatchedOps::Allocate(size_t bytes) {
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return Status::Unavailable("out of host memory allocating " + std::to_string(bytes) +
                               " bytes for batched training; train fewer clients at once");
  }
  std::memset(p, 0, rounded);
  return p;
}

void CpuBatchedOps::Free(void* p) { std::free(p); }

void CpuBatchedOps::CopyFromHost(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuBatchedOps::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuBatchedOps::Fill(float* x, size_t n, float value) { std::fill(x, x + n, value); }

void CpuBatchedOps::GatherRows(const float* data, const int32_t* data_labels,
                               const int64_t* offsets, const int32_t* idx, int64_t stride_idx,
                               const int32_t* rows, int max_rows, int width, float* inputs,
                               int64_t stride_inputs, int32_t* labels, int64_t stride_labels,
                               int batch) {
  const size_t w = static_cast<size_t>(width);
  ForClients(batch, [&](int b) {
    const float* from = data + static_cast<size_t>(offsets[b]) * w;
    const int32_t* from_labels = data_labels + offsets[b];
    const int32_t* order = idx + b * stride_idx;
    float* x = inputs + b * stride_inputs;
    int32_t* y = labels + b * stride_labels;
    const int n = rows[b];
    for (int r = 0; r < n; ++r) {
      std::memcpy(x + r * w, from + static_cast<size_t>(order[r]) * w, w * sizeof(float));
      y[r] = from_labels[order[r]];
    }
    std::fill(x + n * w, x + static_cast<size_t>(max_rows) * w, 0.0f);
    std::fill(y + n, y + max_rows, 0);
  });
}

void CpuBatchedOps::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                         int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                         int batch, GemmRows which, const int32_t* rows) {
  ForClients(batch, [&](int i) {
    // The valid part is a leading block of each operand: same pointers and strides, smaller
    // m or k. OpenBLAS may pick other kernels for other shapes, so this, not the padded
    // shape, is what reproduces the sequential Trainer's GEMM bit for bit.
    const int r = which == GemmRows::kAll ? 0 : std::max(0, rows[i]);
    const int mi = which == GemmRows::kM ? std::min(m, r) : m;
    const int ki = which == GemmRows::kK ? std::min(k, r) : k;
    float* ci = c + i * stride_c;
    if (mi > 0 && ki > 0) {
      backend_.Gemm(trans_a, trans_b, mi, n, ki, alpha, a + i * stride_a, lda, b + i * stride_b,
                    ldb, beta, ci, ldc);
    }
    // Rows the GEMM did not touch: C = beta * C (the zero product), exactly zero for beta 0.
    for (int row = (ki > 0 ? mi : 0); row < m; ++row) {
      float* cr = ci + static_cast<int64_t>(row) * ldc;
      for (int col = 0; col < n; ++col) cr[col] = beta == 0.0f ? 0.0f : beta * cr[col];
    }
  });
}

void CpuBatchedOps::AddBias(float* y, int64_t stride_y, const float* bias, int64_t stride_bias,
                            int rows, int cols, int batch) {
  ForClients(batch, [&](int b) {
    backend_.AddBias(y + b * stride_y, bias + b * stride_bias, rows, cols);
  });
}

void CpuBatchedOps::BiasGrad(const float* dy, int64_t stride_dy, float* dbias, int64_t stride_dbias,
                             int rows, int cols, int batch) {
  ForClients(batch, [&](int b) {
    backend_.BiasGrad(dy + b * stride_dy, dbias + b * stride_dbias, rows, cols);
  });
}

void CpuBatchedOps::ReluForward(const float* x, float* y, size_t n, int64_t stride, int batch) {
  ForClients(batch, [&](int b) { backend_.ReluForward(x + b * stride, y + b * stride, n); });
}

void CpuBatchedOps::ReluBackward(const float* y, const float* dy, float* dx, size_t n,
                                 int64_t stride, int batch) {
  ForClients(batch, [&](int b) {
    backend_.ReluBackward(y + b * stride, dy + b * stride, dx + b * stride, n);
  });
}

void CpuBatchedOps::DropoutForward(const float* x, float* y, float* mask, size_t n, int64_t stride,
                                   float p, const uint64_t* seeds, int batch) {
  ForClients(batch, [&](int b) {
    backend_.DropoutForward(x + b * stride, y + b * stride, mask + b * stride, n, p, seeds[b]);
  });
}

void CpuBatchedOps::Multiply(const float* a, const float* b, float* out, size_t n, int64_t stride,
                             int batch) {
  ForClients(batch, [&](int i) {
    backend_.Multiply(a + i * stride, b + i * stride, out + i * stride, n);
  });
}

void CpuBatchedOps::SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                        int64_t row_stride, int max_rows, int classes,
                                        const int32_t* rows, float* dlogits, double* loss_sum,
                                        int64_t* correct, int batch) {
  ForClients(batch, [&](int b) {
    const int r = std::clamp(rows[b], 0, max_rows);
    float* d = dlogits != nullptr ? dlogits + b * row_stride * classes : nullptr;
    if (r > 0) {
      const auto result = backend_.SoftmaxCrossEntropy(logits + b * row_stride * classes,
                                                       labels + b * row_stride, r, classes, d);
      loss_sum[b] += result.loss_sum;
      correct[b] += result.correct;
    }
    if (d != nullptr) {
      std::fill(d + static_cast<int64_t>(r) * classes, d + static_cast<int64_t>(max_rows) * classes,
                0.0f);
    }
  });
}

void CpuBatchedOps::SgdStep(float* w, const float* grad, float* velocity, const float* w_global,
                            size_t n, int64_t stride, const SgdStepParams& p, const int32_t* active,
                            int batch) {
  ForClients(batch, [&](int b) {
    if (active[b] == 0) return;
    backend_.SgdStep(w + b * stride, grad + b * stride,
                     velocity != nullptr ? velocity + b * stride : nullptr,
                     w_global != nullptr ? w_global + b * stride : nullptr, n, p);
  });
}

std::unique_ptr<BatchedOps> MakeCpuBatchedOps(int threads) {
  return std::make_unique<CpuBatchedOps>(threads);
}

}  // namespace fedmesh
