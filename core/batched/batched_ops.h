// BatchedOps: the kernels that train B small client models at once (core/batched/
// batched_trainer.h). Every operand holds B clients' tensors one after another at a fixed
// stride in one buffer: client b's matrix X starts at x + b * stride_x. Each op does for
// every client b in [0, batch) exactly what the Backend op of the same name does to that
// client's own tensors (core/backend.h), so a batched run reproduces B sequential ones.
// Per-client arguments (row counts, dropout seeds, active flags) are arrays in ops memory,
// uploaded by the caller together with the step's input batch.
//
// Implementations, built by the factories below: CpuBatchedOps (core/batched/
// cpu_batched_ops.h: a loop over the clients calling the CPU backend's kernels, run in CI)
// and CudaBatchedOps (core/cuda/cuda_batched_ops.h: strided-batched cuBLAS GEMMs and
// kernels indexed by (client, element) that call core/cuda/kernel_math.h).
//
// Errors are sticky, as on Backend: the kernels return nothing; the first failure (a CUDA
// or cuBLAS call, an allocation) is kept, later calls do nothing, and Synchronize() returns
// it. Buffers' contents are undefined after a failure.
// Plain C++17 with no CUDA headers: core/cuda/*.cu include it.
// Thread-safety: one thread drives an instance at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/backend.h"
#include "core/owned_buffer.h"
#include "core/status.h"

namespace fedmesh {

// Which dimension of a batched GEMM runs over the clients' sample rows (Gemm's `rows`):
// clients train batches of different sizes, padded to one shape.
enum class GemmRows {
  kAll,  // every client uses the whole of m and k
  kM,    // client b's op(A_b) and C_b hold rows[b] <= m valid rows; the rest is padding
  kK,    // client b's inner dimension holds rows[b] <= k valid entries; the rest is padding
};

class BatchedOps {
 public:
  virtual ~BatchedOps() = default;

  // "cpu (2 threads)", "cuda:0 (NVIDIA H100 ...)".
  virtual std::string name() const = 0;
  virtual BackendKind kind() const = 0;
  // Waits for the queued work and returns the first error met since creation.
  virtual Status Synchronize() = 0;

  // ---- memory -----------------------------------------------------------------------
  // `bytes` of ops memory, zero-filled, aligned to at least 64 bytes. Freed with Free().
  virtual Result<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  // `src` (host memory) may be reused as soon as the call returns.
  virtual void CopyFromHost(void* dst, const void* src, size_t bytes) = 0;
  // Waits for the queued work, then copies: `dst` is filled when the call returns.
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void Fill(float* x, size_t n, float value) = 0;

