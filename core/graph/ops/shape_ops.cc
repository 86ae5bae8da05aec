// Ops that move elements without arithmetic: Flatten, Reshape, Squeeze, Unsqueeze (new dims
// over the same floats: the CPU executor lets them share their input's buffer, IsView), Transpose,
// Concat and Gather (embedding lookup). Shape arguments
// (Reshape's shape, Unsqueeze's axes from opset 13) must be constants: they are read once
// at load, and the batch dimension stays free.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/graph/ops/ops.h"

namespace fedmesh::graph::ops {
namespace {

// The constant int64 tensor at input `i` of the node, or an error saying it must be one.
Result<std::vector<int64_t>> ConstInts(const KernelContext& ctx, size_t i, const char* what) {
  const Node& n = *ctx.node;
  if (n.inputs.size() <= i || n.inputs[i].empty())
    return Status::InvalidArgument(n.Label() + " has no " + what + " input");
  const Tensor* t = ctx.constant(n.inputs[i]);
  if (!t || t->dtype != DType::kInt64)
    return Status::InvalidArgument(n.Label() + ": its " + what +
                                   " must be a constant int64 tensor (an initializer or a "
                                   "Constant node), not a value computed at run time");
  return t->i;
}

Result<int64_t> NormAxis(int64_t axis, int64_t rank, const std::string& label) {
  if (axis < -rank || axis >= rank)
    return Status::InvalidArgument(label + ": axis " + std::to_string(axis) +
                                   " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

// Same elements, new dims: Flatten, Reshape, Squeeze, Unsqueeze.
class Relabel final : public OpKernel {
 public:
  enum class Kind { kFlatten, kReshape, kSqueeze, kUnsqueeze };
  Relabel(Kind kind, std::vector<int64_t> arg, bool allowzero, std::string label)
      : kind_(kind), arg_(std::move(arg)), allowzero_(allowzero), label_(std::move(label)) {}

  bool IsIndexInput(size_t i) const override { return i > 0; }

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const Dims& x = in[0];
    const int64_t r = static_cast<int64_t>(x.size());
    Dims y;
    switch (kind_) {
      case Kind::kFlatten: {
        auto ax = NormAxis(arg_[0], r + 1, label_);
        if (!ax.ok()) return ax.status();
        int64_t a = 1, b = 1;
        for (int64_t k = 0; k < r; ++k) (k < *ax ? a : b) *= x[k];
        y = {a, b};
        break;
      }
      case Kind::kReshape: {
        int64_t known = 1, infer = -1;
        for (size_t k = 0; k < arg_.size(); ++k) {
          int64_t d = arg_[k];
          if (d == 0 && !allowzero_) {
            if (k >= x.size())
              return Status::InvalidArgument(label_ + ": shape copies dim " + std::to_string(k) +
                                             " of " + DimsToString(x));
            d = x[k];
          }
          if (d == -1) {
            if (infer >= 0) return Status::InvalidArgument(label_ + ": two -1 dims in its shape");
            infer = static_cast<int64_t>(k);
          } else if (d < 0) {
            return Status::InvalidArgument(label_ + ": negative dim in its shape");
          } else {
            if (d > 0 && known > INT64_MAX / d)
              return Status::InvalidArgument(label_ + ": shape " + DimsToString(arg_) +
                                             " has too many elements");
            known *= d;
          }
          y.push_back(d);
        }
        const int64_t n = NumElements(x);
        if (infer >= 0) {
          if (known == 0 || n % known != 0)
            return Status::InvalidArgument(label_ + ": cannot reshape " + DimsToString(x) +
                                           " to " + DimsToString(arg_));
          y[infer] = n / known;
        }
        if (NumElements(y) != n)
          return Status::InvalidArgument(label_ + ": cannot reshape " + DimsToString(x) + " (" +
                                         std::to_string(n) + " elements) to " +
                                         DimsToString(y));
        break;
      }
      case Kind::kSqueeze: {
        std::vector<bool> drop(r, false);
        if (arg_.empty()) {
          for (int64_t k = 0; k < r; ++k) drop[k] = x[k] == 1;
        } else {
          for (int64_t a : arg_) {
            auto ax = NormAxis(a, r, label_);
            if (!ax.ok()) return ax.status();
            if (x[*ax] != 1)
              return Status::InvalidArgument(label_ + ": dim " + std::to_string(*ax) + " of " +
                                             DimsToString(x) + " is not 1");
            drop[*ax] = true;
          }
        }
        for (int64_t k = 0; k < r; ++k)
          if (!drop[k]) y.push_back(x[k]);
        break;
      }
      case Kind::kUnsqueeze: {
        const int64_t ry = r + static_cast<int64_t>(arg_.size());
        std::vector<bool> ins(ry, false);
        for (int64_t a : arg_) {
          auto ax = NormAxis(a, ry, label_);
          if (!ax.ok()) return ax.status();
          if (ins[*ax])
            return Status::InvalidArgument(label_ + ": axis " + std::to_string(a) +
                                           " is repeated");
          ins[*ax] = true;
        }
        size_t src = 0;
        for (int64_t k = 0; k < ry; ++k) y.push_back(ins[k] ? 1 : x[src++]);
        break;
      }
    }
    *out = {y};
    return Status::OK();
  }

  bool IsView() const override { return true; }
  Status Forward(const KernelCall& c) override {
    if (c.out[0] != c.in[0])
      std::memcpy(c.out[0], c.in[0], NumElements(*c.in_dims[0]) * sizeof(float));
    return Status::OK();
  }
  void Backward(const KernelCall& c) override {
    if (!c.din[0]) return;
    const int64_t n = NumElements(*c.in_dims[0]);
    for (int64_t i = 0; i < n; ++i) c.din[0][i] += c.dout[0][i];
  }

 private:
  Kind kind_;
  std::vector<int64_t> arg_;
  bool allowzero_;
  std::string label_;
};

class Transpose final : public OpKernel {
 public:
  Transpose(std::vector<int64_t> perm, std::string label)
      : perm_(std::move(perm)), label_(std::move(label)) {}

  std::vector<int64_t> Perm(size_t r) const {
    if (!perm_.empty()) return perm_;
    std::vector<int64_t> p(r);
    for (size_t k = 0; k < r; ++k) p[k] = static_cast<int64_t>(r - 1 - k);
    return p;
  }

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const auto p = Perm(in[0].size());
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (size_t k = 0; k < sorted.size(); ++k)
      if (sorted[k] != static_cast<int64_t>(k) || p.size() != in[0].size())
        return Status::InvalidArgument(label_ + ": perm is not a permutation of the " +
                                       std::to_string(in[0].size()) + " dims");
    Dims y(p.size());
    for (size_t k = 0; k < p.size(); ++k) y[k] = in[0][p[k]];
    *out = {y};
    return Status::OK();
  }

  // For each output element (row-major), the input index: walk with input strides.
  template <typename F>
  void Walk(const Dims& x, F&& f) const {
    const auto p = Perm(x.size());
    const size_t r = x.size();
    std::vector<int64_t> xs(r, 1), ydims(r), ystride(r);
    for (size_t k = r; k-- > 1;) xs[k - 1] = xs[k] * x[k];
    for (size_t k = 0; k < r; ++k) {
      ydims[k] = x[p[k]];
      ystride[k] = xs[p[k]];
    }
    const int64_t n = NumElements(x);
    std::vector<int64_t> idx(r, 0);
    int64_t src = 0;
    for (int64_t o = 0; o < n; ++o) {
      f(o, src);
      for (size_t k = r; k-- > 0;) {
        if (++idx[k] < ydims[k]) {
          src += ystride[k];
          break;
        }
        src -= ystride[k] * (ydims[k] - 1);
        idx[k] = 0;
      }
    }
  }

  // Moving only axes of size 1 leaves the values in order: the output can be the input's
  // buffer (NHWC -> NCHW of one-channel images, OHWI -> OIHW of one-channel kernels).
  bool IsViewFor(const std::vector<Dims>& in) const override {
    if (in.empty()) return false;
    const auto p = Perm(in[0].size());
    int64_t last = -1;
    for (int64_t axis : p) {
      if (in[0][axis] == 1) continue;
      if (axis < last) return false;
      last = axis;
    }
    return true;
  }

  Status Forward(const KernelCall& c) override {
    const float* x = c.in[0];
    float* y = c.out[0];
    if (y == x) return Status::OK();  // a view (IsViewFor)
    if (Blocks b; AsBlockSwap(*c.in_dims[0], &b)) {
      SwapBlocks(b, x, y, /*accumulate=*/false);
      return Status::OK();
    }
    Walk(*c.in_dims[0], [&](int64_t o, int64_t s) { y[o] = x[s]; });
    return Status::OK();
  }
  void Backward(const KernelCall& c) override {
    if (!c.din[0]) return;
    const float* dy = c.dout[0];
    float* dx = c.din[0];
    if (Blocks b; AsBlockSwap(*c.in_dims[0], &b)) {
      std::swap(b.rows, b.cols);  // the output's [cols, rows] blocks back to [rows, cols]
      SwapBlocks(b, dy, dx, /*accumulate=*/true);
      return;
    }
    Walk(*c.in_dims[0], [&](int64_t o, int64_t s) { dx[s] += dy[o]; });
  }

 private:
  // A perm that keeps a prefix and a suffix of axes and swaps the two runs of axes between
  // them ([0, 3, 1, 2], [0, 2, 3, 1], [0, 2, 1, 3]): `outer` matrices of [rows, cols]
  // elements of `inner` floats each, transposed to [cols, rows].
  struct Blocks {
    int64_t outer = 1, rows = 1, cols = 1, inner = 1;
  };
  bool AsBlockSwap(const Dims& x, Blocks* b) const {
    const auto p = Perm(x.size());
    const int64_t r = static_cast<int64_t>(p.size());
    int64_t a = 0;
    while (a < r && p[a] == a) ++a;
    if (a == r) return false;  // the identity: the walk copies
    const int64_t mid = p[a];  // the second run starts at axis mid and comes first
    int64_t k = a, c = mid;
    while (k < r && p[k] == c) ++k, ++c;
    const int64_t end = c;  // the second run is [mid, end)
    for (int64_t t = a; t < mid; ++t, ++k)
      if (k >= r || p[k] != t) return false;
    for (; k < r; ++k)
      if (p[k] != k || k < end) return false;
    for (int64_t t = 0; t < a; ++t) b->outer *= x[t];
    for (int64_t t = a; t < mid; ++t) b->rows *= x[t];
    for (int64_t t = mid; t < end; ++t) b->cols *= x[t];
    for (int64_t t = end; t < r; ++t) b->inner *= x[t];
    return true;
  }
  // dst[o][j][i] (+)= src[o][i][j] for i < rows, j < cols, elements of `inner` floats; in
  // tiles so both sides stay in cache.
  static void SwapBlocks(const Blocks& b, const float* src, float* dst, bool accumulate) {
    constexpr int64_t kTile = 16;
    const int64_t m = b.rows * b.cols * b.inner;
    for (int64_t o = 0; o < b.outer; ++o) {
      const float* s = src + o * m;
      float* d = dst + o * m;
      for (int64_t i0 = 0; i0 < b.rows; i0 += kTile)
        for (int64_t j0 = 0; j0 < b.cols; j0 += kTile) {
          const int64_t i1 = std::min(b.rows, i0 + kTile), j1 = std::min(b.cols, j0 + kTile);
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = j0; j < j1; ++j) {
              const float* from = s + (i * b.cols + j) * b.inner;
              float* to = d + (j * b.rows + i) * b.inner;
              if (accumulate) {
                for (int64_t e = 0; e < b.inner; ++e) to[e] += from[e];
              } else {
                for (int64_t e = 0; e < b.inner; ++e) to[e] = from[e];
              }
            }
        }
    }
  }

