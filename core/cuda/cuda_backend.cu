#include "core/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstring>
#include <map>
#include <new>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_kernels.h"
#include "core/cuda/cudnn_conv.h"
#include "core/cuda/device_info.h"

namespace fedmesh {
namespace {

// Pinned host memory that reduction results are copied into (a few scalars).
constexpr size_t kHostResultBytes = 64;

struct HostLoss {
  double loss_sum;
  int64_t correct;
};

int64_t OutputRows(const WindowGeometry& g) {
  return static_cast<int64_t>(g.batch) * g.out_h() * g.out_w();
}
int64_t ColumnLength(const WindowGeometry& g) {
  return static_cast<int64_t>(g.kernel_h) * g.kernel_w * g.channels;
}
std::array<int, 9> KeyOf(const WindowGeometry& g, int out_channels) {
  return {g.batch, g.in_h, g.in_w, g.channels, g.kernel_h, g.kernel_w, g.stride, g.pad,
          out_channels};
}

}  // namespace

struct CudaBackend::Impl {
  int device = 0;
  std::string description;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cuda::LaunchConfig launch;
  Status error;             // the first failure: sticky
  void* scratch = nullptr;  // device scratch for reductions, grown on demand
  size_t scratch_bytes = 0;
  void* own_columns = nullptr;  // im2col columns where cuDNN refused a geometry (Columns)
  size_t own_columns_bytes = 0;
  void* host_result = nullptr;  // pinned, kHostResultBytes
  std::unique_ptr<cuda::CudnnConv> cudnn;  // null: convolutions take im2col + cuBLAS
  bool cudnn_required = false;             // CudaConv::kCudnn: no fallback to im2col
  // kAuto: per geometry (KeyOf), whether cuDNN was measured faster than im2col.
  std::map<std::array<int, 9>, bool> cudnn_faster;
  std::string conv_note;                   // how convolutions run, for name()

  // Keeps the first failure. Returns s.ok().
  bool Check(const Status& s) {
    if (s.ok()) return true;
    // A failed runtime call also sets the thread's "last error"; clear it so a later
    // cudaGetLastError() (here or in another backend on this thread) does not report it
    // against an innocent kernel launch. Sticky context errors stay regardless.
    (void)cudaGetLastError();
    if (error.ok()) error = s;
    return false;
  }

  // Makes this backend's device current on the calling thread (cheap when it already is).
  Status MakeCurrent() {
    int current = -1;
    FM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
    if (current != device) FM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    return Status::OK();
  }

  // The top of every entry point that queues work: false (do nothing) after a failure.
  bool Enter() {
    if (!error.ok() || !Check(MakeCurrent())) return false;
    // The launchers report cudaGetLastError(), which also returns a failure that an earlier
    // runtime call on this thread left behind (another library's, the codecs' cudaMalloc
    // when out of memory): it would be blamed on our kernel and fail this backend for good.
    // Such a failure was returned by its own call; sticky (context) errors survive this.
    (void)cudaGetLastError();
    return true;
  }

  // A copy between host and device that returns once it is complete.
  void CopyAndWait(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0 || !Enter()) return;
    if (!Check(FM_CUDA_STATUS(cudaMemcpyAsync(dst, src, bytes, kind, stream)))) return;
    Check(FM_CUDA_STATUS(cudaStreamSynchronize(stream)));
  }

  // At least `bytes` of device scratch, or null after recording a failure.
  void* Scratch(size_t bytes) { return Grow(&scratch, &scratch_bytes, bytes); }

