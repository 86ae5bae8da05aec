// CpuBatchedOps: BatchedOps on the host. Each op loops over the clients and calls, for
// each, the one-thread CPU backend's kernel on that client's tensors (the very code the
// sequential Trainer runs), on that client's own row count (GemmRows), so batched CPU
// training gives the sequential results bit for bit. The
// clients are split over OpenMP threads; inside that parallel region OpenBLAS (OpenMP
// build) runs each GEMM on its caller's thread. This is what CI runs: the batched
// trainer's logic is tested here, and the CUDA ops are compared against it on a GPU.
// Thread-safety: one thread drives an instance at a time.
#pragma once

#include <memory>
#include <string>

#include "core/batched/batched_ops.h"
#include "core/cpu/cpu_backend.h"

namespace fedmesh {

class CpuBatchedOps final : public BatchedOps {
 public:
  // `threads` workers over the clients; 0 = all cores.
  explicit CpuBatchedOps(int threads);

  std::string name() const override;
  BackendKind kind() const override { return BackendKind::kCpu; }
  Status Synchronize() override { return status_; }

  Result<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;
  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Fill(float* x, size_t n, float value) override;

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta, float* c,
            int ldc, int64_t stride_c, int batch, GemmRows which, const int32_t* rows) override;
  void AddBias(float* y, int64_t stride_y, const float* bias, int64_t stride_bias, int rows,
               int cols, int batch) override;
  void BiasGrad(const float* dy, int64_t stride_dy, float* dbias, int64_t stride_dbias, int rows,
                int cols, int batch) override;
  void GatherRows(const float* data, const int32_t* data_labels, const int64_t* offsets,
                  const int32_t* idx, int64_t stride_idx, const int32_t* rows, int max_rows,
                  int width, float* inputs, int64_t stride_inputs, int32_t* labels,
                  int64_t stride_labels, int batch) override;
  void ReluForward(const float* x, float* y, size_t n, int64_t stride, int batch) override;
  void ReluBackward(const float* y, const float* dy, float* dx, size_t n, int64_t stride,
                    int batch) override;
  void DropoutForward(const float* x, float* y, float* mask, size_t n, int64_t stride, float p,
                      const uint64_t* seeds, int batch) override;
  void Multiply(const float* a, const float* b, float* out, size_t n, int64_t stride,
                int batch) override;
  void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int64_t row_stride,
                           int max_rows, int classes, const int32_t* rows, float* dlogits,
                           double* loss_sum, int64_t* correct, int batch) override;
  void SgdStep(float* w, const float* grad, float* velocity, const float* w_global, size_t n,
               int64_t stride, const SgdStepParams& p, const int32_t* active, int batch) override;

 private:
  // Runs fn(b) for every client, over the threads when there is more than one client.
  template <typename Fn>
  void ForClients(int batch, Fn&& fn);

  int threads_;
  CpuBackend backend_;  // one thread: the kernels run inside our own parallel loop
  Status status_;
};

}  // namespace fedmesh
