// Backend: the compute interface every layer, optimizer and aggregation kernel calls.
// Pointers are in the backend's memory space (host memory for CPU, device memory for
// CUDA); layers never touch them directly, so one model definition runs on every backend.
// Matrices are row-major. Image tensors are NHWC, which makes a convolution one GEMM over
// the whole batch (rows = N*OH*OW) with no transposes.
// Thread-safety: a Backend instance is used by one thread at a time; it may use its own
// worker threads internally (set_threads()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/host_device.h"
#include "core/owned_buffer.h"
#include "core/status.h"

namespace fedmesh {

// Geometry of a 2-D convolution or pooling window over an NHWC batch.
struct WindowGeometry {
  int batch = 0;
  int in_h = 0, in_w = 0, channels = 0;
  int kernel_h = 0, kernel_w = 0;
  int stride = 1;
  int pad = 0;
  FM_HD int out_h() const { return (in_h + 2 * pad - kernel_h) / stride + 1; }
  FM_HD int out_w() const { return (in_w + 2 * pad - kernel_w) / stride + 1; }
};

// Hyper-parameters of one fused SGD step over the flat parameter buffer:
//   d = g + weight_decay * w + prox_mu * (w - w_global)   (prox term only if w_global)
//   v = momentum * v + d;  w -= lr * v                     (PyTorch semantics, no dampening)
struct SgdStepParams {
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  float prox_mu = 0.0f;
};

enum class BackendKind { kCpu, kCuda };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual std::string name() const = 0;
  // Worker threads for this backend's kernels (CPU: OpenMP + OpenBLAS). n >= 1.
  virtual void set_threads(int n) = 0;
  virtual int threads() const = 0;
  // Waits for the work queued so far and returns the first error the backend met since it
  // was created (CUDA: the failing call, its code and message). Errors are sticky: a
  // backend that failed keeps failing, and its buffers' contents are undefined. The CPU
  // backend has nothing to wait for and never fails here.
  virtual Status Synchronize() { return Status::OK(); }

  // ---- memory ---------------------------------------------------------------------------
  // Returns `bytes` of backend memory aligned to at least 64 bytes; never null (aborts on
  // exhaustion, as std::vector would throw). Freed with Free().
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual void CopyFromHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // True when backend memory is host memory the caller may write directly (the CPU
  // backend): host-side producers then skip a staging copy. Default: false.
  virtual bool host_memory() const { return false; }
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void Fill(float* x, size_t n, float value) = 0;

