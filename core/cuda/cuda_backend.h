// CudaBackend: the Backend on one NVIDIA GPU. Dense and convolution GEMMs go to cuBLAS
// (FP32, no TF32); everything else is fedmesh's own kernels (core/cuda/cuda_kernels.h),
// whose per-element math (core/cuda/kernel_math.h) is host-tested against the CPU backend.
// A convolution is either cuDNN's (FP32 FMA math, deterministic algorithms, the fastest
// measured once per geometry: core/cuda/cudnn_conv.h) or one batched im2col plus one cuBLAS
// GEMM over the whole batch; by default whichever was measured faster on the geometry
// (CudaBackendOptions::conv). The measurements make the choice, so two runs can differ in
// float rounding where two candidates are about as fast; FEDMESH_CUDA_CONV=im2col gives
// runs that repeat bit for bit.
//
// Ordering: each backend owns one CUDA stream (and a cuBLAS handle bound to it); every
// method queues its work there in call order. Methods return before the GPU has run the
// work, except these, which wait for everything queued so far: CopyFromHost and
// CopyToHost (the host buffer may be reused / read as soon as they return), SquaredNorm
// and SoftmaxCrossEntropy (they return results by value), Free (queued kernels may still
// use the buffer) and Synchronize.
//
// Errors: every CUDA and cuBLAS call is checked; the first failure is kept (sticky) and
// returned by Synchronize(), and from then on every method is a no-op (SquaredNorm and
// SoftmaxCrossEntropy return zeros). Allocate still tries cudaMalloc and throws
// std::bad_alloc when it fails, as the interface never returns null.
//
// Thread-safety: one thread at a time, as for every Backend; successive calls may come
// from different threads (each entry point makes the backend's device current on the
// calling thread, so backends on several devices can share a thread).
//
// This header includes no CUDA header, so plain C++ may include it. In a build without
// CUDA the class is declared but not defined; MakeCudaBackend then returns Unavailable.
#pragma once

#include <memory>
#include <string>

#include "core/backend.h"
#include "core/status.h"

namespace fedmesh {

// How the CUDA backend computes Conv2d.
enum class CudaConv {
  kAuto,    // per geometry, whichever of cuDNN and im2col was measured faster at its first
            // use; im2col alone without a working cuDNN (the reason is in name())
  kCudnn,   // cuDNN, or the backend fails at construction
  kIm2col,  // batched im2col + one cuBLAS GEMM (the path that needs no cuDNN)
};

struct CudaBackendOptions {
  // kAuto: MakeCudaBackend lets the environment variable FEDMESH_CUDA_CONV = "cudnn" |
  // "im2col" override it (benchmarks compare both with the same binaries).
  CudaConv conv = CudaConv::kAuto;
};

// FEDMESH_CUDA_CONV as a CudaConv: unset or empty is kAuto, "cudnn" kCudnn, "im2col" kIm2col;
// anything else InvalidArgument naming the variable and the values it takes. Defined in
// every build (core/backend.cc).
Result<CudaConv> CudaConvFromEnvironment();

class CudaBackend final : public Backend {
 public:
  // Prefer MakeCudaBackend, which validates the index and reports initialisation errors.
  // A constructor that fails leaves the error for Synchronize() to return.
  explicit CudaBackend(int device_index, CudaBackendOptions options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  int device_index() const;

  BackendKind kind() const override { return BackendKind::kCuda; }
  // "cuda:N (<device description>; conv <path>)", <path> one of "cuDNN 9.19.0 or im2col,
  // measured per geometry" (kAuto), "cuDNN 9.19.0" (kCudnn), "im2col[ (why not cuDNN)]".
  std::string name() const override;
  // The GPU needs no host worker threads: set_threads is ignored and threads() is 1.
  void set_threads(int) override {}
  int threads() const override { return 1; }
  Status Synchronize() override;

  void* Allocate(size_t bytes) override;
  void Free(void* p) override;
  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Fill(float* x, size_t n, float value) override;

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override;
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
  // The batch's column matrix: N*OH*OW rows of KH*KW*C floats (Backward reuses it for the
  // column gradients once the weight gradient has consumed the columns).
  size_t ConvWorkspaceFloats(const WindowGeometry& g, int out_channels) override;
  void Conv2dForward(const float* x, const WindowGeometry& g, const float* w, const float* bias,
                     int out_channels, float* y, float* workspace,
                     size_t workspace_floats) override;
  void Conv2dBackward(const float* x, const WindowGeometry& g, const float* w, int out_channels,
                      const float* dy, float* dw, float* dbias, float* dx, float* workspace,
                      size_t workspace_floats) override;
  void MaxPoolForward(const float* x, const WindowGeometry& g, float* y, int32_t* argmax) override;
  void MaxPoolBackward(const float* dy, const int32_t* argmax, size_t out_size, float* dx,
                       size_t in_size) override;

  LossResult SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int rows, int classes,
                                 float* dlogits) override;

  void SgdStep(float* w, const float* grad, float* velocity, const float* w_global, size_t n,
               const SgdStepParams& p) override;

  // For kernels launched outside this class (the graph ops, core/cuda/graph/): false after
  // a failure (queue nothing); otherwise *stream (a cudaStream_t) and *max_blocks are what
  // to launch with, in this backend's stream order. LaunchedKernel records a launch's
  // result (a cudaError_t, 0 = success) as the sticky error, naming `what`.
  bool EnterForKernel(void** stream, unsigned* max_blocks);
  void LaunchedKernel(int cuda_error, const char* what);

 private:
  bool UseCudnn(const WindowGeometry& g, int out_channels);
  bool CudnnMeasuredFaster(const WindowGeometry& g, int out_channels);
  void Im2colForward(const float* x, const WindowGeometry& g, const float* w, const float* bias,
                     int out_channels, float* y, float* cols);
  void Im2colBackward(const float* x, const WindowGeometry& g, const float* w, int out_channels,
                      const float* dy, float* dw, float* dbias, float* dx, float* cols);

  struct Impl;  // CUDA stream, cuBLAS handle, scratch, sticky error (cuda_backend.cu)
  std::unique_ptr<Impl> impl_;
};

// The CUDA backend on device `device_index`. Unavailable when the index is not a present
// device or the build has no CUDA; the initialisation error (context, stream, cuBLAS,
// cuDNN when options.conv is kCudnn) otherwise.
Result<std::unique_ptr<Backend>> MakeCudaBackend(int device_index,
                                                 CudaBackendOptions options = {});

}  // namespace fedmesh
