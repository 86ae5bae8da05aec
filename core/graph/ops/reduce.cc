// ReduceMean and ReduceSum over a set of axes (all axes when none are given), keepdims
// or not. Every input element maps to its output element through the broadcast of the
// kept-dims output shape.
#include <algorithm>
#include <cstring>

#include "core/graph/ops/broadcast.h"
#include "core/graph/ops/ops.h"

namespace fedmesh::graph::ops {
namespace {

class Reduce final : public OpKernel {
 public:
  Reduce(bool mean, std::vector<int64_t> axes, bool keepdims, bool noop_empty, std::string label)
      : mean_(mean), axes_(std::move(axes)), keep_(keepdims), noop_(noop_empty),
        label_(std::move(label)) {}

  Result<Dims> KeptDims(const Dims& in) const {
    const int64_t r = static_cast<int64_t>(in.size());
    Dims kept = in;
    if (axes_.empty()) {
      if (!noop_) std::fill(kept.begin(), kept.end(), 1);
      return kept;
    }
    for (int64_t a : axes_) {
      if (a < -r || a >= r)
        return Status::InvalidArgument(label_ + ": axis " + std::to_string(a) +
                                       " is out of range for " + DimsToString(in));
      kept[a < 0 ? a + r : a] = 1;
    }
    return kept;
  }

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    auto kept = KeptDims(in[0]);
    if (!kept.ok()) return kept.status();
    if (keep_) {
      *out = {*kept};
      return Status::OK();
    }
    Dims y;
    for (size_t k = 0; k < in[0].size(); ++k)
      if (!IsReduced(k, in[0].size())) y.push_back(in[0][k]);
    *out = {y};
    return Status::OK();
  }

  bool IsReduced(size_t k, size_t rank) const {
    if (axes_.empty()) return !noop_;
    for (int64_t a : axes_)
      if ((a < 0 ? a + int64_t(rank) : a) == int64_t(k)) return true;
    return false;
  }

  bool IsIndexInput(size_t i) const override { return i > 0; }

  Status Forward(const KernelCall& c) override {
    const Dims& in = *c.in_dims[0];
    const Dims kept = *KeptDims(in);
    const BroadcastIndex map(kept, in);
    const int64_t n = NumElements(in), m = NumElements(kept);
    float* y = c.out[0];
    std::fill(y, y + m, 0.0f);
    for (int64_t i = 0; i < n; ++i) y[map.At(i)] += c.in[0][i];
    if (mean_ && m > 0) {
      const float s = static_cast<float>(m) / static_cast<float>(n);
      for (int64_t j = 0; j < m; ++j) y[j] *= s;
    }
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    if (!c.din[0]) return;
    const Dims& in = *c.in_dims[0];
    const Dims kept = *KeptDims(in);
    const BroadcastIndex map(kept, in);
    const int64_t n = NumElements(in), m = NumElements(kept);
    const float s = mean_ ? static_cast<float>(m) / static_cast<float>(n) : 1.0f;
    for (int64_t i = 0; i < n; ++i) c.din[0][i] += c.dout[0][map.At(i)] * s;
  }

 private:
  bool mean_;
  std::vector<int64_t> axes_;
  bool keep_, noop_;
  std::string label_;
};

KernelResult Make(bool mean, const KernelContext& ctx) {
  const Node& n = *ctx.node;
  if (n.inputs.empty() || n.inputs[0].empty())
    return Status::InvalidArgument(n.Label() + " has no input");
  std::vector<int64_t> axes = n.Ints("axes", {});
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {  // ReduceSum >= 13, ReduceMean >= 18
    const Tensor* t = ctx.constant(n.inputs[1]);
    if (!t || t->dtype != DType::kInt64)
      return Status::InvalidArgument(n.Label() + ": axes must be a constant int64 tensor");
    axes = t->i;
  }
  return std::unique_ptr<OpKernel>(new Reduce(mean, axes, n.Int("keepdims", 1) != 0,
                                              n.Int("noop_with_empty_axes", 0) != 0, n.Label()));
}

}  // namespace

KernelResult MakeReduceMean(const KernelContext& ctx) { return Make(true, ctx); }
KernelResult MakeReduceSum(const KernelContext& ctx) { return Make(false, ctx); }

}  // namespace fedmesh::graph::ops
