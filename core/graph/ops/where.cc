// Where(condition, a, b): a where the condition holds, else b, with numpy broadcasting of
// all three. The condition is IsNaN's (or a comparison's) output, kept as float 0 / 1 like
// every boolean in the executor; it has no gradient. The gradient of each output element
// goes to the operand it was taken from (summed back over broadcast dims).
// Used by the federation's input normalization to fill missing cells (NaN) with the
// federation's means (core/graph/input_normalization.h).
#include "core/graph/ops/broadcast.h"
#include "core/graph/ops/ops.h"

namespace fedmesh::graph::ops {
namespace {

class Where final : public OpKernel {
 public:
  explicit Where(std::string label) : label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    auto ab = BroadcastDims(in[1], in[2]);
    if (!ab.ok()) return ab.status().WithContext(label_);
    auto d = BroadcastDims(in[0], *ab);
    if (!d.ok()) return d.status().WithContext(label_);
    *out = {*d};
    return Status::OK();
  }
  bool IsIndexInput(size_t i) const override { return i == 0; }

  Status Forward(const KernelCall& c) override {
    const Dims& od = *c.out_dims[0];
    const int64_t n = NumElements(od);
    const BroadcastIndex rc(*c.in_dims[0], od), ra(*c.in_dims[1], od), rb(*c.in_dims[2], od);
    const float* cond = c.in[0];
    const float* a = c.in[1];
    const float* b = c.in[2];
    float* y = c.out[0];
    for (int64_t i = 0; i < n; ++i) y[i] = cond[rc.At(i)] != 0.0f ? a[ra.At(i)] : b[rb.At(i)];
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    const Dims& od = *c.out_dims[0];
    const int64_t n = NumElements(od);
    const BroadcastIndex rc(*c.in_dims[0], od), ra(*c.in_dims[1], od), rb(*c.in_dims[2], od);
    const float* cond = c.in[0];
    const float* dy = c.dout[0];
    float* da = c.din.size() > 1 ? c.din[1] : nullptr;
    float* db = c.din.size() > 2 ? c.din[2] : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      if (cond[rc.At(i)] != 0.0f) {
        if (da) da[ra.At(i)] += dy[i];
      } else if (db) {
        db[rb.At(i)] += dy[i];
      }
    }
  }

 private:
  std::string label_;
};

}  // namespace

KernelResult MakeWhere(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  if (n.inputs.size() != 3 || n.inputs[0].empty() || n.inputs[1].empty() || n.inputs[2].empty())
    return Status::InvalidArgument(n.Label() + " needs three inputs: condition, X and Y");
  return std::unique_ptr<OpKernel>(new Where(n.Label()));
}

}  // namespace fedmesh::graph::ops