  // *buffer grown to at least `bytes`, or null after recording a failure. Growing waits for
  // the stream first: queued kernels may still use the old buffer.
  void* Grow(void** buffer, size_t* capacity, size_t bytes) {
    if (bytes <= *capacity) return *buffer;
    if (!Check(FM_CUDA_STATUS(cudaStreamSynchronize(stream)))) return nullptr;
    const size_t old_bytes = *capacity;
    if (*buffer != nullptr) {
      const Status s = FM_CUDA_STATUS(cudaFree(*buffer));
      *buffer = nullptr;
      *capacity = 0;
      if (!Check(s)) return nullptr;
    }
    // Doubling keeps regrowth (a stream wait, a free and a malloc) rare as sizes creep up.
    const size_t want = std::max({bytes, 2 * old_bytes, size_t{1} << 16});
    void* p = nullptr;
    if (!Check(FM_CUDA_STATUS(cudaMalloc(&p, want)))) return nullptr;
    *buffer = p;
    *capacity = want;
    return p;
  }

  // The column matrix of an im2col convolution: the caller's workspace, or, when cuDNN was
  // expected (the caller reserved nothing) but refused this geometry, the backend's own.
  float* Columns(const WindowGeometry& g, float* workspace, size_t workspace_floats) {
    const size_t floats = static_cast<size_t>(OutputRows(g)) * static_cast<size_t>(ColumnLength(g));
    if (workspace_floats >= floats) return workspace;
    return static_cast<float*>(Grow(&own_columns, &own_columns_bytes, floats * sizeof(float)));
  }

  // Copies `bytes` of device results into host_result and waits for them.
  bool FetchResult(const void* device_src, size_t bytes) {
    return Check(FM_CUDA_STATUS(
               cudaMemcpyAsync(host_result, device_src, bytes, cudaMemcpyDeviceToHost, stream))) &&
           Check(FM_CUDA_STATUS(cudaStreamSynchronize(stream)));
  }
};

// A kernel launcher's result (core/cuda/cuda_kernels.h) checked, naming the launcher call.
#define FM_LAUNCHED(call) impl_->Check(FM_CUDA_STATUS(call))

CudaBackend::CudaBackend(int device_index, CudaBackendOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.device = device_index;
  m.description = CudaDeviceDescription(device_index);
  if (!m.Check(FM_CUDA_STATUS(cudaSetDevice(device_index)))) return;
  int sms = 0;
  if (!m.Check(FM_CUDA_STATUS(
          cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_index)))) {
    return;
  }
  // Enough resident blocks to fill every SM several times over; grid-stride loops cover
  // the rest, so a huge n never needs a huge grid.
  m.launch.max_blocks = static_cast<unsigned>(std::max(1, sms)) * 32;
  // Non-blocking: work on the legacy default stream (other libraries) does not serialise
  // with ours. Every operation of this backend goes to this one stream.
  if (!m.Check(FM_CUDA_STATUS(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking)))) {
    return;
  }
  m.launch.stream = m.stream;
  if (!m.Check(FM_CUBLAS_STATUS(cublasCreate(&m.blas)))) return;
  if (!m.Check(FM_CUBLAS_STATUS(cublasSetStream(m.blas, m.stream)))) return;
  // FP32 GEMMs must stay FP32: CUBLAS_DEFAULT_MATH never lets cublasSgemm use TF32 tensor
  // cores (CUBLAS_TF32_TENSOR_OP_MATH would: ~1e-3 relative error, and the CPU and GPU
  // backends must agree to 1e-4). Set explicitly rather than trusting the default.
  if (!m.Check(FM_CUBLAS_STATUS(cublasSetMathMode(m.blas, CUBLAS_DEFAULT_MATH)))) return;
  if (!m.Check(FM_CUDA_STATUS(cudaMallocHost(&m.host_result, kHostResultBytes)))) return;
  const CudaConv conv = options.conv;
  if (conv == CudaConv::kIm2col) {
    m.conv_note = "conv im2col";
    return;
  }
  auto made = cuda::CudnnConv::Create(m.stream);
  if (made.ok()) {
    m.cudnn = std::move(*made);
    m.cudnn_required = conv == CudaConv::kCudnn;
    m.conv_note = "conv " + cuda::CudnnConv::Version() +
                  (m.cudnn_required ? "" : " or im2col, measured per geometry");
  } else if (conv == CudaConv::kCudnn) {
    m.Check(made.status().WithContext("conv = cudnn"));
  } else {
    // kAuto: a build or machine without a working cuDNN still trains, the other way.
    m.conv_note = "conv im2col (" + made.status().message() + ")";
  }
}

