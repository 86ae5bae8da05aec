// CUDA graph kernels: the graph ops (core/graph/ops/) on the GPU, for a GraphModel whose
// backend is a CudaBackend. Each CUDA kernel wraps the op's CPU kernel, made first by the
// CPU factory, which keeps everything that does not depend on where the numbers live:
// attribute validation and its errors, shape inference, which inputs are state or indices.
// The CUDA kernel reads the (validated) attributes it needs from the node again and
// computes Forward and Backward on the device, queued on the backend's stream (GEMMs
// through the backend's cuBLAS), with the CPU kernel's contract: Backward ACCUMULATES into
// din. No CUDA kernel steps a parameter in place (CanStepInput is false), so the executor
// hands them ordinary gradients and BackwardSgd steps the rest with one SgdStep.
// Workspaces are the CUDA kernel's own (WorkspaceFloats, 0 unless overridden).
// Include only from CUDA sources.
// Thread-safety: as OpKernel (one executor, one thread).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/cuda/cuda_backend.h"
#include "core/cuda/cuda_kernels.h"
#include "core/graph/op_kernel.h"

namespace fedmesh::graph::cuda_ops {

using KernelResult = Result<std::unique_ptr<OpKernel>>;

class CudaOpKernel : public OpKernel {
 public:
  explicit CudaOpKernel(std::unique_ptr<OpKernel> cpu) : cpu_(std::move(cpu)) {}
  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    return cpu_->InferShapes(in, out);
  }
  bool IsStateInput(size_t i) const override { return cpu_->IsStateInput(i); }
  bool IsIndexInput(size_t i) const override { return cpu_->IsIndexInput(i); }

 protected:
  const OpKernel& cpu() const { return *cpu_; }

 private:
  std::unique_ptr<OpKernel> cpu_;
};

// The call's backend as a CudaBackend (GraphModel hands CUDA kernels nothing else).
inline CudaBackend& Cuda(const KernelCall& c) { return *static_cast<CudaBackend*>(c.be); }

// The launch configuration of the call's backend; false after a failure (queue nothing).
inline bool Begin(const KernelCall& c, fedmesh::cuda::LaunchConfig* l) {
  void* stream = nullptr;
  unsigned blocks = 1;
  if (!Cuda(c).EnterForKernel(&stream, &blocks)) return false;
  l->stream = static_cast<cudaStream_t>(stream);
  l->max_blocks = blocks;
  return true;
}

// Records a launch's result (cudaGetLastError() after it) against the backend: the first
// failure becomes the backend's sticky error, returned by Synchronize().
inline void Launched(const KernelCall& c, cudaError_t e, const char* what) {
  Cuda(c).LaunchedKernel(static_cast<int>(e), what);
}

// A grid-stride loop over [0, n) with a 64-bit index (launch with Blocks(l, n) blocks).
#define FM_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

// Fixed-order sum of one double per thread of a block of kBlockThreads threads (the
// launch must use exactly that many); every thread gets the sum. Deterministic: the same
// inputs give the same bits on every run.
__device__ inline double BlockSum(double v) {
  __shared__ double s[fedmesh::cuda::kBlockThreads];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int k = fedmesh::cuda::kBlockThreads / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  const double r = s[0];
  __syncthreads();
  return r;
}

// Grid for n elements with kBlockThreads per block and a grid-stride loop.
inline unsigned Blocks(const fedmesh::cuda::LaunchConfig& l, size_t n) {
  return fedmesh::cuda::GridBlocks(l, n);
}

}  // namespace fedmesh::graph::cuda_ops
