// The graph ops that move elements on the GPU: Transpose, Concat, Gather and Pad (CPU:
// core/graph/ops/shape_ops.cc, whose attribute semantics these follow). Each forward is a
// thread per element it writes; each backward a thread per gradient element it writes,
// so nothing is added by two threads at once:
//  - Transpose and Pad map every input element to one output element.
//  - Concat runs one launch per input, in order, so an input listed twice accumulates
//    both slices in stream order.
//  - Gather's backward sorts the positions by index (CUB's stable radix sort, in the
//    workspace), then each gradient element sums the output rows that read it in position
//    order: repeated indices give the same sum on every run.
// Gather checks its indices on the device and copies one int back (the only wait here):
// an index out of range or not an integer fails Forward as on the CPU.
#include <cub/cub.cuh>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/cuda/graph/cuda_op_kernel.h"
#include "core/cuda/graph/cuda_ops.h"
#include "core/cuda/graph/cuda_shape.h"

namespace fedmesh::graph::cuda_ops {
namespace {

using fedmesh::cuda::kBlockThreads;
using fedmesh::cuda::LaunchConfig;

// y[base + map(i)] = x[i] (Transpose with base 0, Pad's interior).
__global__ void ScatterKernel(StridedDims<1> map, int64_t base, const float* __restrict__ x, float* __restrict__ y,
                              int64_t n) {
  FM_GRID_STRIDE(i, n) y[base + map.Offset(i)] = x[i];
}

// dx[i] += dy[base + map(i)] (the backward of both).
__global__ void GatherAddKernel(StridedDims<1> map, int64_t base, const float* __restrict__ dy,
                                float* __restrict__ dx, int64_t n) {
  FM_GRID_STRIDE(i, n) dx[i] += dy[base + map.Offset(i)];
}

// ---- Transpose

class CudaTranspose final : public CudaOpKernel {
 public:
  CudaTranspose(std::unique_ptr<OpKernel> cpu, std::vector<int64_t> perm, std::string label)
      : CudaOpKernel(std::move(cpu)), perm_(std::move(perm)), label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_RETURN_IF_ERROR(CudaOpKernel::InferShapes(in, out));
    return CheckRanks({in[0]}, label_);
  }

  // Forward writes the input in order to where it goes in the output (coalesced reads;
  // the writes scatter), backward reads the output gradient back in input order.
  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    const Dims& x = *c.in_dims[0];
    const int64_t n = NumElements(x);
    if (n == 0) return Status::OK();
    ScatterKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(InputToOutput(x), 0, c.in[0], c.out[0], n);
    Launched(c, cudaGetLastError(), "Transpose ScatterKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.din[0] || !c.dout[0] || !Begin(c, &l)) return;
    const Dims& x = *c.in_dims[0];
    const int64_t n = NumElements(x);
    if (n == 0) return;
    GatherAddKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(InputToOutput(x), 0, c.dout[0], c.din[0], n);
    Launched(c, cudaGetLastError(), "Transpose GatherAddKernel");
  }

 private:
  // The output offset of each input element: input dim d is output dim k where perm[k] = d.
  StridedDims<1> InputToOutput(const Dims& x) const {
    const size_t r = x.size();
    std::vector<int64_t> p = perm_;
    if (p.empty())
      for (size_t k = 0; k < r; ++k) p.push_back(static_cast<int64_t>(r - 1 - k));
    Dims y(r);
    for (size_t k = 0; k < r; ++k) y[k] = x[p[k]];
    const std::vector<int64_t> ys = DenseStrides(y);
    std::vector<int64_t> s(r);
    for (size_t k = 0; k < r; ++k) s[p[k]] = ys[k];
    return MakeStrided<1>(x, {s});
  }

