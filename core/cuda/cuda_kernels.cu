// The CUDA backend's own kernels (see core/cuda/cuda_kernels.h). Element-wise kernels are
// memory-bound one-liners; the per-element math that can be got wrong (window indexing,
// softmax, the SGD update, dropout masks) lives in core/cuda/kernel_math.h, shared with
// the host tests.
#include "core/cuda/cuda_kernels.h"

#include <algorithm>

#include "core/cuda/kernel_math.h"

namespace fedmesh::cuda {
namespace {

// Grid-stride loop over [0, n) in 64-bit indices: correct for any grid size and any n.
#define FM_GRID_LOOP(i, n)                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
       i < static_cast<int64_t>(n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Sum of v over the block. REQUIRES blockDim.x == kBlockThreads (a power of two) and every
// thread of the block calling it. Ends with a barrier so it can be called again at once.
template <typename T>
__device__ T BlockSum(T v) {
  __shared__ T buf[kBlockThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlockThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const T total = buf[0];
  __syncthreads();
  return total;
}

__global__ void FillKernel(float* x, int64_t n, float value) { FM_GRID_LOOP(i, n) x[i] = value; }

__global__ void AddBiasKernel(float* y, const float* bias, int64_t total, int cols) {
  FM_GRID_LOOP(i, total) y[i] += bias[i % cols];
}

// dbias[c] = sum over rows of dy[r, c]; one thread per column.
__global__ void ColumnSumKernel(const float* dy, float* dbias, int rows, int cols) {
  FM_GRID_LOOP(c, cols) dbias[c] = kmath::BiasGradColumn(dy, rows, cols, static_cast<int>(c));
}

// partial[chunk, c] for chunk < chunks: the first pass of the two-pass column sum.
__global__ void ColumnPartialKernel(const float* dy, float* partial, int rows, int cols,
                                    int chunks) {
  const int64_t total = static_cast<int64_t>(chunks) * cols;
  FM_GRID_LOOP(i, total) {
    partial[i] = kmath::BiasGradPartial(dy, rows, cols, static_cast<int>(i / cols),
                                        static_cast<int>(i % cols));
  }
}

__global__ void AxpyKernel(int64_t n, float alpha, const float* x, float* y) {
  FM_GRID_LOOP(i, n) y[i] += alpha * x[i];
}

__global__ void ScaleKernel(int64_t n, float alpha, float* x) { FM_GRID_LOOP(i, n) x[i] *= alpha; }

__global__ void SquaredNormPartialKernel(const float* x, int64_t n, double* partial) {
  double s = 0.0;
  FM_GRID_LOOP(i, n) {
    const double v = x[i];
    s += v * v;
  }
  s = BlockSum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// One block: *out = sum of partial[0, count).
__global__ void SumDoublesKernel(const double* partial, int count, double* out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = BlockSum(s);
  if (threadIdx.x == 0) *out = s;
}

__global__ void ReluForwardKernel(const float* x, float* y, int64_t n) {
  FM_GRID_LOOP(i, n) y[i] = kmath::Relu(x[i]);
}

__global__ void ReluBackwardKernel(const float* y, const float* dy, float* dx, int64_t n) {
  FM_GRID_LOOP(i, n) dx[i] = kmath::ReluGrad(y[i], dy[i]);
}

__global__ void DropoutForwardKernel(const float* x, float* y, float* mask, int64_t n, float p,
                                     uint64_t seed) {
  FM_GRID_LOOP(i, n) {
    const float xi = x[i];  // read before writing: y may alias x
    const float m = kmath::DropoutMask(seed, static_cast<uint64_t>(i), p);
    mask[i] = m;
    y[i] = xi * m;
  }
}

__global__ void MultiplyKernel(const float* a, const float* b, float* out, int64_t n) {
  FM_GRID_LOOP(i, n) out[i] = a[i] * b[i];
}

// One thread per column-matrix entry (row-major [rows, row_len]).
__global__ void Im2ColKernel(const float* x, WindowGeometry g, int64_t row_len, int64_t total,
                             float* cols) {
  FM_GRID_LOOP(i, total) {
    const int64_t src = kmath::Im2ColSource(g, i / row_len, i % row_len);
    cols[i] = src < 0 ? 0.0f : x[src];
  }
}

// One thread per input element: gathers instead of scattering, so no atomics and dx is
// overwritten.
__global__ void Col2ImKernel(const float* dcols, WindowGeometry g, int64_t total, float* dx) {
  FM_GRID_LOOP(i, total) dx[i] = kmath::Col2ImGather(dcols, g, i);
}

__global__ void MaxPoolForwardKernel(const float* x, WindowGeometry g, int64_t total, float* y,
                                     int32_t* argmax) {
  FM_GRID_LOOP(o, total) kmath::MaxPoolCell(x, g, o, &y[o], &argmax[o]);
}

__global__ void MaxPoolScatterKernel(const float* dy, const int32_t* argmax, int64_t out_size,
                                     float* dx, int64_t in_size) {
  FM_GRID_LOOP(i, out_size) {
    const int64_t a = argmax[i];
    if (a >= 0 && a < in_size) atomicAdd(dx + a, dy[i]);  // -1: window wholly in padding
  }
}

__global__ void SoftmaxRowKernel(const float* logits, const int32_t* labels, int rows, int classes,
                                 float* dlogits, double* row_loss, int64_t* row_correct) {
  const float inv_rows = 1.0f / static_cast<float>(rows);  // as the CPU computes it
  FM_GRID_LOOP(r, rows) {
    const int64_t offset = r * classes;
    double loss = 0.0;
    int64_t correct = 0;
    kmath::SoftmaxCrossEntropyRow(logits + offset, classes, labels[r], inv_rows,
                                  dlogits != nullptr ? dlogits + offset : nullptr, &loss, &correct);
    row_loss[r] = loss;
    row_correct[r] = correct;
  }
}

// One block: sums the per-row results.
__global__ void SoftmaxReduceKernel(const double* row_loss, const int64_t* row_correct, int rows,
                                    double* loss_sum, int64_t* correct) {
  double s = 0.0;
  int64_t c = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    s += row_loss[i];
    c += row_correct[i];
  }
  s = BlockSum(s);
  c = BlockSum(c);
  if (threadIdx.x == 0) {
    *loss_sum = s;
    *correct = c;
  }
}

__global__ void SgdStepKernel(float* w, const float* grad, float* velocity, const float* w_global,
                              int64_t n, SgdStepParams p) {
  const bool prox = w_global != nullptr && p.prox_mu != 0.0f;
  FM_GRID_LOOP(i, n) {
    kmath::SgdElement(&w[i], grad[i], velocity != nullptr ? &velocity[i] : nullptr,
                      prox ? w_global[i] : 0.0f, prox, p);
  }
}

// Element counts of the geometry's tensors, in 64 bits.
int64_t InputElements(const WindowGeometry& g) {
  return static_cast<int64_t>(g.batch) * g.in_h * g.in_w * g.channels;
}
int64_t OutputRows(const WindowGeometry& g) {
  return static_cast<int64_t>(g.batch) * g.out_h() * g.out_w();
}
int64_t ColumnLength(const WindowGeometry& g) {
  return static_cast<int64_t>(g.kernel_h) * g.kernel_w * g.channels;
}

}  // namespace

unsigned GridBlocks(const LaunchConfig& l, size_t n) {
  const size_t blocks = (n + kBlockThreads - 1) / kBlockThreads;
  return static_cast<unsigned>(std::clamp<size_t>(blocks, 1, std::max(1u, l.max_blocks)));
}

unsigned ReductionBlocks(const LaunchConfig& l, size_t n) {
  // The final pass is one block looping over the partials: keep them few.
  return std::min(GridBlocks(l, n), 1024u);
}

#define FM_LAUNCH(kernel, blocks, ...) kernel<<<(blocks), kBlockThreads, 0, l.stream>>>(__VA_ARGS__)

cudaError_t Fill(const LaunchConfig& l, float* x, size_t n, float value) {
  if (n == 0) return cudaSuccess;
  FM_LAUNCH(FillKernel, GridBlocks(l, n), x, static_cast<int64_t>(n), value);
  return cudaGetLastError();
}

cudaError_t AddBias(const LaunchConfig& l, float* y, const float* bias, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t total = static_cast<int64_t>(rows) * cols;
  FM_LAUNCH(AddBiasKernel, GridBlocks(l, total), y, bias, total, cols);
  return cudaGetLastError();
}

size_t BiasGradScratchFloats(int rows, int cols) {
  const int chunks = kmath::BiasGradChunks(rows);
  return chunks > 1 && cols > 0 ? static_cast<size_t>(chunks) * cols : 0;
}

cudaError_t BiasGrad(const LaunchConfig& l, const float* dy, float* dbias, int rows, int cols,
                     float* partial) {
  if (cols <= 0) return cudaSuccess;
  const int chunks = kmath::BiasGradChunks(rows);
  if (chunks <= 1) {  // also rows == 0: zeros, as on the CPU
    FM_LAUNCH(ColumnSumKernel, GridBlocks(l, cols), dy, dbias, rows < 0 ? 0 : rows, cols);
    return cudaGetLastError();
  }
  FM_LAUNCH(ColumnPartialKernel, GridBlocks(l, static_cast<size_t>(chunks) * cols), dy, partial,
            rows, cols, chunks);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  FM_LAUNCH(ColumnSumKernel, GridBlocks(l, cols), partial, dbias, chunks, cols);
  return cudaGetLastError();
}

cudaError_t Axpy(const LaunchConfig& l, size_t n, float alpha, const float* x, float* y) {
  if (n == 0) return cudaSuccess;
  FM_LAUNCH(AxpyKernel, GridBlocks(l, n), static_cast<int64_t>(n), alpha, x, y);
  return cudaGetLastError();
}

cudaError_t Scale(const LaunchConfig& l, size_t n, float alpha, float* x) {
  if (n == 0) return cudaSuccess;
  FM_LAUNCH(ScaleKernel, GridBlocks(l, n), static_cast<int64_t>(n), alpha, x);
  return cudaGetLastError();
}

cudaError_t SquaredNorm(const LaunchConfig& l, size_t n, const float* x, double* partial,
                        double* out) {
  const unsigned blocks = ReductionBlocks(l, n);
  FM_LAUNCH(SquaredNormPartialKernel, blocks, x, static_cast<int64_t>(n), partial);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  FM_LAUNCH(SumDoublesKernel, 1u, partial, static_cast<int>(blocks), out);
  return cudaGetLastError();
}

cudaError_t ReluForward(const LaunchConfig& l, const float* x, float* y, size_t n) {
  if (n == 0) return cudaSuccess;
  FM_LAUNCH(ReluForwardKernel, GridBlocks(l, n), x, y, static_cast<int64_t>(n));
  return cudaGetLastError();
}

cudaError_t ReluBackward(const LaunchConfig& l, const float* y, const float* dy, float* dx,
                         size_t n) {
  if (n == 0) return cudaSuccess;
  FM_LAUNCH(ReluBackwardKernel, GridBlocks(l, n), y, dy, dx, static_cast<int64_t>(n));
  return cudaGetLastError();
}

cudaError_t DropoutForward(const LaunchConfig& l, const float* x, float* y, float* mask, size_t n,
                           float p, uint64_t seed) {
  if (n == 0) return cudaSuccess;
  FM_LAUNCH(DropoutForwardKernel, GridBlocks(l, n), x, y, mask, static_cast<int64_t>(n), p, seed);
  return cudaGetLastError();
}

cudaError_t Multiply(const LaunchConfig& l, const float* a, const float* b, float* out, size_t n) {
  if (n == 0) return cudaSuccess;
  FM_LAUNCH(MultiplyKernel, GridBlocks(l, n), a, b, out, static_cast<int64_t>(n));
  return cudaGetLastError();
}

cudaError_t Im2Col(const LaunchConfig& l, const float* x, const WindowGeometry& g, float* cols) {
  const int64_t row_len = ColumnLength(g);
  const int64_t total = OutputRows(g) * row_len;
  if (total <= 0) return cudaSuccess;
  FM_LAUNCH(Im2ColKernel, GridBlocks(l, total), x, g, row_len, total, cols);
  return cudaGetLastError();
}

cudaError_t Col2Im(const LaunchConfig& l, const float* dcols, const WindowGeometry& g, float* dx) {
  const int64_t total = InputElements(g);
  if (total <= 0) return cudaSuccess;
  FM_LAUNCH(Col2ImKernel, GridBlocks(l, total), dcols, g, total, dx);
  return cudaGetLastError();
}

cudaError_t MaxPoolForward(const LaunchConfig& l, const float* x, const WindowGeometry& g, float* y,
                           int32_t* argmax) {
  const int64_t total = OutputRows(g) * g.channels;
  if (total <= 0) return cudaSuccess;
  FM_LAUNCH(MaxPoolForwardKernel, GridBlocks(l, total), x, g, total, y, argmax);
  return cudaGetLastError();
}

cudaError_t MaxPoolBackward(const LaunchConfig& l, const float* dy, const int32_t* argmax,
                            size_t out_size, float* dx, size_t in_size) {
  if (const cudaError_t err = Fill(l, dx, in_size, 0.0f); err != cudaSuccess) return err;
  if (out_size == 0) return cudaSuccess;
  FM_LAUNCH(MaxPoolScatterKernel, GridBlocks(l, out_size), dy, argmax,
            static_cast<int64_t>(out_size), dx, static_cast<int64_t>(in_size));
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(const LaunchConfig& l, const float* logits, const int32_t* labels,
                                int rows, int classes, float* dlogits, double* row_loss,
                                int64_t* row_correct, double* loss_sum, int64_t* correct) {
  FM_LAUNCH(SoftmaxRowKernel, GridBlocks(l, rows), logits, labels, rows, classes, dlogits, row_loss,
            row_correct);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  FM_LAUNCH(SoftmaxReduceKernel, 1u, row_loss, row_correct, rows, loss_sum, correct);
  return cudaGetLastError();
}

cudaError_t SgdStep(const LaunchConfig& l, float* w, const float* grad, float* velocity,
                    const float* w_global, size_t n, const SgdStepParams& p) {
  if (n == 0) return cudaSuccess;
  FM_LAUNCH(SgdStepKernel, GridBlocks(l, n), w, grad, velocity, w_global, static_cast<int64_t>(n),
            p);
  return cudaGetLastError();
}

#undef FM_LAUNCH
#undef FM_GRID_LOOP

}  // namespace fedmesh::cuda