  std::vector<int64_t> perm_;
  std::string label_;
};

class Concat final : public OpKernel {
 public:
  Concat(int64_t axis, std::string label) : axis_(axis), label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const int64_t r = static_cast<int64_t>(in[0].size());
    auto ax = NormAxis(axis_, r, label_);
    if (!ax.ok()) return ax.status();
    Dims y = in[0];
    for (size_t t = 1; t < in.size(); ++t) {
      bool ok = static_cast<int64_t>(in[t].size()) == r;
      for (int64_t k = 0; ok && k < r; ++k) ok = k == *ax || in[t][k] == y[k];
      if (!ok)
        return Status::InvalidArgument(label_ + ": input " + std::to_string(t) + " " +
                                       DimsToString(in[t]) + " does not match " +
                                       DimsToString(in[0]) + " outside axis " +
                                       std::to_string(*ax));
      y[*ax] += in[t][*ax];
    }
    *out = {y};
    return Status::OK();
  }

  // outer x (sum of inputs' axis extents x inner)
  template <typename F>
  void Blocks(const KernelCall& c, F&& f) const {
    const Dims& y = *c.out_dims[0];
    const int64_t ax = axis_ < 0 ? axis_ + static_cast<int64_t>(y.size()) : axis_;
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < ax; ++k) outer *= y[k];
    for (size_t k = ax + 1; k < y.size(); ++k) inner *= y[k];
    const int64_t row = y[ax] * inner;
    int64_t off = 0;
    for (size_t t = 0; t < c.in.size(); ++t) {
      const int64_t len = (*c.in_dims[t])[ax] * inner;
      for (int64_t o = 0; o < outer; ++o) f(t, o * len, o * row + off, len);
      off += len;
    }
  }

  Status Forward(const KernelCall& c) override {
    Blocks(c, [&](size_t t, int64_t src, int64_t dst, int64_t len) {
      std::memcpy(c.out[0] + dst, c.in[t] + src, len * sizeof(float));
    });
    return Status::OK();
  }
  void Backward(const KernelCall& c) override {
    Blocks(c, [&](size_t t, int64_t src, int64_t dst, int64_t len) {
      if (!c.din[t]) return;
      for (int64_t i = 0; i < len; ++i) c.din[t][src + i] += c.dout[0][dst + i];
    });
  }

 private:
  int64_t axis_;
  std::string label_;
};