  std::vector<int64_t> perm_;
  std::string label_;
};

// ---- Concat

// Input t's slice: rows of `len` floats, row o at y[o * row + off].
__global__ void ConcatForwardKernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t len,
                                    int64_t row, int64_t off) {
  FM_GRID_STRIDE(e, n) {
    const int64_t o = e / len;
    y[o * row + off + (e - o * len)] = x[e];
  }
}
__global__ void ConcatBackwardKernel(const float* __restrict__ dy, float* __restrict__ dx, int64_t n, int64_t len,
                                     int64_t row, int64_t off) {
  FM_GRID_STRIDE(e, n) {
    const int64_t o = e / len;
    dx[e] += dy[o * row + off + (e - o * len)];
  }
}

class CudaConcat final : public CudaOpKernel {
 public:
  CudaConcat(std::unique_ptr<OpKernel> cpu, int64_t axis) : CudaOpKernel(std::move(cpu)), axis_(axis) {}

  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    EachInput(c, [&](size_t t, int64_t outer, int64_t len, int64_t row, int64_t off) {
      ConcatForwardKernel<<<Blocks(l, outer * len), kBlockThreads, 0, l.stream>>>(c.in[t], c.out[0], outer * len,
                                                                                   len, row, off);
      Launched(c, cudaGetLastError(), "ConcatForwardKernel");
    });
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.dout[0] || !Begin(c, &l)) return;
    EachInput(c, [&](size_t t, int64_t outer, int64_t len, int64_t row, int64_t off) {
      if (!c.din[t]) return;
      ConcatBackwardKernel<<<Blocks(l, outer * len), kBlockThreads, 0, l.stream>>>(c.dout[0], c.din[t],
                                                                                    outer * len, len, row, off);
      Launched(c, cudaGetLastError(), "ConcatBackwardKernel");
    });
  }

 private:
  // As the CPU kernel: outer x (sum of the inputs' axis extents x inner); f(t, outer,
  // len, row, off) for every non-empty input in order.
  template <typename F>
  void EachInput(const KernelCall& c, F&& f) const {
    const Dims& y = *c.out_dims[0];
    const int64_t ax = axis_ < 0 ? axis_ + static_cast<int64_t>(y.size()) : axis_;
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < ax; ++k) outer *= y[k];
    for (size_t k = ax + 1; k < y.size(); ++k) inner *= y[k];
    const int64_t row = y[ax] * inner;
    int64_t off = 0;
    for (size_t t = 0; t < c.in.size(); ++t) {
      const int64_t len = (*c.in_dims[t])[ax] * inner;
      if (outer * len > 0) f(t, outer, len, row, off);
      off += len;
    }
  }

  int64_t axis_;
};

// ---- Gather

// The index as an int64 if it is an exact integer in [-len, len), else `len` (the CPU
// kernel's test: in range as a float first, since converting NaN or a huge value is UB).
__device__ __forceinline__ int64_t CheckedIndex(float v, int64_t len) {
  const bool in_range = v >= static_cast<float>(-len) && v < static_cast<float>(len);
  const int64_t k = in_range ? static_cast<int64_t>(v) : len;
  return static_cast<float>(k) != v || k < -len || k >= len ? len : k;
}

// *first_bad = min(*first_bad, position of every bad index): integer atomics, exact.
__global__ void GatherCheckKernel(const float* __restrict__ idx, int64_t count, int64_t len, int* first_bad) {
  FM_GRID_STRIDE(j, count) {
    if (CheckedIndex(idx[j], len) == len) atomicMin(first_bad, static_cast<int>(j));
  }
}

__global__ void GatherForwardKernel(const float* __restrict__ x, const float* __restrict__ idx,
                                    float* __restrict__ y, int64_t n, int64_t len, int64_t inner, int64_t count) {
  FM_GRID_STRIDE(e, n) {
    const int64_t t = e / inner, i = e - t * inner;
    const int64_t o = t / count, j = t - o * count;
    int64_t k = static_cast<int64_t>(idx[j]);
    if (k < 0) k += len;
    y[e] = x[(o * len + k) * inner + i];
  }
}