CudaBackend::~CudaBackend() {
  Impl& m = *impl_;
  // Best effort: a destructor has nowhere to report to. Restores the caller's device.
  int previous = -1;
  const bool had_device = cudaGetDevice(&previous) == cudaSuccess;
  if (had_device && previous != m.device) (void)cudaSetDevice(m.device);
  if (m.stream != nullptr) (void)cudaStreamSynchronize(m.stream);
  m.cudnn.reset();
  if (m.blas != nullptr) (void)cublasDestroy(m.blas);
  if (m.scratch != nullptr) (void)cudaFree(m.scratch);
  if (m.own_columns != nullptr) (void)cudaFree(m.own_columns);
  if (m.host_result != nullptr) (void)cudaFreeHost(m.host_result);
  if (m.stream != nullptr) (void)cudaStreamDestroy(m.stream);
  if (had_device && previous != m.device) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

int CudaBackend::device_index() const { return impl_->device; }

std::string CudaBackend::name() const {
  return "cuda:" + std::to_string(impl_->device) + " (" + impl_->description + "; " +
         impl_->conv_note + ")";
}

Status CudaBackend::Synchronize() {
  Impl& m = *impl_;
  // Waits even after a failure: work queued before it may still be running, and a caller
  // that sees the error may free the buffers it uses next.
  if (m.stream != nullptr && m.Check(m.MakeCurrent())) {
    m.Check(FM_CUDA_STATUS(cudaStreamSynchronize(m.stream)));
  }
  return m.error;
}

// ---- memory ---------------------------------------------------------------------------

void* CudaBackend::Allocate(size_t bytes) {
  Impl& m = *impl_;
  // Tried even after an earlier failure: the interface has no way to return "nothing".
  void* p = nullptr;
  // cudaMalloc aligns to at least 256 bytes; a zero-byte request still gets a pointer.
  if (!m.Check(m.MakeCurrent()) || !m.Check(FM_CUDA_STATUS(cudaMalloc(&p, bytes ? bytes : 1))) ||
      p == nullptr) {
    throw std::bad_alloc();
  }
  return p;
}

void CudaBackend::Free(void* p) {
  if (p == nullptr) return;
  Impl& m = *impl_;
  if (!m.Check(m.MakeCurrent())) return;
  // Queued kernels may still use p. cudaFree synchronises in practice, but the runtime
  // documents that only as "for most use cases": wait for our stream explicitly. Also
  // after a failure: an out-of-memory Allocate or a refused argument (cuBLAS, conv sizes)
  // leaves the kernels queued before it running. (Check keeps the first error only.)
  if (m.stream != nullptr) m.Check(FM_CUDA_STATUS(cudaStreamSynchronize(m.stream)));
  // Freed even after a failure, so a failed backend does not also leak.
  m.Check(FM_CUDA_STATUS(cudaFree(p)));
}

// Host copies wait for the stream: the caller may reuse src (CopyFromHost; src may also be
// pinned, making the copy fully asynchronous) or read dst (CopyToHost) as soon as we return.
void CudaBackend::CopyFromHost(void* dst, const void* src, size_t bytes) {
  impl_->CopyAndWait(dst, src, bytes, cudaMemcpyHostToDevice);
}

void CudaBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  impl_->CopyAndWait(dst, src, bytes, cudaMemcpyDeviceToHost);
}

void CudaBackend::Copy(void* dst, const void* src, size_t bytes) {
  Impl& m = *impl_;
  if (bytes == 0 || dst == src || !m.Enter()) return;
  m.Check(FM_CUDA_STATUS(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m.stream)));
}

bool CudaBackend::EnterForKernel(void** stream, unsigned* max_blocks) {
  if (!impl_->Enter()) return false;
  *stream = impl_->launch.stream;
  *max_blocks = impl_->launch.max_blocks;
  return true;
}

