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
#include "core/graph/ops/lane_sums.h"
#include "core/graph/ops/ops.h"
#include "core/graph/ops/window_geometry.h"

namespace fedmesh::graph::ops {
namespace {

constexpr int64_t kParallelWork = 32768;  // below this, one thread is faster

using Geo = PoolGeometry;

// Cells the windows of `outputs` outputs span, for the OpenMP threshold; in double, since
// a kernel of up to 2^31 x 2^31 (mostly over padding) would overflow int64.
double Work(int64_t outputs, const Geo& g) {
  return static_cast<double>(outputs) * static_cast<double>(g.h.k) * static_cast<double>(g.w.k);
}

class MaxPool final : public OpKernel {
 public:
  MaxPool(std::string label, PoolAttrs a, size_t num_outputs)
      : label_(std::move(label)), a_(std::move(a)), num_outputs_(num_outputs) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_ASSIGN_OR_RETURN(const Geo g, ResolvePool(label_, a_, in[0]));
    // Indices (refused at creation when wanted) still needs a shape when named "".
    out->assign(std::max<size_t>(1, num_outputs_), PoolOutDims(in[0], g));
    return Status::OK();
  }

  // 2x2 windows at stride 2 without padding, every window inside the plane: the ResNet's
  // pool, run without the general window arithmetic per output.
  static bool Halving(const Geo& g) {
    return g.h.k == 2 && g.w.k == 2 && g.h.stride == 2 && g.w.stride == 2 && g.h.pad0 == 0 && g.w.pad0 == 0 &&
           2 * g.h.out <= g.h.in && 2 * g.w.out <= g.w.in;
  }
  // The general loop's choice, in its order: the first maximum, a NaN once seen (the last
  // NaN of the window). Eight outputs at a time as GCC vectors (lane_sums.h's Lanes), the
  // even and odd columns of two rows split by shuffles, and selects instead of branches: on
  // real activations which of the four wins is a coin toss, and the branchy scalar loop was
  // 17% of a small CNN's step. The scalar tail makes the same choice.
  static void Forward2x2(const Geo& g, const float* xp, float* yp, float* ap) {
    static_assert(kSumLanes == 8, "the shuffles below split 16 floats into 8 even and 8 odd");
    typedef int32_t I8 __attribute__((vector_size(sizeof(Lanes))));  // Lanes' compare mask
    const I8 even = {0, 2, 4, 6, 8, 10, 12, 14};  // an output's first column, 2 ow
    const int64_t W = g.w.in, OW = g.w.out;
    const int32_t w32 = static_cast<int32_t>(W);
    for (int64_t oh = 0; oh < g.h.out; ++oh) {
      const float* r0 = xp + 2 * oh * W;
      const float* r1 = r0 + W;
      float* yr = yp + oh * OW;
      float* ar = ap + oh * OW;
      const int32_t row = static_cast<int32_t>(2 * oh * W);
      int64_t ow = 0;
      // 16 inputs per row per step; the last step may not read past the row (2 * OW <= W).
      for (; ow + 8 <= OW; ow += 8) {
        Lanes a0, a1, b0, b1;
        Load(a0, r0 + 2 * ow);
        Load(a1, r0 + 2 * ow + 8);
        Load(b0, r1 + 2 * ow);
        Load(b1, r1 + 2 * ow + 8);
        const I8 i0 = row + static_cast<int32_t>(2 * ow) + even;
        Lanes best = __builtin_shufflevector(a0, a1, 0, 2, 4, 6, 8, 10, 12, 14);
        I8 at = i0;
        auto take = [&](const Lanes& v, const I8& where) {
          const I8 win = (v > best) | (v != v);
          best = win ? v : best;
          at = win ? where : at;
        };
        take(__builtin_shufflevector(a0, a1, 1, 3, 5, 7, 9, 11, 13, 15), i0 + 1);
        take(__builtin_shufflevector(b0, b1, 0, 2, 4, 6, 8, 10, 12, 14), i0 + w32);
        take(__builtin_shufflevector(b0, b1, 1, 3, 5, 7, 9, 11, 13, 15), i0 + w32 + 1);
        std::memcpy(yr + ow, &best, sizeof best);
        std::memcpy(ar + ow, &at, sizeof at);  // int32 indices in float-sized slots
      }
      for (; ow < OW; ++ow) {
        const int32_t i0 = row + static_cast<int32_t>(2 * ow);
        float best = r0[2 * ow];
        int32_t best_at = i0;
        auto take = [&](float v, int32_t at) {
          if (v > best || std::isnan(v)) best = v, best_at = at;
        };
        take(r0[2 * ow + 1], i0 + 1);
        take(r1[2 * ow], i0 + w32);
        take(r1[2 * ow + 1], i0 + w32 + 1);
        yr[ow] = best;
        std::memcpy(ar + ow, &best_at, sizeof best_at);
      }
    }
  }

  // One int32 argmax per output, in float-sized slots.
  size_t WorkspaceFloats(const std::vector<Dims>&, const std::vector<Dims>& out) const override {
    static_assert(sizeof(int32_t) == sizeof(float));
    return NumElements(out[0]);
  }

  Status Forward(const KernelCall& c) override {
    const Geo g = *ResolvePool(label_, a_, *c.in_dims[0]);
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
      if (Halving(g)) {
        Forward2x2(g, xp, yp, ap);
        continue;
      }
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
    const Geo g = *ResolvePool(label_, a_, *c.in_dims[0]);
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
  PoolAttrs a_;
  size_t num_outputs_;
};

class AveragePool final : public OpKernel {
 public:
  AveragePool(std::string label, PoolAttrs a, bool count_include_pad)
      : label_(std::move(label)), a_(std::move(a)), count_include_pad_(count_include_pad) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_ASSIGN_OR_RETURN(const Geo g, ResolvePool(label_, a_, in[0]));
    *out = {PoolOutDims(in[0], g)};
    return Status::OK();
  }

  Status Forward(const KernelCall& c) override {
    const Geo g = *ResolvePool(label_, a_, *c.in_dims[0]);
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
    const Geo g = *ResolvePool(label_, a_, *c.in_dims[0]);
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
  PoolAttrs a_;
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
  FM_ASSIGN_OR_RETURN(PoolAttrs a, ParsePoolAttrs(n));
  return std::unique_ptr<OpKernel>(new MaxPool(n.Label(), std::move(a), n.outputs.size()));
}

KernelResult MakeAveragePool(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  FM_RETURN_IF_ERROR(CheckArity(n, 1));
  FM_ASSIGN_OR_RETURN(PoolAttrs a, ParsePoolAttrs(n));
  return std::unique_ptr<OpKernel>(
      new AveragePool(n.Label(), std::move(a), n.Int("count_include_pad", 0) != 0));
}

KernelResult MakeGlobalAveragePool(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  FM_RETURN_IF_ERROR(CheckArity(n, 1));
  return std::unique_ptr<OpKernel>(new GlobalAveragePool(n.Label()));
}

}  // namespace fedmesh::graph::ops
