// CudnnConv: the CUDA backend's Conv2d forward and backward through cuDNN, in fedmesh's
// layouts as they are (NHWC activations are cuDNN's NHWC tensors; [OC, KH, KW, C] weights
// are its NHWC filters), so nothing is transposed or copied.
//
// Why these choices:
//  - FP32 with FMA math only (CUDNN_FMA_MATH): no TF32 tensor cores, so the GPU agrees with
//    the CPU backend to 1e-4 as the im2col + cuBLAS path does (cuBLAS runs without TF32 too).
//  - Deterministic algorithms only: the same inputs give the same bits on every run (the
//    im2col path's property; cuDNN's atomics-based backward algorithms are skipped).
//  - The fastest such algorithm of each pass is measured once per geometry (cudnnFind*,
//    like PyTorch's cudnn.benchmark) and cached: a run sees one or two batch sizes.
//  - The workspace is this object's own, grown on demand (Find reports each algorithm's
//    need; algorithms wanting more than kMaxWorkspaceBytes are not considered).
//
// Ordering: every call queues on the stream given to Create (the backend's one stream).
// Errors are returned, never thrown. One thread at a time, as for the backend.
// Include only from CUDA sources. In a build without cuDNN, Create returns Unavailable.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/status.h"

namespace fedmesh::cuda {

class CudnnConv {
 public:
  static constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;

  // A cuDNN handle on `stream` (of the current device). Unavailable without cuDNN in the
  // build; the cuDNN error when the library cannot start (a missing sub-library, say).
  static Result<std::unique_ptr<CudnnConv>> Create(cudaStream_t stream);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // "cuDNN 9.19.0" (the library loaded at run time).
  static std::string Version();

  // Makes the geometry's plan (the first time: descriptors, each pass's algorithm
  // measured; a failure is remembered too). OK when Forward and Backward can run it;
  // NotFound when cuDNN has no deterministic FP32 algorithm for it, or cuDNN's error.
  Status Prepare(const WindowGeometry& g, int out_channels);

  // y[N, OH, OW, OC] = conv(x, w), overwritten; the bias is the caller's.
  Status Forward(const float* x, const WindowGeometry& g, const float* w, int out_channels,
                 float* y);
  // dw = dL/dw (overwritten) and, when dx is not null, dx = dL/dx (overwritten).
  Status Backward(const float* x, const WindowGeometry& g, const float* w, int out_channels,
                  const float* dy, float* dw, float* dx);

  // The algorithms chosen for a geometry seen before, e.g. "fwd 1 bwd-data 1 bwd-filter 1";
  // empty when it was not seen.
  std::string Algorithms(const WindowGeometry& g, int out_channels) const;

 private:
  struct Impl;
  explicit CudnnConv(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedmesh::cuda