void CudaBackend::LaunchedKernel(int cuda_error, const char* what) {
  const cudaError_t e = static_cast<cudaError_t>(cuda_error);
  if (e != cudaSuccess) impl_->Check(cuda::CudaError(e, what, __FILE__, __LINE__));
}

void CudaBackend::Fill(float* x, size_t n, float value) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::Fill(impl_->launch, x, n, value));
}

// ---- dense linear algebra -------------------------------------------------------------

void CudaBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                       int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  Impl& im = *impl_;
  if (!im.Enter()) return;
  // cuBLAS is column-major. A row-major matrix with leading dimension ld is, read
  // column-major with the same ld, its transpose. So row-major C = op(A) op(B) is
  // column-major C^T = op(B)^T op(A)^T: B goes first with its own transpose flag, then A,
  // and m and n swap. cuBLAS's ld checks then read: ldb >= (trans_b ? k : n),
  // lda >= (trans_a ? m : k), ldc >= n, exactly the row-major requirements.
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  im.Check(FM_CUBLAS_STATUS(
      cublasSgemm(im.blas, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc)));
}

void CudaBackend::AddBias(float* y, const float* bias, int rows, int cols) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::AddBias(impl_->launch, y, bias, rows, cols));
}

void CudaBackend::BiasGrad(const float* dy, float* dbias, int rows, int cols) {
  Impl& m = *impl_;
  if (!m.Enter()) return;
  float* partial = nullptr;
  if (const size_t floats = cuda::BiasGradScratchFloats(rows, cols); floats > 0) {
    partial = static_cast<float*>(m.Scratch(floats * sizeof(float)));
    if (partial == nullptr) return;
  }
  FM_LAUNCHED(cuda::BiasGrad(m.launch, dy, dbias, rows, cols, partial));
}

void CudaBackend::Axpy(size_t n, float alpha, const float* x, float* y) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::Axpy(impl_->launch, n, alpha, x, y));
}

void CudaBackend::Scale(size_t n, float alpha, float* x) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::Scale(impl_->launch, n, alpha, x));
}

double CudaBackend::SquaredNorm(size_t n, const float* x) {
  Impl& m = *impl_;
  if (n == 0 || !m.Enter()) return 0.0;
  const unsigned blocks = cuda::ReductionBlocks(m.launch, n);
  auto* partial = static_cast<double*>(m.Scratch((blocks + 1) * sizeof(double)));
  if (partial == nullptr) return 0.0;
  double* out = partial + blocks;
  if (!FM_LAUNCHED(cuda::SquaredNorm(m.launch, n, x, partial, out))) return 0.0;
  if (!m.FetchResult(out, sizeof(double))) return 0.0;
  double result;
  std::memcpy(&result, m.host_result, sizeof(result));
  return result;
}

// ---- activations ----------------------------------------------------------------------

void CudaBackend::ReluForward(const float* x, float* y, size_t n) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::ReluForward(impl_->launch, x, y, n));
}

void CudaBackend::ReluBackward(const float* y, const float* dy, float* dx, size_t n) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::ReluBackward(impl_->launch, y, dy, dx, n));
}

void CudaBackend::DropoutForward(const float* x, float* y, float* mask, size_t n, float p,
                                 uint64_t seed) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::DropoutForward(impl_->launch, x, y, mask, n, p, seed));
}

void CudaBackend::Multiply(const float* a, const float* b, float* out, size_t n) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::Multiply(impl_->launch, a, b, out, n));
}

// ---- convolution and pooling ----------------------------------------------------------

void CudaBackend::Im2Col(const float* x, const WindowGeometry& g, float* cols) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::Im2Col(impl_->launch, x, g, cols));
}

void CudaBackend::Col2Im(const float* dcols, const WindowGeometry& g, float* dx) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::Col2Im(impl_->launch, dcols, g, dx));
}