__global__ void GatherKeysKernel(const float* __restrict__ idx, int64_t count, int64_t len, int* __restrict__ keys,
                                 int* __restrict__ positions) {
  FM_GRID_STRIDE(j, count) {
    int64_t k = static_cast<int64_t>(idx[j]);
    if (k < 0) k += len;
    keys[j] = static_cast<int>(k);
    positions[j] = static_cast<int>(j);
  }
}

// starts[k] = the first sorted position whose key is >= k, for k in [0, len].
__global__ void GatherStartsKernel(const int* __restrict__ sorted_keys, int64_t count, int64_t len,
                                   int* __restrict__ starts) {
  FM_GRID_STRIDE(k, len + 1) {
    int64_t lo = 0, hi = count;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (sorted_keys[mid] < k) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    starts[k] = static_cast<int>(lo);
  }
}

// dx[o, k, i] += sum of dy[o, j, i] over the positions j with index k, j ascending.
__global__ void GatherBackwardKernel(const float* __restrict__ dy, const int* __restrict__ starts,
                                     const int* __restrict__ positions, float* __restrict__ dx, int64_t n,
                                     int64_t len, int64_t inner, int64_t count) {
  FM_GRID_STRIDE(e, n) {
    const int64_t t = e / inner, i = e - t * inner;
    const int64_t o = t / len, k = t - o * len;
    const int begin = starts[k], end = starts[k + 1];
    if (begin == end) continue;
    float s = 0.0f;
    for (int p = begin; p < end; ++p) s += dy[(o * count + positions[p]) * inner + i];
    dx[e] += s;
  }
}

constexpr int kNoBadIndex = 0x7f7f7f7f;  // what a 0x7f memset leaves in an int
constexpr size_t kCubAlign = 256;

class CudaGather final : public CudaOpKernel {
 public:
  CudaGather(std::unique_ptr<OpKernel> cpu, int64_t axis, std::string label)
      : CudaOpKernel(std::move(cpu)), axis_(axis), label_(std::move(label)) {}