// out = data taken along `axis` at `indices` (indices as exact float integers; negative
// ones count from the end). An index out of range fails the forward pass.
class Gather final : public OpKernel {
 public:
  Gather(int64_t axis, std::string label) : axis_(axis), label_(std::move(label)) {}

  bool IsIndexInput(size_t i) const override { return i == 1; }

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const int64_t r = static_cast<int64_t>(in[0].size());
    auto ax = NormAxis(axis_, r, label_);
    if (!ax.ok()) return ax.status();
    Dims y(in[0].begin(), in[0].begin() + *ax);
    y.insert(y.end(), in[1].begin(), in[1].end());
    y.insert(y.end(), in[0].begin() + *ax + 1, in[0].end());
    *out = {y};
    return Status::OK();
  }

  void Geometry(const KernelCall& c, int64_t* outer, int64_t* len, int64_t* inner,
                int64_t* count) const {
    const Dims& d = *c.in_dims[0];
    const int64_t ax = axis_ < 0 ? axis_ + static_cast<int64_t>(d.size()) : axis_;
    *outer = *inner = 1;
    for (int64_t k = 0; k < ax; ++k) *outer *= d[k];
    for (size_t k = ax + 1; k < d.size(); ++k) *inner *= d[k];
    *len = d[ax];
    *count = NumElements(*c.in_dims[1]);
  }

  Status Forward(const KernelCall& c) override {
    int64_t outer, len, inner, count;
    Geometry(c, &outer, &len, &inner, &count);
    const float* idx = c.in[1];
    for (int64_t j = 0; j < count; ++j) {
      const float v = idx[j];
      // In range as a float first: converting NaN or a value beyond int64 is undefined.
      const bool in_range = v >= static_cast<float>(-len) && v < static_cast<float>(len);
      const int64_t k = in_range ? static_cast<int64_t>(v) : len;
      if (static_cast<float>(k) != v || k < -len || k >= len)
        return Status::OutOfRange(label_ + ": index " + std::to_string(v) + " at position " +
                                  std::to_string(j) + " is not an integer in [" +
                                  std::to_string(-len) + ", " + std::to_string(len) + ")");
    }
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < count; ++j) {
        int64_t k = static_cast<int64_t>(idx[j]);
        if (k < 0) k += len;
        std::memcpy(c.out[0] + (o * count + j) * inner, c.in[0] + (o * len + k) * inner,
                    inner * sizeof(float));
      }
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    if (!c.din[0]) return;
    int64_t outer, len, inner, count;
    Geometry(c, &outer, &len, &inner, &count);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < count; ++j) {
        int64_t k = static_cast<int64_t>(c.in[1][j]);
        if (k < 0) k += len;
        float* dst = c.din[0] + (o * len + k) * inner;
        const float* src = c.dout[0] + (o * count + j) * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
      }
  }

 private:
  int64_t axis_;
  std::string label_;
};

