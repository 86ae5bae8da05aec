// Host launch functions for the CUDA backend's own kernels (core/cuda/cuda_kernels.cu).
// Each queues its kernel(s) on `l.stream` and returns cudaGetLastError() after the launch
// (cudaSuccess without launching when there is nothing to do), so the caller can turn a
// failure into a Status naming the kernel. Nothing here synchronises.
// Per-element math comes from core/cuda/kernel_math.h (one output element, row or column
// per thread), which the host tests check against the CPU backend.
// Sizes are 64-bit and every kernel uses a grid-stride loop, so any element count works
// with the capped grid. Include only from CUDA sources.
// Thread-safety: the functions are pure launchers; ordering is the stream's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/backend.h"

namespace fedmesh::cuda {

inline constexpr int kBlockThreads = 256;  // every 1-D kernel; reductions assume it

struct LaunchConfig {
  cudaStream_t stream = nullptr;
  unsigned max_blocks = 1;  // grid cap (a multiple of the SM count); >= 1
};

// Blocks of kBlockThreads for n elements, at least 1 and at most l.max_blocks.
unsigned GridBlocks(const LaunchConfig& l, size_t n);
// The number of per-block partials SquaredNorm writes for n elements (its scratch size).
unsigned ReductionBlocks(const LaunchConfig& l, size_t n);

cudaError_t Fill(const LaunchConfig& l, float* x, size_t n, float value);
cudaError_t AddBias(const LaunchConfig& l, float* y, const float* bias, int rows, int cols);
// `partial` holds BiasGradScratchFloats(rows, cols) floats (unused when that is 0).
size_t BiasGradScratchFloats(int rows, int cols);
cudaError_t BiasGrad(const LaunchConfig& l, const float* dy, float* dbias, int rows, int cols,
                     float* partial);
cudaError_t Axpy(const LaunchConfig& l, size_t n, float alpha, const float* x, float* y);
cudaError_t Scale(const LaunchConfig& l, size_t n, float alpha, float* x);
// *out = sum of double(x[i])^2; `partial` holds ReductionBlocks(l, n) doubles. REQUIRES n > 0.
cudaError_t SquaredNorm(const LaunchConfig& l, size_t n, const float* x, double* partial,
                        double* out);

cudaError_t ReluForward(const LaunchConfig& l, const float* x, float* y, size_t n);
cudaError_t ReluBackward(const LaunchConfig& l, const float* y, const float* dy, float* dx,
                         size_t n);
cudaError_t DropoutForward(const LaunchConfig& l, const float* x, float* y, float* mask, size_t n,
                           float p, uint64_t seed);
cudaError_t Multiply(const LaunchConfig& l, const float* a, const float* b, float* out, size_t n);

cudaError_t Im2Col(const LaunchConfig& l, const float* x, const WindowGeometry& g, float* cols);
cudaError_t Col2Im(const LaunchConfig& l, const float* dcols, const WindowGeometry& g, float* dx);
cudaError_t MaxPoolForward(const LaunchConfig& l, const float* x, const WindowGeometry& g, float* y,
                           int32_t* argmax);
// Zeroes dx[0, in_size) and adds dy[i] at argmax[i] (atomically: overlapping windows may
// route several outputs to one input, and then the float sum order is not deterministic).
cudaError_t MaxPoolBackward(const LaunchConfig& l, const float* dy, const int32_t* argmax,
                            size_t out_size, float* dx, size_t in_size);

// Per-row softmax cross-entropy into row_loss/row_correct (rows entries each), then one
// block sums them into *loss_sum and *correct. REQUIRES rows > 0.
cudaError_t SoftmaxCrossEntropy(const LaunchConfig& l, const float* logits, const int32_t* labels,
                                int rows, int classes, float* dlogits, double* row_loss,
                                int64_t* row_correct, double* loss_sum, int64_t* correct);

cudaError_t SgdStep(const LaunchConfig& l, float* w, const float* grad, float* velocity,
                    const float* w_global, size_t n, const SgdStepParams& p);

}  // namespace fedmesh::cuda
