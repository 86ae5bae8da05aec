#include "core/cuda/cudnn_conv.h"

#include <map>
#include <string>
#include <tuple>
#include <algorithm>
#include <utility>

#include "core/cuda/cuda_check.h"

#if FEDMESH_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace fedmesh::cuda {

#if FEDMESH_HAVE_CUDNN

namespace {

Status CudnnError(cudnnStatus_t st, const char* call, const char* file, int line) {
  return Status::Internal(std::string(call) + " failed: " + cudnnGetErrorString(st) + " (" +
                          std::to_string(static_cast<int>(st)) + ") at " + file + ":" +
                          std::to_string(line));
}

#define FM_CUDNN_RETURN_IF_ERROR(call)                                       \
  do {                                                                       \
    const cudnnStatus_t fm_st_ = (call);                                     \
    if (fm_st_ != CUDNN_STATUS_SUCCESS) {                                    \
      return CudnnError(fm_st_, #call, __FILE__, __LINE__);                  \
    }                                                                        \
  } while (0)

using GeometryKey = std::tuple<int, int, int, int, int, int, int, int, int>;

GeometryKey KeyOf(const WindowGeometry& g, int out_channels) {
  return {g.batch, g.in_h, g.in_w, g.channels, g.kernel_h, g.kernel_w, g.stride, g.pad,
          out_channels};
}

// The first (fastest: Find sorts by time) usable result: it ran, it is deterministic, it
// used FMA math (the descriptor allows nothing else; checked, not trusted) and its
// workspace is within the cap. NotFound when none is.
template <typename Perf>
Result<Perf> Fastest(const Perf* results, int count, const char* pass) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = results[i];
    if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC &&
        p.mathType != CUDNN_TENSOR_OP_MATH &&
        p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
        p.memory <= CudnnConv::kMaxWorkspaceBytes) {
      return p;
    }
  }
  return Status::NotFound(std::string("cuDNN offers no deterministic FP32 ") + pass +
                          " algorithm for this convolution");
}

}  // namespace

// One geometry's descriptors and chosen algorithms.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgoPerf_t fwd{};
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data{};
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter{};

  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (x != nullptr) (void)cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) (void)cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) (void)cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) (void)cudnnDestroyConvolutionDescriptor(conv);
  }
};

struct CudnnConv::Impl {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  std::map<GeometryKey, std::unique_ptr<ConvPlan>> plans;
  std::map<GeometryKey, Status> refused;  // geometries whose plan failed, and why
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  ~Impl() {
    if (workspace != nullptr) {
      (void)cudaStreamSynchronize(stream);
      (void)cudaFree(workspace);
    }
    plans.clear();
    if (handle != nullptr) (void)cudnnDestroy(handle);
  }

  // At least `bytes` of workspace. Growing waits for the stream: queued work may still use
  // the old buffer.
  Status Reserve(size_t bytes) {
    if (bytes <= workspace_bytes) return Status::OK();
    FM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    if (workspace != nullptr) {
      const cudaError_t err = cudaFree(workspace);
      workspace = nullptr;
      workspace_bytes = 0;
      FM_CUDA_RETURN_IF_ERROR(err);
    }
    FM_CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace, bytes));
    workspace_bytes = bytes;
    return Status::OK();
  }

  // The plan of a geometry, made (descriptors set, each pass's algorithm measured) the
  // first time it is seen.
  Result<ConvPlan*> Plan(const WindowGeometry& g, int out_channels) {
    const GeometryKey key = KeyOf(g, out_channels);
    if (auto it = plans.find(key); it != plans.end()) return it->second.get();
    if (auto it = refused.find(key); it != refused.end()) return it->second;
    Result<ConvPlan*> made = MakePlan(g, out_channels);
    if (!made.ok()) refused.emplace(key, made.status());
    return made;
  }

  Result<ConvPlan*> MakePlan(const WindowGeometry& g, int out_channels) {
    const GeometryKey key = KeyOf(g, out_channels);
    auto plan = std::make_unique<ConvPlan>();
    ConvPlan& p = *plan;
    FM_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&p.x));
    FM_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&p.y));
    FM_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&p.w));
    FM_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&p.conv));
    // cuDNN takes dimensions in NCHW order whatever the memory format.
    FM_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                                        g.batch, g.channels, g.in_h, g.in_w));
    FM_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC,
                                                        out_channels, g.channels, g.kernel_h,
                                                        g.kernel_w));
    FM_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(p.conv, g.pad, g.pad, g.stride,
                                                             g.stride, 1, 1,
                                                             CUDNN_CROSS_CORRELATION,
                                                             CUDNN_DATA_FLOAT));
    FM_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(p.conv, CUDNN_FMA_MATH));
    int n = 0, c = 0, h = 0, w = 0;
    FM_CUDNN_RETURN_IF_ERROR(
        cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &n, &c, &h, &w));
    if (n != g.batch || c != out_channels || h != g.out_h() || w != g.out_w()) {
      return Status::Internal("cuDNN computes a " + std::to_string(h) + "x" + std::to_string(w) +
                              " output where fedmesh expects " + std::to_string(g.out_h()) + "x" +
                              std::to_string(g.out_w()));
    }
    FM_CUDNN_RETURN_IF_ERROR(
        cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, c, h, w));

    // Find runs every algorithm on buffers of its own (ours are untouched) and sorts them
    // by time.
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    FM_CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionForwardAlgorithm(
        handle, p.x, p.w, p.conv, p.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, fwd));
    FM_ASSIGN_OR_RETURN(p.fwd, Fastest(fwd, count, "forward"));
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    FM_CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardDataAlgorithm(
        handle, p.w, p.y, p.conv, p.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, data));
    FM_ASSIGN_OR_RETURN(p.bwd_data, Fastest(data, count, "backward-data"));
    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    FM_CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardFilterAlgorithm(
        handle, p.x, p.y, p.conv, p.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, filter));
    FM_ASSIGN_OR_RETURN(p.bwd_filter, Fastest(filter, count, "backward-filter"));
    ConvPlan* raw = plan.get();
    plans.emplace(key, std::move(plan));
    return raw;
  }
};

