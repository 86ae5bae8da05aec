// MaxPool, AveragePool and GlobalAveragePool (ONNX, NCHW; 2-D, and 1-D on [N,C,L] as 2-D
// with H = 1). Windows follow ONNX Runtime and PyTorch: padding never wins a max; an
// average divides by the window's cells inside the input, or (count_include_pad) by its
// cells inside the padded input; with ceil_mode the last window must start inside the
// input or its left padding. MaxPool keeps the argmax of every output in the workspace
// for backward. Every (image, channel) plane is independent: OpenMP splits the planes.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "core/graph/ops/ops.h"

namespace fedmesh::graph::ops {
namespace {

constexpr int64_t kParallelWork = 32768;  // below this, one thread is faster

// One spatial axis of the pooling window.
struct Axis {
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

struct Geo {
  int64_t n = 0, c = 0;
  Axis h, w;
  int64_t planes() const { return n * c; }
  int64_t in_pix() const { return h.in * w.in; }
  int64_t out_pix() const { return h.out * w.out; }
};

// Cells the windows of `outputs` outputs span, for the OpenMP threshold; in double, since
// a kernel of up to 2^31 x 2^31 (mostly over padding) would overflow int64.
double Work(int64_t outputs, const Geo& g) {
  return static_cast<double>(outputs) * static_cast<double>(g.h.k) * static_cast<double>(g.w.k);
}

struct WindowAttrs {
  std::vector<int64_t> kernel_shape, strides, pads;  // strides, pads empty: the defaults
  bool ceil_mode = false;
  std::string auto_pad = "NOTSET";
};

Result<WindowAttrs> ParseWindow(const Node& n) {
  const std::string label = n.Label();
  WindowAttrs a;
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
Result<Geo> Resolve(const std::string& label, const WindowAttrs& a, const Dims& x) {
  const size_t sp = a.kernel_shape.size();
  if (x.size() != sp + 2)
    return Status::InvalidArgument(label + ": kernel_shape " + IntsToString(a.kernel_shape) +
                                   " needs X of rank " + std::to_string(sp + 2) +
                                   " ([N,C,...]), got " + DimsToString(x));
  Geo g;
  g.n = x[0];
  g.c = x[1];
  Axis* axes[2] = {&g.h, &g.w};
  for (size_t i = 0; i < sp; ++i) {
    Axis& ax = *axes[2 - sp + i];
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

Dims OutDims(const Dims& x, const Geo& g) {
  return x.size() == 3 ? Dims{g.n, g.c, g.w.out} : Dims{g.n, g.c, g.h.out, g.w.out};
}

class MaxPool final : public OpKernel {
 public:
  MaxPool(std::string label, WindowAttrs a, size_t num_outputs)
      : label_(std::move(label)), a_(std::move(a)), num_outputs_(num_outputs) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_ASSIGN_OR_RETURN(const Geo g, Resolve(label_, a_, in[0]));
    // Indices (refused at creation when wanted) still needs a shape when named "".
    out->assign(std::max<size_t>(1, num_outputs_), OutDims(in[0], g));
    return Status::OK();
  }

  // One int32 argmax per output, in float-sized slots.
  size_t WorkspaceFloats(const std::vector<Dims>&, const std::vector<Dims>& out) const override {
    static_assert(sizeof(int32_t) == sizeof(float));
    return NumElements(out[0]);
  }

  Status Forward(const KernelCall& c) override {
    const Geo g = *Resolve(label_, a_, *c.in_dims[0]);
    FM_CHECK(g.in_pix() <= INT32_MAX);
    const float* x = c.in[0];
    float* y = c.out[0];
    float* arg = c.workspace;
    const int64_t planes = g.planes();
#pragma omp parallel for schedule(static) if (Work(planes * g.out_pix(), g) > kParallelWork)
    for (int64_t p = 0; p < planes; ++p) {
      const float* xp = x + p * g.in_pix();
      float* yp = y + p * g.out_pix();
      float* ap = arg + p * g.out_pix();
      for (int64_t oh = 0; oh < g.h.out; ++oh) {
        int64_t hb, he, hpad;
        g.h.Window(oh, &hb, &he, &hpad);
        for (int64_t ow = 0; ow < g.w.out; ++ow) {
          int64_t wb, we, wpad;
          g.w.Window(ow, &wb, &we, &wpad);
          // Windows are never empty (pads < kernel; ceil_mode's last window starts inside).
          int64_t best_at = hb * g.w.in + wb;
          float best = xp[best_at];
          for (int64_t ih = hb; ih < he; ++ih)
            for (int64_t iw = wb; iw < we; ++iw) {
              const float v = xp[ih * g.w.in + iw];
              if (v > best || std::isnan(v)) {  // NaN propagates, as in PyTorch
                best = v;
                best_at = ih * g.w.in + iw;
              }
            }
          const int64_t o = oh * g.w.out + ow;
          yp[o] = best;
          const int32_t at = static_cast<int32_t>(best_at);
          std::memcpy(ap + o, &at, sizeof at);
        }
      }
    }
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    float* dx = c.din[0];
    if (!dx) return;
    const Geo g = *Resolve(label_, a_, *c.in_dims[0]);
    const float* dy = c.dout[0];
    const float* arg = c.workspace;
    const int64_t planes = g.planes();
#pragma omp parallel for schedule(static) if (planes * g.out_pix() > kParallelWork)
    for (int64_t p = 0; p < planes; ++p) {
      float* dxp = dx + p * g.in_pix();
      for (int64_t o = p * g.out_pix(); o < (p + 1) * g.out_pix(); ++o) {
        int32_t at;
        std::memcpy(&at, arg + o, sizeof at);
        dxp[at] += dy[o];
      }
    }
  }

 private:
  std::string label_;
  WindowAttrs a_;
  size_t num_outputs_;
};

class AveragePool final : public OpKernel {
 public:
  AveragePool(std::string label, WindowAttrs a, bool count_include_pad)
      : label_(std::move(label)), a_(std::move(a)), count_include_pad_(count_include_pad) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_ASSIGN_OR_RETURN(const Geo g, Resolve(label_, a_, in[0]));
    *out = {OutDims(in[0], g)};
    return Status::OK();
  }

  Status Forward(const KernelCall& c) override {
    const Geo g = *Resolve(label_, a_, *c.in_dims[0]);
    const float* x = c.in[0];
    float* y = c.out[0];
    const int64_t planes = g.planes();
#pragma omp parallel for schedule(static) if (Work(planes * g.out_pix(), g) > kParallelWork)
    for (int64_t p = 0; p < planes; ++p) {
      const float* xp = x + p * g.in_pix();
      float* yp = y + p * g.out_pix();
      for (int64_t oh = 0; oh < g.h.out; ++oh) {
        int64_t hb, he, hpad;
        g.h.Window(oh, &hb, &he, &hpad);
        for (int64_t ow = 0; ow < g.w.out; ++ow) {
          int64_t wb, we, wpad;
          g.w.Window(ow, &wb, &we, &wpad);
          float s = 0.0f;
          for (int64_t ih = hb; ih < he; ++ih)
            for (int64_t iw = wb; iw < we; ++iw) s += xp[ih * g.w.in + iw];
          yp[oh * g.w.out + ow] = s / Divisor(he - hb, we - wb, hpad, wpad);
        }
      }
    }
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    float* dx = c.din[0];
    if (!dx) return;
    const Geo g = *Resolve(label_, a_, *c.in_dims[0]);
    const float* dy = c.dout[0];
    const int64_t planes = g.planes();
#pragma omp parallel for schedule(static) if (Work(planes * g.out_pix(), g) > kParallelWork)
    for (int64_t p = 0; p < planes; ++p) {
      float* dxp = dx + p * g.in_pix();
      const float* dyp = dy + p * g.out_pix();
      for (int64_t oh = 0; oh < g.h.out; ++oh) {
        int64_t hb, he, hpad;
        g.h.Window(oh, &hb, &he, &hpad);
        for (int64_t ow = 0; ow < g.w.out; ++ow) {
          int64_t wb, we, wpad;
          g.w.Window(ow, &wb, &we, &wpad);
          const float d = dyp[oh * g.w.out + ow] / Divisor(he - hb, we - wb, hpad, wpad);
          for (int64_t ih = hb; ih < he; ++ih)
            for (int64_t iw = wb; iw < we; ++iw) dxp[ih * g.w.in + iw] += d;
        }
      }
    }
  }

 private:
  float Divisor(int64_t h, int64_t w, int64_t hpad, int64_t wpad) const {
    return static_cast<float>(count_include_pad_ ? hpad * wpad : h * w);
  }

  std::string label_;
  WindowAttrs a_;
  bool count_include_pad_;
};

// The mean of every [N, C] plane; Y is [N, C, 1, ...].
class GlobalAveragePool final : public OpKernel {
 public:
  explicit GlobalAveragePool(std::string label) : label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const Dims& x = in[0];
    if (x.size() < 3)
      return Status::InvalidArgument(label_ + " needs X of rank >= 3 ([N,C,...]), got " +
                                     DimsToString(x));
    Dims y(x.size(), 1);
    y[0] = x[0];
    y[1] = x[1];
    *out = {y};
    return Status::OK();
  }

  Status Forward(const KernelCall& c) override {
    const Dims& x = *c.in_dims[0];
    const int64_t planes = x[0] * x[1], pix = NumElements(x) / std::max<int64_t>(1, planes);
    const float* xv = c.in[0];
    float* y = c.out[0];
#pragma omp parallel for schedule(static) if (planes * pix > kParallelWork)
    for (int64_t p = 0; p < planes; ++p) {
      const float* xp = xv + p * pix;
      double s = 0.0;
      for (int64_t i = 0; i < pix; ++i) s += xp[i];
      y[p] = static_cast<float>(s / static_cast<double>(pix));
    }
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    float* dx = c.din[0];
    if (!dx) return;
    const Dims& x = *c.in_dims[0];
    const int64_t planes = x[0] * x[1], pix = NumElements(x) / std::max<int64_t>(1, planes);
    const float* dy = c.dout[0];
#pragma omp parallel for schedule(static) if (planes * pix > kParallelWork)
    for (int64_t p = 0; p < planes; ++p) {
      const float d = dy[p] / static_cast<float>(pix);
      float* dxp = dx + p * pix;
      for (int64_t i = 0; i < pix; ++i) dxp[i] += d;
    }
  }

 private:
  std::string label_;
};

Status CheckArity(const Node& n, size_t max_outputs) {
  if (n.inputs.size() != 1 || n.inputs[0].empty())
    return Status::InvalidArgument(n.Label() + " needs exactly one input X, got " +
                                   std::to_string(n.inputs.size()));
  if (n.outputs.empty() || n.outputs.size() > max_outputs)
    return Status::InvalidArgument(n.Label() + " has " + std::to_string(n.outputs.size()) +
                                   " outputs; it takes 1 to " + std::to_string(max_outputs));
  return Status::OK();
}

}  // namespace

KernelResult MakeMaxPool(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  FM_RETURN_IF_ERROR(CheckArity(n, 2));
  if (n.outputs.size() > 1 && !n.outputs[1].empty())
    return Status::Unimplemented(n.Label() + ": the Indices output ('" + n.outputs[1] +
                                 "') is not supported; export without return_indices");
  // storage_order only changes Indices, which is refused above.
  FM_ASSIGN_OR_RETURN(WindowAttrs a, ParseWindow(n));
  return std::unique_ptr<OpKernel>(new MaxPool(n.Label(), std::move(a), n.outputs.size()));
}

KernelResult MakeAveragePool(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  FM_RETURN_IF_ERROR(CheckArity(n, 1));
  FM_ASSIGN_OR_RETURN(WindowAttrs a, ParseWindow(n));
  return std::unique_ptr<OpKernel>(
      new AveragePool(n.Label(), std::move(a), n.Int("count_include_pad", 0) != 0));
}

KernelResult MakeGlobalAveragePool(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  FM_RETURN_IF_ERROR(CheckArity(n, 1));
  return std::unique_ptr<OpKernel>(new GlobalAveragePool(n.Label()));
}

}  // namespace fedmesh::graph::ops
