// Window geometry of Conv and of the pooling ops (ONNX, NCHW; 2-D, and 1-D on [N,C,L] as
// 2-D with H = 1): the attributes as the factories read them and the extents they resolve
// to for given input dims. Shared by the CPU kernels (conv.cc, pool.cc) and the CUDA ones
// (core/cuda/graph/), so both compute the same windows and fail with the same errors.
// Thread-safety: plain values and pure functions.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/status.h"

namespace fedmesh::graph::ops {

// ---- Conv ---------------------------------------------------------------------------------

// One spatial axis of the convolution window.
struct ConvAxis {
  int64_t in = 1, k = 1, stride = 1, dil = 1, pad0 = 0, pad1 = 0, out = 1;
};

// Resolves auto_pad and the output extent; fails when the window does not fit.
inline Status ResolveConvAxis(const std::string& label, const std::string& auto_pad, ConvAxis* a) {
  const int64_t ek = (a->k - 1) * a->dil + 1;
  if (auto_pad == "VALID") {
    a->pad0 = a->pad1 = 0;
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const int64_t out = (a->in + a->stride - 1) / a->stride;
    const int64_t total = std::max<int64_t>(0, (out - 1) * a->stride + ek - a->in);
    a->pad0 = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    a->pad1 = total - a->pad0;
  }
  const int64_t span = a->in + a->pad0 + a->pad1 - ek;
  if (span < 0)
    return Status::InvalidArgument(label + ": the dilated kernel (extent " + std::to_string(ek) +
                                   ") is larger than the padded input (extent " +
                                   std::to_string(a->in + a->pad0 + a->pad1) + ")");
  a->out = span / a->stride + 1;
  return Status::OK();
}

// The geometry of one convolution, resolved from the input dims.
struct ConvGeometry {
  int64_t n = 0, c = 0, m = 0, group = 1;
  ConvAxis h, w;
  int64_t cg() const { return c / group; }
  int64_t mg() const { return m / group; }
  int64_t kdim() const { return cg() * h.k * w.k; }  // GEMM inner dimension
  int64_t pix() const { return h.out * w.out; }      // output pixels per image
  int64_t in_pix() const { return h.in * w.in; }
};

// Conv's attributes as MakeConv reads them (MakeConv validates them); empty vectors are
// the defaults.
struct ConvAttrs {
  std::vector<int64_t> kernel_shape, strides, pads, dilations;
  int64_t group = 1;
  std::string auto_pad = "NOTSET";
  bool has_bias = false;
};

inline ConvAttrs ReadConvAttrs(const Node& n) {
  ConvAttrs a;
  a.auto_pad = n.String("auto_pad", "NOTSET");
  if (a.auto_pad.empty()) a.auto_pad = "NOTSET";
  a.group = n.Int("group", 1);
  a.kernel_shape = n.Ints("kernel_shape", {});
  a.strides = n.Ints("strides", {});
  a.dilations = n.Ints("dilations", {});
  // Explicit pads are ignored under auto_pad, as ONNX Runtime does.
  if (a.auto_pad == "NOTSET") a.pads = n.Ints("pads", {});
  a.has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  return a;
}

// The geometry of X = in[0], W = in[1] (and B = in[2] when a.has_bias); fails naming the
// node and the shapes.
inline Result<ConvGeometry> ResolveConv(const std::string& label, const ConvAttrs& a,
                                        const std::vector<Dims>& in) {
  if (in.size() < 2) return Status::InvalidArgument(label + " needs inputs X and W");
  const Dims& x = in[0];
  const Dims& w = in[1];
  if ((x.size() != 3 && x.size() != 4) || w.size() != x.size())
    return Status::InvalidArgument(
        label +
        " supports 1-D and 2-D convolution: X must be [N,C,L] or [N,C,H,W] and W of "
        "the same rank, got X " +
        DimsToString(x) + " and W " + DimsToString(w));
  const size_t sp = x.size() - 2;
  auto check_len = [&](const std::vector<int64_t>& v, size_t want, const char* what) {
    if (v.empty() || v.size() == want) return Status::OK();
    return Status::InvalidArgument(label + ": " + what + " " + IntsToString(v) + " has " +
                                   std::to_string(v.size()) + " values; X " + DimsToString(x) +
                                   " needs " + std::to_string(want));
  };
  FM_RETURN_IF_ERROR(check_len(a.kernel_shape, sp, "kernel_shape"));
  FM_RETURN_IF_ERROR(check_len(a.strides, sp, "strides"));
  FM_RETURN_IF_ERROR(check_len(a.dilations, sp, "dilations"));
  FM_RETURN_IF_ERROR(check_len(a.pads, 2 * sp, "pads"));
  ConvGeometry g;
  g.n = x[0];
  g.c = x[1];
  g.m = w[0];
  g.group = a.group;
  if (g.c < 1 || g.m < 1)
    return Status::InvalidArgument(label + ": X " + DimsToString(x) + " and W " +
                                   DimsToString(w) + " need at least one channel");
  if (g.c % a.group != 0 || g.m % a.group != 0 || w[1] * a.group != g.c)
    return Status::InvalidArgument(label + ": with group " + std::to_string(a.group) + ", X " +
                                   DimsToString(x) + " and W " + DimsToString(w) +
                                   " disagree (need C = W[1]*group and M divisible by group)");
  if (!a.kernel_shape.empty() &&
      !std::equal(a.kernel_shape.begin(), a.kernel_shape.end(), w.begin() + 2))
    return Status::InvalidArgument(label + ": kernel_shape " + IntsToString(a.kernel_shape) +
                                   " does not match W " + DimsToString(w));
  if (a.has_bias && (in.size() < 3 || in[2] != Dims{g.m}))
    return Status::InvalidArgument(label + ": bias B must be [" + std::to_string(g.m) +
                                   "], got " + (in.size() < 3 ? "none" : DimsToString(in[2])) +
                                   " for W " + DimsToString(w));
  // Attributes of the last sp axes; a 1-D convolution is 2-D with a unit H axis.
  ConvAxis* axes[2] = {&g.h, &g.w};
  const size_t first = 2 - sp;
  for (size_t i = 0; i < sp; ++i) {
    ConvAxis& ax = *axes[first + i];
    ax.in = x[2 + i];
    ax.k = w[2 + i];
    ax.stride = a.strides.empty() ? 1 : a.strides[i];
    ax.dil = a.dilations.empty() ? 1 : a.dilations[i];
    ax.pad0 = a.pads.empty() ? 0 : a.pads[i];
    ax.pad1 = a.pads.empty() ? 0 : a.pads[i + sp];
    if (ax.k < 1)
      return Status::InvalidArgument(label + ": W " + DimsToString(w) + " has an empty kernel");
    Status s = ResolveConvAxis(label, a.auto_pad, &ax);
    if (!s.ok())
      return Status::InvalidArgument(s.message() + " for X " + DimsToString(x) + " and W " +
                                     DimsToString(w));
  }
  // The GEMM takes int dimensions (each factor first, so that no product overflows).
  if (g.h.out > INT_MAX || g.w.out > INT_MAX || g.pix() > INT_MAX || g.kdim() > INT_MAX ||
      g.kdim() * g.pix() > INT_MAX || g.m * g.kdim() > INT_MAX || g.c * g.in_pix() > INT_MAX ||
      g.m * g.pix() > INT_MAX)
    return Status::InvalidArgument(label + ": X " + DimsToString(x) + " with W " +
                                   DimsToString(w) + " is too large for one image's GEMM");
  return g;
}

// ---- Pooling ------------------------------------------------------------------------------

// One spatial axis of the pooling window.
struct PoolAxis {
  int64_t in = 1, k = 1, stride = 1, pad0 = 0, pad1 = 0, out = 1;
  // The window of output o: [begin, end) clipped to the input; `padded` counts the cells
  // inside the padded input (count_include_pad's divisor).
  void Window(int64_t o, int64_t* begin, int64_t* end, int64_t* padded) const {
    const int64_t b = o * stride - pad0;
    const int64_t e = std::min(b + k, in + pad1);
    *padded = e - b;
    *begin = std::max<int64_t>(b, 0);
    *end = std::min(e, in);
  }
};

struct PoolGeometry {
  int64_t n = 0, c = 0;
  PoolAxis h, w;
  int64_t planes() const { return n * c; }
  int64_t in_pix() const { return h.in * w.in; }
  int64_t out_pix() const { return h.out * w.out; }
};

struct PoolAttrs {
  std::vector<int64_t> kernel_shape, strides, pads;  // strides, pads empty: the defaults
  bool ceil_mode = false;
  std::string auto_pad = "NOTSET";
};

// The window attributes of a MaxPool or AveragePool node, validated.
inline Result<PoolAttrs> ParsePoolAttrs(const Node& n) {
  const std::string label = n.Label();
  PoolAttrs a;
  a.kernel_shape = n.Ints("kernel_shape", {});
  a.strides = n.Ints("strides", {});
  a.ceil_mode = n.Int("ceil_mode", 0) != 0;
  a.auto_pad = n.String("auto_pad", "NOTSET");
  if (a.auto_pad.empty()) a.auto_pad = "NOTSET";
  if (a.auto_pad != "NOTSET" && a.auto_pad != "VALID" && a.auto_pad != "SAME_UPPER" &&
      a.auto_pad != "SAME_LOWER")
    return Status::InvalidArgument(label + ": unknown auto_pad '" + a.auto_pad +
                                   "' (expected NOTSET, VALID, SAME_UPPER or SAME_LOWER)");
  if (a.auto_pad == "NOTSET") a.pads = n.Ints("pads", {});  // ignored under auto_pad, as ORT
  const size_t sp = a.kernel_shape.size();
  if (sp == 0) return Status::InvalidArgument(label + " needs the kernel_shape attribute");
  if (sp > 2)
    return Status::Unimplemented(label + ": only 1-D and 2-D pooling are supported, kernel_shape " +
                                 IntsToString(a.kernel_shape) + " is " + std::to_string(sp) + "-D");
  if ((!a.strides.empty() && a.strides.size() != sp) ||
      (!a.pads.empty() && a.pads.size() != 2 * sp))
    return Status::InvalidArgument(label + ": kernel_shape " + IntsToString(a.kernel_shape) +
                                   ", strides " + IntsToString(a.strides) + " and pads " +
                                   IntsToString(a.pads) +
                                   " disagree on the number of spatial axes");
  // Bounded by INT32_MAX too, so that the window arithmetic cannot overflow int64 (pads
  // are smaller than the kernel).
  for (int64_t v : a.kernel_shape)
    if (v < 1 || v > INT32_MAX)
      return Status::InvalidArgument(label + ": kernel_shape " + IntsToString(a.kernel_shape) +
                                     " must be in [1, " + std::to_string(INT32_MAX) + "]");
  for (int64_t v : a.strides)
    if (v < 1 || v > INT32_MAX)
      return Status::InvalidArgument(label + ": strides " + IntsToString(a.strides) +
                                     " must be in [1, " + std::to_string(INT32_MAX) + "]");
  for (int64_t v : a.pads)
    if (v < 0)
      return Status::InvalidArgument(label + ": pads " + IntsToString(a.pads) + " must be >= 0");
  for (int64_t v : n.Ints("dilations", {}))
    if (v != 1)
      return Status::Unimplemented(label + ": dilations " + IntsToString(n.Ints("dilations", {})) +
                                   " are not supported (only 1)");
  return a;
}

// The geometry of X under the window attributes; fails naming the node and the shapes.
inline Result<PoolGeometry> ResolvePool(const std::string& label, const PoolAttrs& a, const Dims& x) {
  const size_t sp = a.kernel_shape.size();
  if (x.size() != sp + 2)
    return Status::InvalidArgument(label + ": kernel_shape " + IntsToString(a.kernel_shape) +
                                   " needs X of rank " + std::to_string(sp + 2) +
                                   " ([N,C,...]), got " + DimsToString(x));
  PoolGeometry g;
  g.n = x[0];
  g.c = x[1];
  PoolAxis* axes[2] = {&g.h, &g.w};
  for (size_t i = 0; i < sp; ++i) {
    PoolAxis& ax = *axes[2 - sp + i];
    ax.in = x[2 + i];
    ax.k = a.kernel_shape[i];
    ax.stride = a.strides.empty() ? 1 : a.strides[i];
    ax.pad0 = a.pads.empty() ? 0 : a.pads[i];
    ax.pad1 = a.pads.empty() ? 0 : a.pads[i + sp];
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      const int64_t out = (ax.in + ax.stride - 1) / ax.stride;
      const int64_t total = std::max<int64_t>(0, (out - 1) * ax.stride + ax.k - ax.in);
      ax.pad0 = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      ax.pad1 = total - ax.pad0;
    }
    // A window lying wholly in the padding would have no input cell to reduce.
    if (ax.pad0 >= ax.k || ax.pad1 >= ax.k)
      return Status::InvalidArgument(label + ": pads " + IntsToString(a.pads) +
                                     " must be smaller than kernel_shape " +
                                     IntsToString(a.kernel_shape));
    const int64_t span = ax.in + ax.pad0 + ax.pad1 - ax.k;
    if (span < 0)
      return Status::InvalidArgument(label + ": kernel_shape " + IntsToString(a.kernel_shape) +
                                     " is larger than the padded input " + DimsToString(x));
    ax.out = (a.ceil_mode ? (span + ax.stride - 1) / ax.stride : span / ax.stride) + 1;
    if (a.ceil_mode && (ax.out - 1) * ax.stride >= ax.in + ax.pad0) --ax.out;
  }
  return g;
}

inline Dims PoolOutDims(const Dims& x, const PoolGeometry& g) {
  return x.size() == 3 ? Dims{g.n, g.c, g.w.out} : Dims{g.n, g.c, g.h.out, g.w.out};
}

}  // namespace fedmesh::graph::ops