  // Positions and indices travel as int.
  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_RETURN_IF_ERROR(CudaOpKernel::InferShapes(in, out));
    const Geometry g = Geom(in[0], in[1]);
    if (g.count >= INT_MAX || g.len >= INT_MAX)
      return Status::Unimplemented(label_ + ": the CUDA kernel takes fewer than 2^31 indices and rows, not " +
                                   DimsToString(in[1]) + " into " + DimsToString(in[0]));
    return Status::OK();
  }

  // Ints: [first bad position], then for Backward keys, positions, sorted keys, sorted
  // positions (count each), starts (len + 1), then CUB's scratch on a 256-byte boundary.
  size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>&) const override {
    const Geometry g = Geom(in[0], in[1]);
    return (Layout(g).cub_offset + SortScratchBytes(g) + kCubAlign) / sizeof(float);
  }

  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    const Geometry g = Geom(*c.in_dims[0], *c.in_dims[1]);
    if (g.count == 0) return Status::OK();
    int* first_bad = reinterpret_cast<int*>(c.workspace);
    Launched(c, cudaMemsetAsync(first_bad, 0x7f, sizeof(int), l.stream), "Gather cudaMemsetAsync");
    GatherCheckKernel<<<Blocks(l, g.count), kBlockThreads, 0, l.stream>>>(c.in[1], g.count, g.len, first_bad);
    Launched(c, cudaGetLastError(), "GatherCheckKernel");
    int bad = kNoBadIndex;  // stays so when the backend has failed (its copies do nothing)
    c.be->CopyToHost(&bad, first_bad, sizeof(int));
    if (bad != kNoBadIndex) {
      float v = 0.0f;
      c.be->CopyToHost(&v, c.in[1] + bad, sizeof(float));
      return Status::OutOfRange(label_ + ": index " + std::to_string(v) + " at position " + std::to_string(bad) +
                                " is not an integer in [" + std::to_string(-g.len) + ", " +
                                std::to_string(g.len) + ")");
    }
    const int64_t n = g.outer * g.count * g.inner;
    if (n == 0) return Status::OK();
    GatherForwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(c.in[0], c.in[1], c.out[0], n, g.len,
                                                                        g.inner, g.count);
    Launched(c, cudaGetLastError(), "GatherForwardKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.din[0] || !c.dout[0] || !Begin(c, &l)) return;
    const Geometry g = Geom(*c.in_dims[0], *c.in_dims[1]);
    const int64_t n = g.outer * g.len * g.inner;
    if (g.count == 0 || n == 0) return;
    const WorkspaceLayout w = Layout(g);
    int* ints = reinterpret_cast<int*>(c.workspace);
    int* keys = ints + w.keys;
    int* positions = ints + w.positions;
    int* sorted_keys = ints + w.sorted_keys;
    int* sorted_positions = ints + w.sorted_positions;
    int* starts = ints + w.starts;
    const uintptr_t raw = reinterpret_cast<uintptr_t>(c.workspace) + w.cub_offset;
    void* scratch = reinterpret_cast<void*>((raw + kCubAlign - 1) / kCubAlign * kCubAlign);
    GatherKeysKernel<<<Blocks(l, g.count), kBlockThreads, 0, l.stream>>>(c.in[1], g.count, g.len, keys, positions);
    Launched(c, cudaGetLastError(), "GatherKeysKernel");
    size_t bytes = SortScratchBytes(g);
    Launched(c,
             cub::DeviceRadixSort::SortPairs(scratch, bytes, keys, sorted_keys, positions, sorted_positions,
                                             static_cast<int>(g.count), 0, KeyBits(g.len), l.stream),
             "Gather cub::DeviceRadixSort::SortPairs");
    GatherStartsKernel<<<Blocks(l, g.len + 1), kBlockThreads, 0, l.stream>>>(sorted_keys, g.count, g.len, starts);
    Launched(c, cudaGetLastError(), "GatherStartsKernel");
    GatherBackwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(c.dout[0], starts, sorted_positions,
                                                                         c.din[0], n, g.len, g.inner, g.count);
    Launched(c, cudaGetLastError(), "GatherBackwardKernel");
  }

 private:
  struct Geometry {
    int64_t outer = 1, len = 1, inner = 1, count = 0;
  };
  // As the CPU kernel (InferShapes checked the axis).
  Geometry Geom(const Dims& d, const Dims& indices) const {
    Geometry g;
    const int64_t ax = axis_ < 0 ? axis_ + static_cast<int64_t>(d.size()) : axis_;
    for (int64_t k = 0; k < ax; ++k) g.outer *= d[k];
    for (size_t k = ax + 1; k < d.size(); ++k) g.inner *= d[k];
    g.len = d[ax];
    g.count = NumElements(indices);
    return g;
  }
  struct WorkspaceLayout {
    size_t keys, positions, sorted_keys, sorted_positions, starts;  // in ints
    size_t cub_offset;                                              // in bytes
  };
  static WorkspaceLayout Layout(const Geometry& g) {
    WorkspaceLayout w;
    const size_t n = static_cast<size_t>(g.count);
    w.keys = 1;
    w.positions = w.keys + n;
    w.sorted_keys = w.positions + n;
    w.sorted_positions = w.sorted_keys + n;
    w.starts = w.sorted_positions + n;
    w.cub_offset = (w.starts + static_cast<size_t>(g.len) + 1) * sizeof(int);
    return w;
  }
  // Keys are in [0, len): sort only the bits that can be set.
  static int KeyBits(int64_t len) {
    int bits = 1;
    while (bits < 31 && (int64_t{1} << bits) < len) ++bits;
    return bits;
  }
  // CUB's scratch for sorting `count` pairs (a host-side query; nothing runs).
  static size_t SortScratchBytes(const Geometry& g) {
    if (g.count == 0) return 0;
    size_t bytes = 0;
    if (cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                        static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                        static_cast<int>(g.count), 0, KeyBits(g.len)) != cudaSuccess)
      return 0;  // the sort itself then fails and names the error
    return bytes;
  }

  int64_t axis_;
  std::string label_;
};

