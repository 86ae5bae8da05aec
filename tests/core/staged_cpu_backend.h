// StagedCpuBackend: the CPU backend (same kernels, same results) that answers
// host_memory() == false, so callers take the paths they take for a GPU (staging copies of
// batches, losses computed on host copies of the outputs, gradients copied out for a hook,
// constants copied into "device" memory) and those paths run in CI, where no GPU is.
// Every method forwards to a CpuBackend; the memory is host memory all the same.
#pragma once

#include <memory>
#include <string>

#include "core/backend.h"

namespace fedmesh {

class StagedCpuBackend final : public Backend {
 public:
  explicit StagedCpuBackend(int threads) : cpu_(MakeCpuBackend(threads)) {}

  BackendKind kind() const override { return cpu_->kind(); }
  std::string name() const override { return "staged " + cpu_->name(); }
  void set_threads(int n) override { cpu_->set_threads(n); }
  int threads() const override { return cpu_->threads(); }
  bool host_memory() const override { return false; }

  void* Allocate(size_t bytes) override { return cpu_->Allocate(bytes); }
  void Free(void* p) override { cpu_->Free(p); }
  void CopyFromHost(void* dst, const void* src, size_t bytes) override {
    ++copies_in;
    cpu_->CopyFromHost(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    ++copies_out;
    cpu_->CopyToHost(dst, src, bytes);
  }
  void Copy(void* dst, const void* src, size_t bytes) override { cpu_->Copy(dst, src, bytes); }
  void Fill(float* x, size_t n, float value) override { cpu_->Fill(x, n, value); }
  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) override {
    cpu_->Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void AddBias(float* y, const float* bias, int rows, int cols) override { cpu_->AddBias(y, bias, rows, cols); }
  void BiasGrad(const float* dy, float* dbias, int rows, int cols) override { cpu_->BiasGrad(dy, dbias, rows, cols); }
  void Axpy(size_t n, float alpha, const float* x, float* y) override { cpu_->Axpy(n, alpha, x, y); }
  void Scale(size_t n, float alpha, float* x) override { cpu_->Scale(n, alpha, x); }
  double SquaredNorm(size_t n, const float* x) override { return cpu_->SquaredNorm(n, x); }
  void ReluForward(const float* x, float* y, size_t n) override { cpu_->ReluForward(x, y, n); }
  void ReluBackward(const float* y, const float* dy, float* dx, size_t n) override { cpu_->ReluBackward(y, dy, dx, n); }
  void DropoutForward(const float* x, float* y, float* mask, size_t n, float p, uint64_t seed) override {
    cpu_->DropoutForward(x, y, mask, n, p, seed);
  }
  void Multiply(const float* a, const float* b, float* out, size_t n) override { cpu_->Multiply(a, b, out, n); }
  void Im2Col(const float* x, const WindowGeometry& g, float* cols) override { cpu_->Im2Col(x, g, cols); }
  void Col2Im(const float* dcols, const WindowGeometry& g, float* dx) override { cpu_->Col2Im(dcols, g, dx); }
  size_t ConvWorkspaceFloats(const WindowGeometry& g, int oc) override { return cpu_->ConvWorkspaceFloats(g, oc); }
  void Conv2dForward(const float* x, const WindowGeometry& g, const float* w, const float* bias, int oc, float* y,
                     float* ws, size_t wsn) override {
    cpu_->Conv2dForward(x, g, w, bias, oc, y, ws, wsn);
  }
  void Conv2dBackward(const float* x, const WindowGeometry& g, const float* w, int oc, const float* dy, float* dw,
                      float* dbias, float* dx, float* ws, size_t wsn) override {
    cpu_->Conv2dBackward(x, g, w, oc, dy, dw, dbias, dx, ws, wsn);
  }
  void MaxPoolForward(const float* x, const WindowGeometry& g, float* y, int32_t* argmax) override {
    cpu_->MaxPoolForward(x, g, y, argmax);
  }
  void MaxPoolBackward(const float* dy, const int32_t* argmax, size_t out_size, float* dx, size_t in_size) override {
    cpu_->MaxPoolBackward(dy, argmax, out_size, dx, in_size);
  }
  LossResult SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int rows, int classes,
                                 float* dlogits) override {
    return cpu_->SoftmaxCrossEntropy(logits, labels, rows, classes, dlogits);
  }
  void SgdStep(float* w, const float* grad, float* velocity, const float* w_global, size_t n,
               const SgdStepParams& p) override {
    cpu_->SgdStep(w, grad, velocity, w_global, n, p);
  }

  int copies_in = 0, copies_out = 0;  // host <-> "device" copies so far

 private:
  std::unique_ptr<Backend> cpu_;
};

}  // namespace fedmesh