// Constant-mode padding (what torch writes before AveragePool); pads are
// [begin_0, ..., begin_r-1, end_0, ..., end_r-1] and may not be negative.
class Pad final : public OpKernel {
 public:
  Pad(std::vector<int64_t> pads, float value, std::string label)
      : pads_(std::move(pads)), value_(value), label_(std::move(label)) {}

  bool IsIndexInput(size_t i) const override { return i > 0; }

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const size_t r = in[0].size();
    if (pads_.size() != 2 * r)
      return Status::InvalidArgument(label_ + ": " + std::to_string(pads_.size()) +
                                     " pads for rank " + std::to_string(r));
    Dims y = in[0];
    for (size_t k = 0; k < r; ++k)
      if (__builtin_add_overflow(y[k], pads_[k], &y[k]) ||
          __builtin_add_overflow(y[k], pads_[k + r], &y[k]))
        return Status::InvalidArgument(label_ + ": pads " + DimsToString(pads_) + " on " +
                                       DimsToString(in[0]) + " overflow");
    *out = {y};
    return Status::OK();
  }

  // Calls f(out_index, in_index) for every input element.
  template <typename F>
  void Walk(const Dims& x, const Dims& y, F&& f) const {
    const size_t r = x.size();
    std::vector<int64_t> ys(r, 1);
    for (size_t k = r; k-- > 1;) ys[k - 1] = ys[k] * y[k];
    const int64_t n = NumElements(x);
    std::vector<int64_t> idx(r, 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t o = 0;
      for (size_t k = 0; k < r; ++k) o += (idx[k] + pads_[k]) * ys[k];
      f(o, i);
      for (size_t k = r; k-- > 0;) {
        if (++idx[k] < x[k]) break;
        idx[k] = 0;
      }
    }
  }

  Status Forward(const KernelCall& c) override {
    std::fill(c.out[0], c.out[0] + NumElements(*c.out_dims[0]), value_);
    Walk(*c.in_dims[0], *c.out_dims[0], [&](int64_t o, int64_t i) { c.out[0][o] = c.in[0][i]; });
    return Status::OK();
  }
  void Backward(const KernelCall& c) override {
    if (!c.din[0]) return;
    Walk(*c.in_dims[0], *c.out_dims[0], [&](int64_t o, int64_t i) { c.din[0][i] += c.dout[0][o]; });
  }

 private:
  std::vector<int64_t> pads_;
  float value_;
  std::string label_;
};