size_t CudaBackend::ConvWorkspaceFloats(const WindowGeometry& g, int out_channels) {
  Impl& m = *impl_;
  // cuDNN keeps its own workspace. With kCudnn a refused geometry fails the backend
  // instead of falling back, so it never needs the columns either.
  if (m.cudnn != nullptr && (m.cudnn_required || (m.Enter() && UseCudnn(g, out_channels)))) {
    return 0;
  }
  return static_cast<size_t>(OutputRows(g)) * static_cast<size_t>(ColumnLength(g));
}

namespace {

// cuBLAS takes int dimensions: a batch whose column matrix has more rows is refused (split
// the batch) rather than silently truncated.
Status CheckConvDims(const WindowGeometry& g, int out_channels) {
  if (OutputRows(g) > INT_MAX || ColumnLength(g) > INT_MAX || out_channels <= 0) {
    return Status::OutOfRange(
        "Conv2d on the GPU: N*OH*OW = " + std::to_string(OutputRows(g)) + " rows of " +
        std::to_string(ColumnLength(g)) + " columns, " + std::to_string(out_channels) +
        " output channels do not fit cuBLAS's int sizes; use a smaller batch");
  }
  return Status::OK();
}

}  // namespace

// Whether a convolution of this geometry runs on cuDNN. kCudnn: yes, and a geometry cuDNN
// refuses fails the backend. kAuto: when cuDNN takes the geometry and was measured faster
// than im2col on it, the first time it is seen (cuDNN's per-call host overhead loses at
// small batches: bench/RESULTS.md, "GPU").
bool CudaBackend::UseCudnn(const WindowGeometry& g, int out_channels) {
  Impl& m = *impl_;
  if (m.cudnn == nullptr) return false;
  const Status s = m.cudnn->Prepare(g, out_channels);
  if (!s.ok()) {
    if (m.cudnn_required) m.Check(s);
    return false;
  }
  if (m.cudnn_required) return true;
  const auto key = KeyOf(g, out_channels);
  if (auto it = m.cudnn_faster.find(key); it != m.cudnn_faster.end()) return it->second;
  const bool faster = CudnnMeasuredFaster(g, out_channels);
  m.cudnn_faster.emplace(key, faster);
  return faster;
}

// Times forward + backward of both paths on scratch tensors of the geometry (non-zero
// values: zeros can run faster than real data), each the best of three after a warm-up,
// with the stream synchronised so that host-side launch overhead counts. A failure here is
// the backend's (sticky) error; the answer is then im2col.
bool CudaBackend::CudnnMeasuredFaster(const WindowGeometry& g, int out_channels) {
  Impl& m = *impl_;
  const size_t xn = static_cast<size_t>(g.batch) * g.in_h * g.in_w * g.channels;
  const size_t wn = static_cast<size_t>(out_channels) * static_cast<size_t>(ColumnLength(g));
  const size_t yn = static_cast<size_t>(OutputRows(g)) * out_channels;
  const size_t cn = static_cast<size_t>(OutputRows(g)) * static_cast<size_t>(ColumnLength(g));
  const size_t oc = static_cast<size_t>(out_channels);
  const size_t total = 2 * xn + 2 * wn + 2 * yn + 2 * oc + cn;
  float* base = nullptr;
  if (!m.Check(FM_CUDA_STATUS(cudaMalloc(&base, total * sizeof(float))))) return false;
  float *x = base, *dx = x + xn, *w = dx + xn, *dw = w + wn, *y = dw + wn, *dy = y + yn,
        *b = dy + yn, *db = b + oc, *cols = db + oc;
  Fill(x, xn, 0.5f);
  Fill(w, wn, 0.01f);
  Fill(b, oc, 0.1f);
  Fill(dy, yn, 0.25f);
  auto time = [&](auto&& pass) {
    double best = 1e300;
    for (int r = 0; r < 4 && m.error.ok(); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      pass();
      m.Check(FM_CUDA_STATUS(cudaStreamSynchronize(m.stream)));
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = std::min(best, t);  // r = 0 warms up
    }
    return best;
  };
  const double with_cudnn = time([&] {
    if (m.Check(m.cudnn->Forward(x, g, w, out_channels, y))) {
      AddBias(y, b, static_cast<int>(OutputRows(g)), out_channels);
    }
    if (m.Check(m.cudnn->Backward(x, g, w, out_channels, dy, dw, dx))) {
      BiasGrad(dy, db, static_cast<int>(OutputRows(g)), out_channels);
    }
  });
  const double with_im2col = time([&] {
    Im2colForward(x, g, w, b, out_channels, y, cols);
    Im2colBackward(x, g, w, out_channels, dy, dw, db, dx, cols);
  });
  m.Check(FM_CUDA_STATUS(cudaStreamSynchronize(m.stream)));
  m.Check(FM_CUDA_STATUS(cudaFree(base)));
  return m.error.ok() && with_cudnn < with_im2col;
}

