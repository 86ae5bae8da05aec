// The per-element math of the CUDA kernels, written once as FM_HD functions: the kernels in
// core/cuda/ call them for one output element per thread, and the host tests
// (tests/core/cuda_kernel_math_test.cc) call them for every element and compare with the
// CPU backend, so index arithmetic and numerics are checked on machines without a GPU.
// Each function computes what the CPU backend computes for that element, in the same
// order of operations where the order changes the float result (col2im sums, softmax).
// Plain C++ (no CUDA headers): it compiles in host-only builds too.
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/backend.h"
#include "core/host_device.h"
#include "core/rng.h"

namespace fedmesh::kmath {

// SGD with momentum, weight decay and the FedProx term for one coordinate (SgdStepParams).
// `w_global` is read only when `prox`; `velocity` may be null when p.momentum == 0.
FM_HD inline void SgdElement(float* w, float grad, float* velocity, float w_global, bool prox,
                             const SgdStepParams& p) {
  float d = grad + p.weight_decay * *w;
  if (prox) d += p.prox_mu * (*w - w_global);
  const float v = velocity != nullptr ? p.momentum * *velocity + d : d;
  if (velocity != nullptr) *velocity = v;
  *w -= p.lr * v;
}

FM_HD inline float Relu(float x) { return x > 0.0f ? x : 0.0f; }
FM_HD inline float ReluGrad(float y, float dy) { return y > 0.0f ? dy : 0.0f; }

// The inverted-dropout mask value of element i (Backend::DropoutForward).
FM_HD inline float DropoutMask(uint64_t seed, uint64_t i, float p) {
  return CounterUniform(seed, i) >= p ? 1.0f / (1.0f - p) : 0.0f;
}

// Column c of the bias gradient: sum over rows of dy[r, c], rows in increasing order.
FM_HD inline float BiasGradColumn(const float* dy, int rows, int cols, int c) {
  float s = 0.0f;
  for (int r = 0; r < rows; ++r) s += dy[static_cast<int64_t>(r) * cols + c];
  return s;
}

// The bias gradient on the GPU is a column sum over a tall matrix (rows = N*OH*OW for a
// convolution): one thread per column would walk all rows alone. So it runs in two passes:
// thread (chunk, c) sums kBiasGradChunkRows consecutive rows of column c into
// partial[chunk, c], then BiasGradColumn sums partial's column c over chunks in order.
// With a single chunk (dense layers at small batch) the one-pass BiasGradColumn is used,
// which matches the CPU bit for bit; with more chunks only the float summation order
// differs. Deterministic either way (no atomics).
inline constexpr int kBiasGradChunkRows = 64;
FM_HD inline int BiasGradChunks(int rows) {
  return static_cast<int>((static_cast<int64_t>(rows) + kBiasGradChunkRows - 1) /
                          kBiasGradChunkRows);
}
FM_HD inline float BiasGradPartial(const float* dy, int rows, int cols, int chunk, int c) {
  const int64_t r0 = static_cast<int64_t>(chunk) * kBiasGradChunkRows;
  const int64_t r1 = r0 + kBiasGradChunkRows < rows ? r0 + kBiasGradChunkRows : rows;
  float s = 0.0f;
  for (int64_t r = r0; r < r1; ++r) s += dy[r * cols + c];
  return s;
}

// im2col (Backend::Im2Col): the flat NHWC input index that cols[row, col] is read from, or
// -1 where the window lies outside the image (zero padding).
FM_HD inline int64_t Im2ColSource(const WindowGeometry& g, int64_t row, int64_t col) {
  const int oh_n = g.out_h(), ow_n = g.out_w(), C = g.channels;
  const int64_t n = row / (static_cast<int64_t>(oh_n) * ow_n);
  const int oh = static_cast<int>((row / ow_n) % oh_n);
  const int ow = static_cast<int>(row % ow_n);
  const int c = static_cast<int>(col % C);
  const int tap = static_cast<int>(col / C);
  const int ih = oh * g.stride - g.pad + tap / g.kernel_w;
  const int iw = ow * g.stride - g.pad + tap % g.kernel_w;
  if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) return -1;
  return ((n * g.in_h + ih) * g.in_w + iw) * C + c;
}

