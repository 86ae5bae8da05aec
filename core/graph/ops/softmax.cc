// Softmax and LogSoftmax along one axis (opset 13 semantics; below opset 13 the input is
// coerced to 2-D at `axis`, which is the same computation over a longer inner extent).
#include <algorithm>
#include <cmath>

#include "core/graph/ops/ops.h"

namespace fedmesh::graph::ops {
namespace {

class Softmax final : public OpKernel {
 public:
  Softmax(bool log, int64_t axis, bool coerce_2d, std::string label)
      : log_(log), axis_(axis), coerce_(coerce_2d), label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const int64_t r = static_cast<int64_t>(in[0].size());
    if (axis_ < -r || axis_ >= r)
      return Status::InvalidArgument(label_ + ": axis " + std::to_string(axis_) +
                                     " is out of range for " + DimsToString(in[0]));
    *out = {in[0]};
    return Status::OK();
  }

  // outer x len x inner, softmax over len.
  void Extents(const Dims& d, int64_t* outer, int64_t* len, int64_t* inner) const {
    const int64_t r = static_cast<int64_t>(d.size());
    const int64_t ax = axis_ < 0 ? axis_ + r : axis_;
    *outer = *len = *inner = 1;
    for (int64_t k = 0; k < ax; ++k) *outer *= d[k];
    if (coerce_) {
      for (int64_t k = ax; k < r; ++k) *len *= d[k];
    } else {
      *len = d[ax];
      for (int64_t k = ax + 1; k < r; ++k) *inner *= d[k];
    }
  }

  Status Forward(const KernelCall& c) override {
    int64_t outer, len, inner;
    Extents(*c.in_dims[0], &outer, &len, &inner);
    if (len == 0) return Status::OK();  // no element to read the maximum from
    const float* x = c.in[0];
    float* y = c.out[0];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * len * inner + i;
        float mx = x[base];
        for (int64_t j = 1; j < len; ++j) mx = std::max(mx, x[base + j * inner]);
        double sum = 0.0;
        for (int64_t j = 0; j < len; ++j) sum += std::exp(double(x[base + j * inner]) - mx);
        const double lse = mx + std::log(sum);
        for (int64_t j = 0; j < len; ++j) {
          const double v = double(x[base + j * inner]) - lse;
          y[base + j * inner] = static_cast<float>(log_ ? v : std::exp(v));
        }
      }
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    if (!c.din[0]) return;
    int64_t outer, len, inner;
    Extents(*c.in_dims[0], &outer, &len, &inner);
    const float* y = c.out[0];
    const float* dy = c.dout[0];
    float* dx = c.din[0];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * len * inner + i;
        double s = 0.0;
        for (int64_t j = 0; j < len; ++j) {
          const int64_t p = base + j * inner;
          s += log_ ? dy[p] : double(dy[p]) * y[p];
        }
        for (int64_t j = 0; j < len; ++j) {
          const int64_t p = base + j * inner;
          dx[p] += log_ ? static_cast<float>(dy[p] - std::exp(double(y[p])) * s)
                        : static_cast<float>(y[p] * (dy[p] - s));
        }
      }
  }

 private:
  bool log_;
  int64_t axis_;
  bool coerce_;
  std::string label_;
};

KernelResult Make(bool log, const KernelContext& ctx) {
  if (ctx.node->inputs.size() != 1 || ctx.node->inputs[0].empty())
    return Status::InvalidArgument(ctx.node->Label() + " needs exactly one input");
  const bool old = ctx.opset < 13;
  return std::unique_ptr<OpKernel>(
      new Softmax(log, ctx.node->Int("axis", old ? 1 : -1), old, ctx.node->Label()));
}

}  // namespace

KernelResult MakeSoftmax(const KernelContext& ctx) { return Make(false, ctx); }
KernelResult MakeLogSoftmax(const KernelContext& ctx) { return Make(true, ctx); }

}  // namespace fedmesh::graph::ops