void CudaBackend::Im2colForward(const float* x, const WindowGeometry& g, const float* w,
                                const float* bias, int out_channels, float* y, float* cols) {
  const int rows = static_cast<int>(OutputRows(g));
  const int row_len = static_cast<int>(ColumnLength(g));
  Im2Col(x, g, cols);
  // y[rows, OC] = cols[rows, row_len] * W^T, W stored [OC, row_len].
  Gemm(false, true, rows, out_channels, row_len, 1.0f, cols, row_len, w, row_len, 0.0f, y,
       out_channels);
  AddBias(y, bias, rows, out_channels);
}

void CudaBackend::Im2colBackward(const float* x, const WindowGeometry& g, const float* w,
                                 int out_channels, const float* dy, float* dw, float* dbias,
                                 float* dx, float* cols) {
  const int rows = static_cast<int>(OutputRows(g));
  const int row_len = static_cast<int>(ColumnLength(g));
  Im2Col(x, g, cols);  // recomputed: Forward keeps nothing
  // dW[OC, row_len] = dy^T * cols, dy stored [rows, OC].
  Gemm(true, false, out_channels, row_len, rows, 1.0f, dy, out_channels, cols, row_len, 0.0f, dw,
       row_len);
  BiasGrad(dy, dbias, rows, out_channels);
  if (dx != nullptr) {
    // The dW GEMM has consumed the columns (same stream), so their gradient can take the
    // workspace: dcols[rows, row_len] = dy * W.
    float* dcols = cols;
    Gemm(false, false, rows, row_len, out_channels, 1.0f, dy, out_channels, w, row_len, 0.0f, dcols,
         row_len);
    Col2Im(dcols, g, dx);
  }
}

void CudaBackend::Conv2dForward(const float* x, const WindowGeometry& g, const float* w,
                                const float* bias, int out_channels, float* y, float* workspace,
                                size_t workspace_floats) {
  // Layers reserve ConvWorkspaceFloats for their largest batch; a smaller one fits.
  Impl& m = *impl_;
  if (!m.Enter() || !m.Check(CheckConvDims(g, out_channels))) return;
  if (UseCudnn(g, out_channels)) {
    if (m.Check(m.cudnn->Forward(x, g, w, out_channels, y))) {
      AddBias(y, bias, static_cast<int>(OutputRows(g)), out_channels);
    }
    return;
  }
  if (!m.error.ok()) return;  // kCudnn and cuDNN refused the geometry
  if (float* cols = m.Columns(g, workspace, workspace_floats)) {
    Im2colForward(x, g, w, bias, out_channels, y, cols);
  }
}

void CudaBackend::Conv2dBackward(const float* x, const WindowGeometry& g, const float* w,
                                 int out_channels, const float* dy, float* dw, float* dbias,
                                 float* dx, float* workspace, size_t workspace_floats) {
  Impl& m = *impl_;
  if (!m.Enter() || !m.Check(CheckConvDims(g, out_channels))) return;
  if (UseCudnn(g, out_channels)) {
    if (m.Check(m.cudnn->Backward(x, g, w, out_channels, dy, dw, dx))) {
      BiasGrad(dy, dbias, static_cast<int>(OutputRows(g)), out_channels);
    }
    return;
  }
  if (!m.error.ok()) return;  // kCudnn and cuDNN refused the geometry
  if (float* cols = m.Columns(g, workspace, workspace_floats)) {
    Im2colBackward(x, g, w, out_channels, dy, dw, dbias, dx, cols);
  }
}