// col2im (Backend::Col2Im) as a gather: dx at the flat NHWC index `pixel` is the sum of
// every column entry read from it. Windows are visited in increasing (oh, ow) order, the
// order in which the CPU backend scatters, so the float sums agree bit for bit.
FM_HD inline float Col2ImGather(const float* dcols, const WindowGeometry& g, int64_t pixel) {
  const int C = g.channels, oh_n = g.out_h(), ow_n = g.out_w();
  const int c = static_cast<int>(pixel % C);
  const int iw = static_cast<int>((pixel / C) % g.in_w);
  const int ih = static_cast<int>((pixel / (static_cast<int64_t>(C) * g.in_w)) % g.in_h);
  const int64_t n = pixel / (static_cast<int64_t>(C) * g.in_w * g.in_h);
  const int64_t row_len = static_cast<int64_t>(g.kernel_h) * g.kernel_w * C;
  float s = 0.0f;
  for (int kh = g.kernel_h - 1; kh >= 0; --kh) {  // larger kh: smaller oh
    const int th = ih + g.pad - kh;
    if (th < 0 || th % g.stride != 0) continue;
    const int oh = th / g.stride;
    if (oh >= oh_n) continue;
    for (int kw = g.kernel_w - 1; kw >= 0; --kw) {
      const int tw = iw + g.pad - kw;
      if (tw < 0 || tw % g.stride != 0) continue;
      const int ow = tw / g.stride;
      if (ow >= ow_n) continue;
      const int64_t row = (n * oh_n + oh) * ow_n + ow;
      s += dcols[row * row_len + (kh * g.kernel_w + kw) * C + c];
    }
  }
  return s;
}

// Max pooling (Backend::MaxPoolForward) of output element o (flat NHWC over the output):
// the first maximum in window order wins, as on the CPU.
FM_HD inline void MaxPoolCell(const float* x, const WindowGeometry& g, int64_t o, float* value,
                              int32_t* arg) {
  const int oh_n = g.out_h(), ow_n = g.out_w(), C = g.channels;
  const int c = static_cast<int>(o % C);
  const int64_t r = o / C;
  const int64_t n = r / (static_cast<int64_t>(oh_n) * ow_n);
  const int oh = static_cast<int>((r / ow_n) % oh_n);
  const int ow = static_cast<int>(r % ow_n);
  float best = -INFINITY;
  int32_t best_i = -1;
  for (int kh = 0; kh < g.kernel_h; ++kh) {
    const int ih = oh * g.stride - g.pad + kh;
    if (ih < 0 || ih >= g.in_h) continue;
    for (int kw = 0; kw < g.kernel_w; ++kw) {
      const int iw = ow * g.stride - g.pad + kw;
      if (iw < 0 || iw >= g.in_w) continue;
      const int32_t i = static_cast<int32_t>(((n * g.in_h + ih) * g.in_w + iw) * C + c);
      if (x[i] > best || best_i < 0) {
        best = x[i];
        best_i = i;
      }
    }
  }
  *value = best;
  *arg = best_i;
}

// Softmax cross-entropy of one row of logits (Backend::SoftmaxCrossEntropy): adds the row's
// loss to *loss and 1 to *correct when the first argmax equals the label; writes the row of
// dlogits = (softmax - onehot) * inv_rows when `d` is not null.
FM_HD inline void SoftmaxCrossEntropyRow(const float* z, int classes, int label, float inv_rows,
                                         float* d, double* loss, int64_t* correct) {
  int best = 0;
  float zmax = z[0];
  for (int c = 1; c < classes; ++c) {
    if (z[c] > zmax) {
      zmax = z[c];
      best = c;
    }
  }
  double sum = 0.0;
  for (int c = 0; c < classes; ++c) sum += exp(static_cast<double>(z[c] - zmax));
  *loss += log(sum) - static_cast<double>(z[label] - zmax);
  *correct += (best == label);
  if (d != nullptr) {
    const double inv_sum = 1.0 / sum;
    for (int c = 0; c < classes; ++c) {
      d[c] = static_cast<float>(exp(static_cast<double>(z[c] - zmax)) * inv_sum) * inv_rows;
    }
    d[label] -= inv_rows;
  }
}

}  // namespace fedmesh::kmath
