// CudaBatchedOps (core/cuda/cuda_batched_ops.h). Built only when FEDMESH_CUDA finds nvcc.
// Row-major GEMMs go to column-major cuBLAS through the transpose identity
// C^T = op(B)^T op(A)^T: the row-major buffers are read as their column-major transposes,
// so the call swaps the operands and m/n and keeps each operand's own trans flag.
// Element-wise kernels use grid-stride loops over (client, element) with 64-bit indices.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/cuda/cuda_batched_ops.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_info.h"
#include "core/cuda/kernel_math.h"

namespace fedmesh {
namespace {

constexpr int kBlock = 256;

// Blocks for `n` work items with a grid-stride loop (enough to fill any current GPU).
unsigned Blocks(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65536)));
}

#define FM_GRID_STRIDE(i, total)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (total); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void FillKernel(float* x, int64_t n, float value) {
  FM_GRID_STRIDE(i, n) { x[i] = value; }
}

__global__ void AddBiasKernel(float* y, int64_t stride_y, const float* bias, int64_t stride_bias,
                              int rows, int cols, int batch) {
  const int64_t per = static_cast<int64_t>(rows) * cols;
  FM_GRID_STRIDE(i, per * batch) {
    const int64_t b = i / per, e = i % per;
    y[b * stride_y + e] += bias[b * stride_bias + e % cols];
  }
}

__global__ void BiasGradKernel(const float* dy, int64_t stride_dy, float* dbias,
                               int64_t stride_dbias, int rows, int cols, int batch) {
  FM_GRID_STRIDE(i, static_cast<int64_t>(cols) * batch) {
    const int64_t b = i / cols;
    const int c = static_cast<int>(i % cols);
    dbias[b * stride_dbias + c] = kmath::BiasGradColumn(dy + b * stride_dy, rows, cols, c);
  }
}

// One thread per (client, row, column) of the padded step; column 0 also moves the label.
__global__ void GatherRowsKernel(const float* data, const int32_t* data_labels,
                                 const int64_t* offsets, const int32_t* idx, int64_t stride_idx,
                                 const int32_t* rows, int max_rows, int width, float* inputs,
                                 int64_t stride_inputs, int32_t* labels, int64_t stride_labels,
                                 int batch) {
  const int64_t per = static_cast<int64_t>(max_rows) * width;
  FM_GRID_STRIDE(i, per * batch) {
    const int64_t b = i / per, e = i % per;
    const int r = static_cast<int>(e / width);
    const int c = static_cast<int>(e % width);
    const bool valid = r < rows[b];
    const int64_t sample = valid ? offsets[b] + idx[b * stride_idx + r] : 0;
    inputs[b * stride_inputs + e] = valid ? data[sample * width + c] : 0.0f;
    if (c == 0) labels[b * stride_labels + r] = valid ? data_labels[sample] : 0;
  }
}

__global__ void ReluKernel(const float* x, float* y, int64_t n, int64_t stride, int batch) {
  FM_GRID_STRIDE(i, n * batch) {
    const int64_t at = (i / n) * stride + i % n;
    y[at] = kmath::Relu(x[at]);
  }
}

__global__ void ReluBackwardKernel(const float* y, const float* dy, float* dx, int64_t n,
                                   int64_t stride, int batch) {
  FM_GRID_STRIDE(i, n * batch) {
    const int64_t at = (i / n) * stride + i % n;
    dx[at] = kmath::ReluGrad(y[at], dy[at]);
  }
}

__global__ void DropoutKernel(const float* x, float* y, float* mask, int64_t n, int64_t stride,
                              float p, const uint64_t* seeds, int batch) {
  FM_GRID_STRIDE(i, n * batch) {
    const int64_t b = i / n, e = i % n;
    const int64_t at = b * stride + e;
    const float m = kmath::DropoutMask(seeds[b], static_cast<uint64_t>(e), p);
    mask[at] = m;
    y[at] = x[at] * m;
  }
}

__global__ void MultiplyKernel(const float* a, const float* b, float* out, int64_t n,
                               int64_t stride, int batch) {
  FM_GRID_STRIDE(i, n * batch) {
    const int64_t at = (i / n) * stride + i % n;
    out[at] = a[at] * b[at];
  }
}