  // ---- kernels over `batch` clients ----------------------------------------------------
  // The step's samples, gathered from the clients' data already in ops memory: client b's
  // samples start at row offsets[b] of `data` (rows of `width` floats) and `data_labels`;
  // for r < rows[b], row r of its input block (inputs + b * stride_inputs) and labels[b *
  // stride_labels + r] become sample idx[b * stride_idx + r] of them. Rows [rows[b],
  // max_rows) of the block and of its labels are zero-filled. offsets, idx and rows are in
  // ops memory. REQUIRES: every idx names one of the client's samples.
  virtual void GatherRows(const float* data, const int32_t* data_labels, const int64_t* offsets,
                          const int32_t* idx, int64_t stride_idx, const int32_t* rows,
                          int max_rows, int width, float* inputs, int64_t stride_inputs,
                          int32_t* labels, int64_t stride_labels, int batch) = 0;
  // C_b[m,n] = alpha * op(A_b) * op(B_b) + beta * C_b, row-major (Backend::Gemm), with
  // A_b = a + b * stride_a and so on. With `rows` (ops memory; ignored for kAll) the
  // padding may be skipped: the valid part of C_b is then what Backend::Gemm gives for
  // m = rows[b] (kM) or k = rows[b] (kK) on the same pointers. kM: C_b's padding rows are
  // unspecified on return (the CPU scales them by beta; CUDA computes them from the padding
  // of op(A_b)). kK: the padding entries of op(A_b) or op(B_b) must be zeros, so that
  // including them, as one uniform cuBLAS call does, adds exact zeros.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, int64_t stride_a, const float* b, int ldb, int64_t stride_b,
                    float beta, float* c, int ldc, int64_t stride_c, int batch, GemmRows which,
                    const int32_t* rows) = 0;
  // y_b[r, c] += bias_b[c] over rows x cols (Backend::AddBias).
  virtual void AddBias(float* y, int64_t stride_y, const float* bias, int64_t stride_bias, int rows,
                       int cols, int batch) = 0;
  // dbias_b[c] = sum over r < rows of dy_b[r, c], rows in order (Backend::BiasGrad).
  virtual void BiasGrad(const float* dy, int64_t stride_dy, float* dbias, int64_t stride_dbias,
                        int rows, int cols, int batch) = 0;
  // The element-wise ops cover the first n elements of each client's block; x, y, dy, dx
  // and mask share the layout (client b's block at b * stride).
  virtual void ReluForward(const float* x, float* y, size_t n, int64_t stride, int batch) = 0;
  virtual void ReluBackward(const float* y, const float* dy, float* dx, size_t n, int64_t stride,
                            int batch) = 0;
  // Inverted dropout with client b's own seed: mask_b and y_b are what
  // Backend::DropoutForward(x_b, y_b, mask_b, n, p, seeds[b]) writes.
  virtual void DropoutForward(const float* x, float* y, float* mask, size_t n, int64_t stride,
                              float p, const uint64_t* seeds, int batch) = 0;
  // out_b = a_b * b_b element-wise (the dropout backward pass).
  virtual void Multiply(const float* a, const float* b, float* out, size_t n, int64_t stride,
                        int batch) = 0;
  // Softmax cross-entropy of client b's first rows[b] rows (Backend::SoftmaxCrossEntropy):
  // logits_b = logits + b * row_stride * classes, labels_b = labels + b * row_stride.
  // Adds the summed loss of those rows to loss_sum[b] and the count classified right to
  // correct[b] (ops memory), and writes dlogits_b = (softmax - onehot) / rows[b] for them.
  // Rows [rows[b], max_rows) are padding: dlogits zero, no loss. A client with rows[b] == 0
  // has only padding. REQUIRES: rows[b] <= max_rows <= row_stride.
  virtual void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int64_t row_stride,
                                   int max_rows, int classes, const int32_t* rows, float* dlogits,
                                   double* loss_sum, int64_t* correct, int batch) = 0;
  // One fused SGD step (Backend::SgdStep) on each client whose active[b] != 0; an inactive
  // client's weights and velocity are left untouched. w_global (the FedProx anchors, same
  // layout as w) may be null, and so may velocity when p.momentum == 0.
  virtual void SgdStep(float* w, const float* grad, float* velocity, const float* w_global,
                       size_t n, int64_t stride, const SgdStepParams& p, const int32_t* active,
                       int batch) = 0;
};

// An owned typed buffer in a BatchedOps' memory (RAII, move-only).
template <typename T>
class OpsBuffer : public OwnedBuffer<T, BatchedOps> {
 public:
  OpsBuffer() = default;
  static Result<OpsBuffer> Make(BatchedOps* ops, size_t count) {
    if (count == 0) return OpsBuffer(ops, nullptr, 0);
    Result<void*> p = ops->Allocate(count * sizeof(T));
    if (!p.ok()) return p.status();
    return OpsBuffer(ops, static_cast<T*>(*p), count);
  }

 private:
  using OwnedBuffer<T, BatchedOps>::OwnedBuffer;
};

// The CPU implementation: `threads` OpenMP threads split the clients (0 = all cores).
std::unique_ptr<BatchedOps> MakeCpuBatchedOps(int threads);

// The ops for `device`: "cpu", "cuda", "cuda:N" or "auto" (CUDA when this build has it and
// a GPU is present, otherwise CPU). Unavailable, with the reason and what to set instead,
// when a CUDA device is asked for and there is none; InvalidArgument for a malformed name.
Result<std::unique_ptr<BatchedOps>> MakeBatchedOps(std::string_view device, int threads);

// OK when `device` is a name MakeBatchedOps accepts (whether or not the device exists).
Status ValidateDeviceName(std::string_view device);

}  // namespace fedmesh