// Input 0 of every op here is its data.
Status CheckData(const Node& n) {
  if (n.inputs.empty() || n.inputs[0].empty())
    return Status::InvalidArgument(n.Label() + " has no data input");
  return Status::OK();
}

KernelResult MakeRelabel(Relabel::Kind kind, std::vector<int64_t> arg, const KernelContext& ctx,
                         bool allowzero = false) {
  FM_RETURN_IF_ERROR(CheckData(*ctx.node));
  return std::unique_ptr<OpKernel>(new Relabel(kind, std::move(arg), allowzero, ctx.node->Label()));
}

// Squeeze/Unsqueeze axes: an attribute below opset 13, an optional input from 13 on.
Result<std::vector<int64_t>> Axes(const KernelContext& ctx) {
  if (ctx.node->Has("axes")) return ctx.node->Ints("axes", {});
  if (ctx.node->inputs.size() > 1 && !ctx.node->inputs[1].empty())
    return ConstInts(ctx, 1, "axes");
  return std::vector<int64_t>{};
}

}  // namespace

KernelResult MakeFlatten(const KernelContext& ctx) {
  return MakeRelabel(Relabel::Kind::kFlatten, {ctx.node->Int("axis", 1)}, ctx);
}
KernelResult MakeReshape(const KernelContext& ctx) {
  FM_ASSIGN_OR_RETURN(auto shape, ConstInts(ctx, 1, "shape"));
  return MakeRelabel(Relabel::Kind::kReshape, shape, ctx, ctx.node->Int("allowzero", 0) != 0);
}
KernelResult MakeSqueeze(const KernelContext& ctx) {
  FM_ASSIGN_OR_RETURN(auto axes, Axes(ctx));
  return MakeRelabel(Relabel::Kind::kSqueeze, axes, ctx);
}
KernelResult MakeUnsqueeze(const KernelContext& ctx) {
  FM_ASSIGN_OR_RETURN(auto axes, Axes(ctx));
  if (axes.empty()) return Status::InvalidArgument(ctx.node->Label() + " has no axes");
  return MakeRelabel(Relabel::Kind::kUnsqueeze, axes, ctx);
}
KernelResult MakeTranspose(const KernelContext& ctx) {
  FM_RETURN_IF_ERROR(CheckData(*ctx.node));
  return std::unique_ptr<OpKernel>(new Transpose(ctx.node->Ints("perm", {}), ctx.node->Label()));
}
KernelResult MakeConcat(const KernelContext& ctx) {
  if (!ctx.node->Has("axis")) return Status::InvalidArgument(ctx.node->Label() + " has no axis");
  const auto& ins = ctx.node->inputs;
  if (ins.empty() || std::any_of(ins.begin(), ins.end(), [](const auto& s) { return s.empty(); }))
    return Status::InvalidArgument(ctx.node->Label() + " needs one or more inputs, all named");
  return std::unique_ptr<OpKernel>(new Concat(ctx.node->Int("axis", 0), ctx.node->Label()));
}
KernelResult MakePad(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  FM_RETURN_IF_ERROR(CheckData(n));
  const std::string mode = n.String("mode", "constant");
  if (mode != "constant")
    return Status::InvalidArgument(n.Label() + ": pad mode '" + mode +
                                   "' is not supported (constant only)");
  std::vector<int64_t> pads = n.Ints("pads", {});  // opset < 11: an attribute
  if (!n.Has("pads")) {
    FM_ASSIGN_OR_RETURN(pads, ConstInts(ctx, 1, "pads"));
  }
  for (int64_t p : pads)
    if (p < 0) return Status::InvalidArgument(n.Label() + ": negative pads are not supported");
  float value = n.Float("value", 0.0f);
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Tensor* t = ctx.constant(n.inputs[2]);
    if (!t || t->numel() != 1)
      return Status::InvalidArgument(n.Label() + ": constant_value must be a constant scalar");
    value = t->dtype == DType::kFloat32 ? t->f[0] : static_cast<float>(t->i[0]);
  }
  if (n.inputs.size() > 3 && !n.inputs[3].empty())
    return Status::InvalidArgument(n.Label() + ": the axes input of Pad is not supported");
  return std::unique_ptr<OpKernel>(new Pad(std::move(pads), value, n.Label()));
}

KernelResult MakeGather(const KernelContext& ctx) {
  if (ctx.node->inputs.size() != 2 || ctx.node->inputs[0].empty() || ctx.node->inputs[1].empty())
    return Status::InvalidArgument(ctx.node->Label() + " needs inputs data and indices");
  return std::unique_ptr<OpKernel>(new Gather(ctx.node->Int("axis", 0), ctx.node->Label()));
}

}  // namespace fedmesh::graph::ops