// ---- Pad

class CudaPad final : public CudaOpKernel {
 public:
  CudaPad(std::unique_ptr<OpKernel> cpu, std::vector<int64_t> pads, float value, std::string label)
      : CudaOpKernel(std::move(cpu)), pads_(std::move(pads)), value_(value), label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_RETURN_IF_ERROR(CudaOpKernel::InferShapes(in, out));
    return CheckRanks({in[0]}, label_);
  }

  // The output is filled with the value, then the input written over its interior.
  Status Forward(const KernelCall& c) override {
    LaunchConfig l;
    if (!Begin(c, &l)) return Status::OK();
    const int64_t ny = NumElements(*c.out_dims[0]);
    if (ny == 0) return Status::OK();
    c.be->Fill(c.out[0], static_cast<size_t>(ny), value_);
    const int64_t n = NumElements(*c.in_dims[0]);
    if (n == 0) return Status::OK();
    int64_t base;
    const auto map = InputToOutput(*c.in_dims[0], *c.out_dims[0], &base);
    ScatterKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(map, base, c.in[0], c.out[0], n);
    Launched(c, cudaGetLastError(), "Pad ScatterKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    LaunchConfig l;
    if (!c.din[0] || !c.dout[0] || !Begin(c, &l)) return;
    const int64_t n = NumElements(*c.in_dims[0]);
    if (n == 0) return;
    int64_t base;
    const auto map = InputToOutput(*c.in_dims[0], *c.out_dims[0], &base);
    GatherAddKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(map, base, c.dout[0], c.din[0], n);
    Launched(c, cudaGetLastError(), "Pad GatherAddKernel");
  }

 private:
  // Input element i sits at output offset *base + map(i) (pads are [begins..., ends...]).
  StridedDims<1> InputToOutput(const Dims& x, const Dims& y, int64_t* base) const {
    const std::vector<int64_t> ys = DenseStrides(y);
    *base = 0;
    for (size_t k = 0; k < x.size(); ++k) *base += pads_[k] * ys[k];
    return MakeStrided<1>(x, {ys});
  }

  std::vector<int64_t> pads_;
  float value_;
  std::string label_;
};

}  // namespace

CudaKernelResult MakeCudaTranspose(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaTranspose(std::move(cpu), ctx.node->Ints("perm", {}), ctx.node->Label()));
}

CudaKernelResult MakeCudaConcat(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaConcat(std::move(cpu), ctx.node->Int("axis", 0)));
}

CudaKernelResult MakeCudaGather(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaGather(std::move(cpu), ctx.node->Int("axis", 0), ctx.node->Label()));
}

// The CPU factory accepted the node, so the mode is "constant", the pads are there and not
// negative, and constant_value (if given) is a constant scalar.
CudaKernelResult MakeCudaPad(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  const Node& n = *ctx.node;
  std::vector<int64_t> pads = n.Ints("pads", {});  // opset < 11: an attribute
  if (!n.Has("pads")) {
    const Tensor* t = n.inputs.size() > 1 && !n.inputs[1].empty() ? ctx.constant(n.inputs[1]) : nullptr;
    if (!t || t->dtype != DType::kInt64)
      return Status::InvalidArgument(n.Label() + ": its pads must be a constant int64 tensor");
    pads = t->i;
  }
  float value = n.Float("value", 0.0f);
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Tensor* t = ctx.constant(n.inputs[2]);
    if (!t || t->numel() != 1)
      return Status::InvalidArgument(n.Label() + ": constant_value must be a constant scalar");
    value = t->dtype == DType::kFloat32 ? t->f[0] : static_cast<float>(t->i[0]);
  }
  return std::unique_ptr<OpKernel>(new CudaPad(std::move(cpu), std::move(pads), value, n.Label()));
}

}  // namespace fedmesh::graph::cuda_ops