  // ---- dense linear algebra -------------------------------------------------------------
  // C[m,n] = alpha * op(A) * op(B) + beta * C, row-major, op = transpose when trans_*.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta, float* c,
                    int ldc) = 0;
  // y[r, c] += bias[c] for a rows x cols matrix.
  virtual void AddBias(float* y, const float* bias, int rows, int cols) = 0;
  // dbias[c] = sum_r dy[r, c] (overwrites).
  virtual void BiasGrad(const float* dy, float* dbias, int rows, int cols) = 0;
  // y += alpha * x
  virtual void Axpy(size_t n, float alpha, const float* x, float* y) = 0;
  // x *= alpha
  virtual void Scale(size_t n, float alpha, float* x) = 0;
  // sum of x[i]^2, accumulated in double.
  virtual double SquaredNorm(size_t n, const float* x) = 0;

  // ---- activations ----------------------------------------------------------------------
  virtual void ReluForward(const float* x, float* y, size_t n) = 0;
  // dx = dy where y > 0 else 0 (uses the forward output, so it works in place).
  virtual void ReluBackward(const float* y, const float* dy, float* dx, size_t n) = 0;
  // Inverted dropout: y = x * mask, mask = (u >= p) / (1 - p) with u = CounterUniform(seed, i),
  // so every backend draws the same mask for the same seed.
  virtual void DropoutForward(const float* x, float* y, float* mask, size_t n, float p,
                              uint64_t seed) = 0;
  // dx = dy * mask
  virtual void Multiply(const float* a, const float* b, float* out, size_t n) = 0;

  // ---- convolution and pooling (NHWC) ---------------------------------------------------
  // cols[(n*OH + oh)*OW + ow, (kh*KW + kw)*C + c] = x[n, oh*s - pad + kh, ow*s - pad + kw, c]
  // (zero outside the image). cols has N*OH*OW rows and KH*KW*C columns.
  virtual void Im2Col(const float* x, const WindowGeometry& g, float* cols) = 0;
  // The adjoint: dx = sum of dcols into the pixels they were read from (overwrites dx).
  virtual void Col2Im(const float* dcols, const WindowGeometry& g, float* dx) = 0;
  // A whole Conv2d layer over an NHWC batch, weights [out_channels, KH, KW, C], bias
  // [out_channels]. Each backend picks its own strategy (CPU: per-image im2col + GEMM on
  // every thread, so the column matrix stays in cache; CUDA: batched im2col + cuBLAS).
  // `workspace` holds ConvWorkspaceFloats(g, out_channels) floats; Forward and Backward
  // may share it (nothing is kept between them: Backward recomputes the columns).
  virtual size_t ConvWorkspaceFloats(const WindowGeometry& g, int out_channels) = 0;
  virtual void Conv2dForward(const float* x, const WindowGeometry& g, const float* w,
                             const float* bias, int out_channels, float* y,
                             float* workspace, size_t workspace_floats) = 0;
  // Writes dw and dbias (overwriting) and, when dx is not null, dx.
  virtual void Conv2dBackward(const float* x, const WindowGeometry& g, const float* w,
                              int out_channels, const float* dy, float* dw, float* dbias,
                              float* dx, float* workspace, size_t workspace_floats) = 0;
  // DP-SGD's per-example convolution gradients: row n of per_example ([batch, out_channels *
  // KH*KW*C + out_channels], overwritten) is example n's own dw then dbias, whose sum over n
  // is Conv2dBackward's dw and dbias; dx as Conv2dBackward. The same arithmetic as one
  // Conv2dBackward (each example's dw is its own GEMM there too). Unimplemented by default
  // (DP-SGD runs on the CPU backend).
  virtual Status Conv2dPerExampleBackward(const float* x, const WindowGeometry& g, const float* w,
                                          int out_channels, const float* dy, float* per_example,
                                          float* dx, float* workspace, size_t workspace_floats) {
    (void)x, (void)g, (void)w, (void)out_channels, (void)dy, (void)per_example, (void)dx,
        (void)workspace, (void)workspace_floats;
    return Status::Unimplemented("per-example convolution gradients on backend " + name());
  }
  // Max pooling; argmax[i] is the flat NHWC input index chosen for output i.
  virtual void MaxPoolForward(const float* x, const WindowGeometry& g, float* y,
                              int32_t* argmax) = 0;
  // dx = scatter of dy through argmax (overwrites dx, which has `in_size` elements).
  virtual void MaxPoolBackward(const float* dy, const int32_t* argmax, size_t out_size,
                               float* dx, size_t in_size) = 0;

  // ---- loss -----------------------------------------------------------------------------
  // Softmax cross-entropy over rows of logits[rows, classes] with integer labels.
  // Writes dlogits = (softmax - onehot) / rows when dlogits is not null (the gradient of
  // the mean loss). Returns the summed (not mean) loss and the count of rows whose argmax
  // equals the label.
  struct LossResult {
    double loss_sum = 0.0;
    int64_t correct = 0;
  };
  virtual LossResult SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int rows,
                                         int classes, float* dlogits) = 0;

  // ---- optimizer ------------------------------------------------------------------------
  // One fused pass over the flat buffers (see SgdStepParams). w_global may be null, and so
  // may velocity when p.momentum == 0: the step then keeps no velocity (v = d).
  virtual void SgdStep(float* w, const float* grad, float* velocity, const float* w_global,
                       size_t n, const SgdStepParams& p) = 0;
};

// The CPU backend (OpenBLAS + OpenMP). threads <= 0 means "all cores".
std::unique_ptr<Backend> MakeCpuBackend(int threads);

// Builds the backend named by `device`: "cpu", "cuda", "cuda:N" or "auto" (CUDA when a GPU
// is present and the CUDA backend was built, otherwise CPU).
Result<std::unique_ptr<Backend>> MakeBackend(std::string_view device, int threads);

// OK for the device names MakeBackend takes (cpu, auto, cuda, cuda:N), whether or not such a
// GPU is present; InvalidArgument saying what is expected otherwise. Config loaders call it
// so the error names the file, line and key.
Status CheckDeviceName(std::string_view device);

// An owned typed buffer in a backend's memory (RAII, move-only).
template <typename T>
class DeviceBuffer : public OwnedBuffer<T, Backend> {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* backend, size_t count)
      : OwnedBuffer<T, Backend>(
            backend, count ? static_cast<T*>(backend->Allocate(count * sizeof(T))) : nullptr,
            count) {}
};

}  // namespace fedmesh
