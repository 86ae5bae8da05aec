// CpuBackend: the Backend on the host. GEMMs go to OpenBLAS sgemm; element-wise kernels,
// im2col/col2im and pooling are plain loops the compiler vectorises, split over OpenMP
// threads only when the work is large enough to pay for the fork (small batches stay on
// one thread, where the fork would cost more than the loop).
// Thread-safety: one thread drives an instance at a time.
#pragma once

#include "core/backend.h"

namespace fedmesh {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);

  BackendKind kind() const override { return BackendKind::kCpu; }
  std::string name() const override { return "cpu"; }
  void set_threads(int n) override;
  int threads() const override { return threads_; }

  void* Allocate(size_t bytes) override;
  void Free(void* p) override;
  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  bool host_memory() const override { return true; }
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Fill(float* x, size_t n, float value) override;

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            int lda, const float* b, int ldb, float beta, float* c, int ldc) override;
  void AddBias(float* y, const float* bias, int rows, int cols) override;
  void BiasGrad(const float* dy, float* dbias, int rows, int cols) override;
  void Axpy(size_t n, float alpha, const float* x, float* y) override;
  void Scale(size_t n, float alpha, float* x) override;
  double SquaredNorm(size_t n, const float* x) override;

  void ReluForward(const float* x, float* y, size_t n) override;
  void ReluBackward(const float* y, const float* dy, float* dx, size_t n) override;
  void DropoutForward(const float* x, float* y, float* mask, size_t n, float p,
                      uint64_t seed) override;
  void Multiply(const float* a, const float* b, float* out, size_t n) override;

  void Im2Col(const float* x, const WindowGeometry& g, float* cols) override;
  void Col2Im(const float* dcols, const WindowGeometry& g, float* dx) override;
  size_t ConvWorkspaceFloats(const WindowGeometry& g, int out_channels) override;
  void Conv2dForward(const float* x, const WindowGeometry& g, const float* w, const float* bias,
                     int out_channels, float* y, float* workspace,
                     size_t workspace_floats) override;
  void Conv2dBackward(const float* x, const WindowGeometry& g, const float* w, int out_channels,
                      const float* dy, float* dw, float* dbias, float* dx, float* workspace,
                      size_t workspace_floats) override;
  Status Conv2dPerExampleBackward(const float* x, const WindowGeometry& g, const float* w,
                                  int out_channels, const float* dy, float* per_example, float* dx,
                                  float* workspace, size_t workspace_floats) override;
  void MaxPoolForward(const float* x, const WindowGeometry& g, float* y,
                      int32_t* argmax) override;
  void MaxPoolBackward(const float* dy, const int32_t* argmax, size_t out_size, float* dx,
                       size_t in_size) override;

  LossResult SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int rows,
                                 int classes, float* dlogits) override;

  void SgdStep(float* w, const float* grad, float* velocity, const float* w_global, size_t n,
               const SgdStepParams& p) override;

 private:
  int threads_ = 1;
};

}  // namespace fedmesh