// One thread per (client, row): the row's loss and hit into the scratch, and its dlogits.
__global__ void SoftmaxRowsKernel(const float* logits, const int32_t* labels, int64_t row_stride,
                                  int max_rows, int classes, const int32_t* rows, float* dlogits,
                                  double* row_loss, int32_t* row_hit, int batch) {
  FM_GRID_STRIDE(i, static_cast<int64_t>(max_rows) * batch) {
    const int64_t b = i / max_rows;
    const int r = static_cast<int>(i % max_rows);
    const int client_rows = rows[b];
    const int64_t row = b * row_stride + r;
    float* d = dlogits != nullptr ? dlogits + row * classes : nullptr;
    double loss = 0.0;
    int64_t hit = 0;
    if (r < client_rows) {
      const float inv_rows = 1.0f / static_cast<float>(client_rows);
      kmath::SoftmaxCrossEntropyRow(logits + row * classes, classes, labels[row], inv_rows, d,
                                    &loss, &hit);
    } else if (d != nullptr) {
      for (int c = 0; c < classes; ++c) d[c] = 0.0f;
    }
    row_loss[i] = loss;
    row_hit[i] = static_cast<int32_t>(hit);
  }
}

// One thread per client: sums its rows in order (as the CPU loop does) into the totals.
__global__ void SoftmaxSumKernel(const double* row_loss, const int32_t* row_hit, int max_rows,
                                 const int32_t* rows, double* loss_sum, int64_t* correct,
                                 int batch) {
  FM_GRID_STRIDE(b, static_cast<int64_t>(batch)) {
    const int n = min(rows[b], max_rows);
    double s = 0.0;
    int64_t hits = 0;
    for (int r = 0; r < n; ++r) {
      s += row_loss[b * max_rows + r];
      hits += row_hit[b * max_rows + r];
    }
    loss_sum[b] += s;
    correct[b] += hits;
  }
}

__global__ void SgdKernel(float* w, const float* grad, float* velocity, const float* w_global,
                          int64_t n, int64_t stride, SgdStepParams p, const int32_t* active,
                          int batch) {
  const bool prox = w_global != nullptr && p.prox_mu != 0.0f;
  FM_GRID_STRIDE(i, n * batch) {
    const int64_t b = i / n;
    if (active[b] == 0) continue;
    const int64_t at = b * stride + i % n;
    kmath::SgdElement(&w[at], grad[at], velocity != nullptr ? &velocity[at] : nullptr,
                      prox ? w_global[at] : 0.0f, prox, p);
  }
}

class CudaBatchedOps final : public BatchedOps {
 public:
  CudaBatchedOps(int device, cudaStream_t stream, cublasHandle_t handle)
      : device_(device), stream_(stream), handle_(handle) {}