void CudaBackend::MaxPoolForward(const float* x, const WindowGeometry& g, float* y,
                                 int32_t* argmax) {
  Impl& m = *impl_;
  if (!m.Enter()) return;
  // argmax holds int32 input indices (the interface's type).
  const int64_t in_elements = static_cast<int64_t>(g.batch) * g.in_h * g.in_w * g.channels;
  if (in_elements > INT32_MAX) {
    m.Check(Status::OutOfRange("MaxPool2d input of " + std::to_string(in_elements) +
                               " elements exceeds int32 argmax indices; use a smaller batch"));
    return;
  }
  FM_LAUNCHED(cuda::MaxPoolForward(m.launch, x, g, y, argmax));
}

void CudaBackend::MaxPoolBackward(const float* dy, const int32_t* argmax, size_t out_size,
                                  float* dx, size_t in_size) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::MaxPoolBackward(impl_->launch, dy, argmax, out_size, dx, in_size));
}

// ---- loss -----------------------------------------------------------------------------

Backend::LossResult CudaBackend::SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                                     int rows, int classes, float* dlogits) {
  Impl& m = *impl_;
  LossResult result;
  if (rows <= 0 || classes <= 0 || !m.Enter()) return result;
  // Scratch: row_loss[rows] doubles, row_correct[rows] int64s, then the two totals.
  const size_t n = static_cast<size_t>(rows);
  char* s =
      static_cast<char*>(m.Scratch(n * (sizeof(double) + sizeof(int64_t)) + sizeof(HostLoss)));
  if (s == nullptr) return result;
  auto* row_loss = reinterpret_cast<double*>(s);
  auto* row_correct = reinterpret_cast<int64_t*>(s + n * sizeof(double));
  char* totals = s + n * (sizeof(double) + sizeof(int64_t));
  auto* loss_sum = reinterpret_cast<double*>(totals + offsetof(HostLoss, loss_sum));
  auto* correct = reinterpret_cast<int64_t*>(totals + offsetof(HostLoss, correct));
  if (!FM_LAUNCHED(cuda::SoftmaxCrossEntropy(m.launch, logits, labels, rows, classes, dlogits,
                                             row_loss, row_correct, loss_sum, correct))) {
    return result;
  }
  if (!m.FetchResult(totals, sizeof(HostLoss))) return result;
  HostLoss host;
  std::memcpy(&host, m.host_result, sizeof(host));
  result.loss_sum = host.loss_sum;
  result.correct = host.correct;
  return result;
}

// ---- optimizer ------------------------------------------------------------------------

void CudaBackend::SgdStep(float* w, const float* grad, float* velocity, const float* w_global,
                          size_t n, const SgdStepParams& p) {
  if (!impl_->Enter()) return;
  FM_LAUNCHED(cuda::SgdStep(impl_->launch, w, grad, velocity, w_global, n, p));
}

#undef FM_LAUNCHED

Result<std::unique_ptr<Backend>> MakeCudaBackend(int device_index, CudaBackendOptions options) {
  const int count = CudaDeviceCount();
  if (device_index < 0 || device_index >= count) {
    std::string why = "CUDA device " + std::to_string(device_index) + " requested but " +
                      std::to_string(count) + " present";
    if (count == 0) why += " (" + CudaUnavailableReason() + ")";
    return Status::Unavailable(why + "; use --device cpu or auto");
  }
  if (options.conv == CudaConv::kAuto) {
    FM_ASSIGN_OR_RETURN(options.conv, CudaConvFromEnvironment());
  }
  auto backend = std::make_unique<CudaBackend>(device_index, options);
  if (Status s = backend->Synchronize(); !s.ok()) {
    return s.WithContext("initialising CUDA device " + std::to_string(device_index));
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace fedmesh