CudnnConv::CudnnConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnConv::~CudnnConv() = default;

Result<std::unique_ptr<CudnnConv>> CudnnConv::Create(cudaStream_t stream) {
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  FM_CUDNN_RETURN_IF_ERROR(cudnnCreate(&impl->handle));
  FM_CUDNN_RETURN_IF_ERROR(cudnnSetStream(impl->handle, stream));
  return std::unique_ptr<CudnnConv>(new CudnnConv(std::move(impl)));
}

std::string CudnnConv::Version() {
  const size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch (cuDNN 9)
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

Status CudnnConv::Prepare(const WindowGeometry& g, int out_channels) {
  return impl_->Plan(g, out_channels).status();
}

Status CudnnConv::Forward(const float* x, const WindowGeometry& g, const float* w,
                          int out_channels, float* y) {
  Impl& m = *impl_;
  FM_ASSIGN_OR_RETURN(ConvPlan * p, m.Plan(g, out_channels));
  FM_RETURN_IF_ERROR(m.Reserve(p->fwd.memory));
  const float one = 1.0f, zero = 0.0f;
  FM_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(m.handle, &one, p->x, x, p->w, w, p->conv,
                                                   p->fwd.algo, m.workspace, p->fwd.memory,
                                                   &zero, p->y, y));
  return Status::OK();
}

Status CudnnConv::Backward(const float* x, const WindowGeometry& g, const float* w,
                           int out_channels, const float* dy, float* dw, float* dx) {
  Impl& m = *impl_;
  FM_ASSIGN_OR_RETURN(ConvPlan * p, m.Plan(g, out_channels));
  FM_RETURN_IF_ERROR(m.Reserve(std::max(p->bwd_filter.memory, p->bwd_data.memory)));
  const float one = 1.0f, zero = 0.0f;
  FM_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
      m.handle, &one, p->x, x, p->y, dy, p->conv, p->bwd_filter.algo, m.workspace,
      p->bwd_filter.memory, &zero, p->w, dw));
  if (dx != nullptr) {
    FM_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
        m.handle, &one, p->w, w, p->y, dy, p->conv, p->bwd_data.algo, m.workspace,
        p->bwd_data.memory, &zero, p->x, dx));
  }
  return Status::OK();
}

std::string CudnnConv::Algorithms(const WindowGeometry& g, int out_channels) const {
  auto it = impl_->plans.find(KeyOf(g, out_channels));
  if (it == impl_->plans.end()) return "";
  const ConvPlan& p = *it->second;
  return "fwd " + std::to_string(static_cast<int>(p.fwd.algo)) + " bwd-data " +
         std::to_string(static_cast<int>(p.bwd_data.algo)) + " bwd-filter " +
         std::to_string(static_cast<int>(p.bwd_filter.algo));
}

#else  // !FEDMESH_HAVE_CUDNN

struct CudnnConv::Impl {};
CudnnConv::CudnnConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnConv::~CudnnConv() = default;

Result<std::unique_ptr<CudnnConv>> CudnnConv::Create(cudaStream_t) {
  return Status::Unavailable("this build has no cuDNN (CMake found no libcudnn)");
}
std::string CudnnConv::Version() { return "no cuDNN"; }
Status CudnnConv::Prepare(const WindowGeometry&, int) {
  return Status::Unavailable("this build has no cuDNN");
}
Status CudnnConv::Forward(const float*, const WindowGeometry&, const float*, int, float*) {
  return Status::Unavailable("this build has no cuDNN");
}
Status CudnnConv::Backward(const float*, const WindowGeometry&, const float*, int, const float*,
                           float*, float*) {
  return Status::Unavailable("this build has no cuDNN");
}
std::string CudnnConv::Algorithms(const WindowGeometry&, int) const { return ""; }

#endif  // FEDMESH_HAVE_CUDNN

}  // namespace fedmesh::cuda