  ~CudaBatchedOps() override {
    // Best effort: a failed device cannot be cleaned up any better.
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (row_loss_ != nullptr) cudaFree(row_loss_);
    if (row_hit_ != nullptr) cudaFree(row_hit_);
    cublasDestroy(handle_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override {
    return "cuda:" + std::to_string(device_) + " (" + CudaDeviceDescription(device_) + ")";
  }
  BackendKind kind() const override { return BackendKind::kCuda; }

  Status Synchronize() override {
    if (Begin()) Check(FM_CUDA_STATUS(cudaStreamSynchronize(stream_)));
    return status_;
  }

  Result<void*> Allocate(size_t bytes) override {
    if (!Begin()) return status_;
    void* p = nullptr;
    const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    Status s = FM_CUDA_STATUS(cudaMalloc(&p, rounded));
    if (!s.ok()) {
      // Running out of device memory is the caller's to handle (fewer clients at once);
      // it does not poison the instance.
      cudaGetLastError();
      return s.WithContext("allocating " + std::to_string(bytes) +
                           " bytes for batched training (train fewer clients at once)");
    }
    Status zero = FM_CUDA_STATUS(cudaMemsetAsync(p, 0, rounded, stream_));
    if (!zero.ok()) {
      cudaFree(p);
      Check(zero);
      return zero;
    }
    return p;
  }

  void Free(void* p) override {
    if (p == nullptr) return;
    cudaSetDevice(device_);
    // Kernels queued on our stream may still use p (also after a failure, which leaves the
    // work queued before it running). cudaFree synchronises in practice, but the runtime
    // does not promise it: wait for the stream first. Failures are recorded.
    Check(FM_CUDA_STATUS(cudaStreamSynchronize(stream_)));
    Check(FM_CUDA_STATUS(cudaFree(p)));
  }

  void CopyFromHost(void* dst, const void* src, size_t bytes) override {
    if (!Begin() || bytes == 0) return;
    if (!Check(FM_CUDA_STATUS(
            cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_)))) {
      return;
    }
    // Always wait: `src` is the caller's again on return. For page-locked memory the copy
    // runs later; for pageable memory the runtime documents cudaMemcpyAsync only as "might
    // be synchronous" (staging is not promised to be complete on return, and HMM systems
    // may read the pages directly). BatchedTrainer rewrites its pageable staging buffer
    // for the next step, and frees temporaries, right after this returns.
    Check(FM_CUDA_STATUS(cudaStreamSynchronize(stream_)));
  }

  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (!Begin() || bytes == 0) return;
    Check(FM_CUDA_STATUS(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_)));
    Check(FM_CUDA_STATUS(cudaStreamSynchronize(stream_)));
  }

  void Fill(float* x, size_t n, float value) override {
    if (!Begin() || n == 0) return;
    FillKernel<<<Blocks(n), kBlock, 0, stream_>>>(x, static_cast<int64_t>(n), value);
    Launched();
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta, float* c,
            int ldc, int64_t stride_c, int batch, GemmRows /*which*/,
            const int32_t* /*rows*/) override {
    // One uniform call over the padded shape: per-client sizes would need a grouped GEMM,
    // and the padding's contribution is what the GemmRows contract allows.
    if (!Begin() || batch <= 0 || m <= 0 || n <= 0) return;
    Check(FM_CUBLAS_STATUS(cublasSgemmStridedBatched(
        handle_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
        &alpha, b, ldb, stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch)));
  }

  void GatherRows(const float* data, const int32_t* data_labels, const int64_t* offsets,
                  const int32_t* idx, int64_t stride_idx, const int32_t* rows, int max_rows,
                  int width, float* inputs, int64_t stride_inputs, int32_t* labels,
                  int64_t stride_labels, int batch) override {
    const int64_t total = static_cast<int64_t>(max_rows) * width * batch;
    if (!Begin() || total <= 0) return;
    GatherRowsKernel<<<Blocks(total), kBlock, 0, stream_>>>(
        data, data_labels, offsets, idx, stride_idx, rows, max_rows, width, inputs, stride_inputs,
        labels, stride_labels, batch);
    Launched();
  }

  void AddBias(float* y, int64_t stride_y, const float* bias, int64_t stride_bias, int rows,
               int cols, int batch) override {
    const int64_t total = static_cast<int64_t>(rows) * cols * batch;
    if (!Begin() || total <= 0) return;
    AddBiasKernel<<<Blocks(total), kBlock, 0, stream_>>>(y, stride_y, bias, stride_bias, rows, cols,
                                                         batch);
    Launched();
  }

  void BiasGrad(const float* dy, int64_t stride_dy, float* dbias, int64_t stride_dbias, int rows,
                int cols, int batch) override {
    const int64_t total = static_cast<int64_t>(cols) * batch;
    if (!Begin() || total <= 0) return;
    BiasGradKernel<<<Blocks(total), kBlock, 0, stream_>>>(dy, stride_dy, dbias, stride_dbias, rows,
                                                          cols, batch);
    Launched();
  }

  void ReluForward(const float* x, float* y, size_t n, int64_t stride, int batch) override {
    if (!Begin() || n == 0 || batch <= 0) return;
    ReluKernel<<<Blocks(static_cast<int64_t>(n) * batch), kBlock, 0, stream_>>>(
        x, y, static_cast<int64_t>(n), stride, batch);
    Launched();
  }

  void ReluBackward(const float* y, const float* dy, float* dx, size_t n, int64_t stride,
                    int batch) override {
    if (!Begin() || n == 0 || batch <= 0) return;
    ReluBackwardKernel<<<Blocks(static_cast<int64_t>(n) * batch), kBlock, 0, stream_>>>(
        y, dy, dx, static_cast<int64_t>(n), stride, batch);
    Launched();
  }

  void DropoutForward(const float* x, float* y, float* mask, size_t n, int64_t stride, float p,
                      const uint64_t* seeds, int batch) override {
    if (!Begin() || n == 0 || batch <= 0) return;
    DropoutKernel<<<Blocks(static_cast<int64_t>(n) * batch), kBlock, 0, stream_>>>(
        x, y, mask, static_cast<int64_t>(n), stride, p, seeds, batch);
    Launched();
  }

  void Multiply(const float* a, const float* b, float* out, size_t n, int64_t stride,
                int batch) override {
    if (!Begin() || n == 0 || batch <= 0) return;
    MultiplyKernel<<<Blocks(static_cast<int64_t>(n) * batch), kBlock, 0, stream_>>>(
        a, b, out, static_cast<int64_t>(n), stride, batch);
    Launched();
  }

  void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int64_t row_stride,
                           int max_rows, int classes, const int32_t* rows, float* dlogits,
                           double* loss_sum, int64_t* correct, int batch) override {
    if (!Begin() || batch <= 0 || max_rows <= 0) return;
    const int64_t cells = static_cast<int64_t>(max_rows) * batch;
    if (!ReserveScratch(cells)) return;
    SoftmaxRowsKernel<<<Blocks(cells), kBlock, 0, stream_>>>(
        logits, labels, row_stride, max_rows, classes, rows, dlogits, row_loss_, row_hit_, batch);
    Launched();
    SoftmaxSumKernel<<<Blocks(batch), kBlock, 0, stream_>>>(row_loss_, row_hit_, max_rows, rows,
                                                            loss_sum, correct, batch);
    Launched();
  }

  void SgdStep(float* w, const float* grad, float* velocity, const float* w_global, size_t n,
               int64_t stride, const SgdStepParams& p, const int32_t* active, int batch) override {
    if (!Begin() || n == 0 || batch <= 0) return;
    SgdKernel<<<Blocks(static_cast<int64_t>(n) * batch), kBlock, 0, stream_>>>(
        w, grad, velocity, w_global, static_cast<int64_t>(n), stride, p, active, batch);
    Launched();
  }

 private:
  // False once an error was recorded: the op is skipped. Selects the device for this thread.
  bool Begin() {
    if (!status_.ok()) return false;
    if (!Check(FM_CUDA_STATUS(cudaSetDevice(device_)))) return false;
    // Launched() reads cudaGetLastError(), which also returns a failure an earlier runtime
    // call on this thread left behind (its own call returned it already): clear it so it
    // is not blamed on our kernel and made sticky here. Context errors survive this.
    cudaGetLastError();
    return true;
  }
  // Keeps the first failure. Returns s.ok().
  bool Check(Status s) {
    if (s.ok()) return true;
    // (The cast: nvcc warns about the discarded Status& of the [[nodiscard]] type.)
    if (status_.ok()) static_cast<void>(status_ = std::move(s));
    return false;
  }
  // A launch's configuration errors surface here; faults during execution surface at the
  // next synchronizing call.
  void Launched() { Check(FM_CUDA_STATUS(cudaGetLastError())); }

  // The per-row scratch of SoftmaxCrossEntropy, grown on demand.
  bool ReserveScratch(int64_t cells) {
    if (cells <= scratch_cells_) return true;
    // The previous call's kernels may still read the old scratch (see Free).
    if (!Check(FM_CUDA_STATUS(cudaStreamSynchronize(stream_)))) return false;
    if (row_loss_ != nullptr) Check(FM_CUDA_STATUS(cudaFree(row_loss_)));
    if (row_hit_ != nullptr) Check(FM_CUDA_STATUS(cudaFree(row_hit_)));
    row_loss_ = nullptr;
    row_hit_ = nullptr;
    scratch_cells_ = 0;
    Check(FM_CUDA_STATUS(cudaMalloc(&row_loss_, cells * sizeof(double))));
    Check(FM_CUDA_STATUS(cudaMalloc(&row_hit_, cells * sizeof(int32_t))));
    if (!status_.ok()) return false;
    scratch_cells_ = cells;
    return true;
  }

  int device_;
  cudaStream_t stream_;
  cublasHandle_t handle_;
  Status status_;
  double* row_loss_ = nullptr;
  int32_t* row_hit_ = nullptr;
  int64_t scratch_cells_ = 0;
};

}  // namespace

Result<std::unique_ptr<BatchedOps>> MakeCudaBatchedOps(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (device < 0 || device >= count) {
    return Status::Unavailable("CUDA device " + std::to_string(device) + " requested but " +
                               std::to_string(count) + " device(s) available (" +
                               CudaUnavailableReason() + "); use device cpu or auto");
  }
  FM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  FM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle = nullptr;
  const Status s = [&]() -> Status {
    FM_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
    // FP32 throughout: no TF32 tensor-core rounding (CUBLAS_DEFAULT_MATH keeps the
    // requested precision), so results stay within float rounding of the CPU's.
    FM_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    FM_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, stream));
    return Status::OK();
  }();
  if (!s.ok()) {
    if (handle != nullptr) cublasDestroy(handle);
    cudaStreamDestroy(stream);
    return s;
  }
  return std::unique_ptr<BatchedOps>(new CudaBatchedOps(device, stream, handle));
}

}  // namespace fedmesh
