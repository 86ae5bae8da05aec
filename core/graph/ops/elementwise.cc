// Binary elementwise ops with numpy broadcasting: Add, Sub, Mul, Div, Pow.
// Forward reads each operand through a broadcast map; backward sums the gradient of
// every output element back into the operand element it read.
#include <algorithm>
#include <cmath>

#include "core/graph/ops/broadcast.h"
#include "core/graph/ops/ops.h"

namespace fedmesh::graph::ops {
namespace {

enum class BinOp { kAdd, kSub, kMul, kDiv, kPow };

// Operand index of output element i, with fast forms for the usual broadcasts: same
// shape, scalar, and a block of consecutive output dims (bias [C] over [N,C], [C,1,1]
// over [N,C,H,W]).
struct Reader {
  Reader(const Dims& operand, const Dims& out) : general(operand, out) {
    const size_t off = out.size() - operand.size();
    Dims padded(off, 1);
    padded.insert(padded.end(), operand.begin(), operand.end());
    int first = -1, last = -1;
    for (size_t k = 0; k < padded.size(); ++k)
      if (padded[k] != 1) {
        if (first < 0) first = static_cast<int>(k);
        last = static_cast<int>(k);
      }
    if (general.same()) {
      kind = 0;
    } else if (first < 0) {
      kind = 1;
    } else {
      bool block = true;
      for (int k = first; k <= last; ++k) block = block && padded[k] == out[k];
      if (block) {
        kind = 2;
        inner = 1;
        for (size_t k = last + 1; k < out.size(); ++k) inner *= out[k];
        mid = 1;
        for (int k = first; k <= last; ++k) mid *= out[k];
      } else {
        kind = 3;
      }
    }
  }
  int64_t operator()(int64_t i) const {
    switch (kind) {
      case 0: return i;
      case 1: return 0;
      case 2: return (i / inner) % mid;
      default: return general.At(i);
    }
  }
  BroadcastIndex general;
  int kind = 0;
  int64_t inner = 1, mid = 1;
};

// for (i < n) f(i), split over OpenMP threads when it is worth it; f inlines, so a simple
// body vectorises.
template <typename F>
void Each(int64_t n, F f) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) f(i);
}

class Binary final : public OpKernel {
 public:
  Binary(BinOp op, std::string label) : op_(op), label_(std::move(label)) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    auto d = BroadcastDims(in[0], in[1]);
    if (!d.ok()) return d.status().WithContext(label_);
    *out = {*d};
    return Status::OK();
  }

  Status Forward(const KernelCall& c) override {
    const Dims& od = *c.out_dims[0];
    const int64_t n = NumElements(od);
    const Reader ra(*c.in_dims[0], od), rb(*c.in_dims[1], od);
    const float* a = c.in[0];
    const float* b = c.in[1];
    float* y = c.out[0];
    // Operands of the output's shape (a residual Add): one vectorised loop per op.
    if (c.relu_epilogue) {  // CanFuseRelu: Add or Sub of same-shape operands
      const float sb = op_ == BinOp::kSub ? -1.0f : 1.0f;
      Each(n, [=](int64_t i) {
        const float v = a[i] + sb * b[i];
        y[i] = v > 0.0f ? v : 0.0f;
      });
      return Status::OK();
    }
    if (ra.kind == 0 && rb.kind == 0 && op_ != BinOp::kPow) {
      switch (op_) {
        case BinOp::kAdd: Each(n, [=](int64_t i) { y[i] = a[i] + b[i]; }); break;
        case BinOp::kSub: Each(n, [=](int64_t i) { y[i] = a[i] - b[i]; }); break;
        case BinOp::kMul: Each(n, [=](int64_t i) { y[i] = a[i] * b[i]; }); break;
        default: Each(n, [=](int64_t i) { y[i] = a[i] / b[i]; }); break;
      }
      return Status::OK();
    }
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) y[i] = Apply(a[ra(i)], b[rb(i)]);
    return Status::OK();
  }

  bool CanOverwriteInputGradient(size_t i) const override { return i < 2; }
  bool CanFuseRelu(const std::vector<Dims>& in, const std::vector<Dims>& out) const override {
    return (op_ == BinOp::kAdd || op_ == BinOp::kSub) && in[0] == out[0] && in[1] == out[0];
  }

  void Backward(const KernelCall& c) override {
    const Dims& od = *c.out_dims[0];
    const int64_t n = NumElements(od);
    const Reader ra(*c.in_dims[0], od), rb(*c.in_dims[1], od);
    const float* a = c.in[0];
    const float* b = c.in[1];
    const float* y = c.out[0];
    const float* dy = c.dout[0];
    float* da = c.din[0];
    float* db = c.din[1];
    // Overwritten gradients (CanOverwriteInputGradient): assigned by the vectorised loops,
    // zeroed first for the accumulating ones.
    const bool set_a = da && c.Write(0).keep == 0.0f, set_b = db && c.Write(1).keep == 0.0f;
    if (c.relu_epilogue) {  // dy masked by the fused Relu's output (y > 0)
      const float sb = op_ == BinOp::kSub ? -1.0f : 1.0f;
      // One simple loop per case, dy loaded unconditionally: each vectorises (a blend).
      auto m = [=](int64_t i) { const float g = dy[i]; return y[i] > 0.0f ? g : 0.0f; };
      if (set_a) Each(n, [=](int64_t i) { da[i] = m(i); });
      else if (da) Each(n, [=](int64_t i) { da[i] += m(i); });
      if (set_b) Each(n, [=](int64_t i) { db[i] = sb * m(i); });
      else if (db) Each(n, [=](int64_t i) { db[i] += sb * m(i); });
      return;
    }
    if (ra.kind == 0 && rb.kind == 0 && (op_ == BinOp::kAdd || op_ == BinOp::kSub || op_ == BinOp::kMul)) {
      // Operands of the output's shape: vectorised loops for the common ops.
      const float sb = op_ == BinOp::kSub ? -1.0f : 1.0f;
      if (op_ == BinOp::kMul) {
        if (set_a) Each(n, [=](int64_t i) { da[i] = dy[i] * b[i]; });
        else if (da) Each(n, [=](int64_t i) { da[i] += dy[i] * b[i]; });
        if (set_b) Each(n, [=](int64_t i) { db[i] = dy[i] * a[i]; });
        else if (db) Each(n, [=](int64_t i) { db[i] += dy[i] * a[i]; });
      } else {
        if (set_a) Each(n, [=](int64_t i) { da[i] = dy[i]; });
        else if (da) Each(n, [=](int64_t i) { da[i] += dy[i]; });
        if (set_b) Each(n, [=](int64_t i) { db[i] = sb * dy[i]; });
        else if (db) Each(n, [=](int64_t i) { db[i] += sb * dy[i]; });
      }
      return;
    }
    if (set_a) std::fill(da, da + NumElements(*c.in_dims[0]), 0.0f);
    if (set_b) std::fill(db, db + NumElements(*c.in_dims[1]), 0.0f);
    // Scatter-adds stay serial unless the operand has the output's shape (no collisions).
    if (da) {
      if (ra.kind == 0) {
#pragma omp parallel for schedule(static) if (n > 32768)
        for (int64_t i = 0; i < n; ++i) da[i] += dy[i] * GradA(a[i], b[rb(i)], y[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) da[ra(i)] += dy[i] * GradA(a[ra(i)], b[rb(i)], y[i]);
      }
    }
    if (db) {
      if (rb.kind == 0) {
#pragma omp parallel for schedule(static) if (n > 32768)
        for (int64_t i = 0; i < n; ++i) db[i] += dy[i] * GradB(a[ra(i)], b[i], y[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) db[rb(i)] += dy[i] * GradB(a[ra(i)], b[rb(i)], y[i]);
      }
    }
  }

 private:
  float Apply(float a, float b) const {
    switch (op_) {
      case BinOp::kAdd: return a + b;
      case BinOp::kSub: return a - b;
      case BinOp::kMul: return a * b;
      case BinOp::kDiv: return a / b;
      case BinOp::kPow: return b == 2.0f ? a * a : std::pow(a, b);
    }
    return 0.0f;
  }
  float GradA(float a, float b, float y) const {
    (void)y;
    switch (op_) {
      case BinOp::kAdd: return 1.0f;
      case BinOp::kSub: return 1.0f;
      case BinOp::kMul: return b;
      case BinOp::kDiv: return 1.0f / b;
      case BinOp::kPow: return b == 2.0f ? 2.0f * a : b * std::pow(a, b - 1.0f);
    }
    return 0.0f;
  }
  float GradB(float a, float b, float y) const {
    switch (op_) {
      case BinOp::kAdd: return 1.0f;
      case BinOp::kSub: return -1.0f;
      case BinOp::kMul: return a;
      case BinOp::kDiv: return -a / (b * b);
      case BinOp::kPow: return a > 0.0f ? y * std::log(a) : 0.0f;
    }
    return 0.0f;
  }

  BinOp op_;
  std::string label_;
};

KernelResult Make(BinOp op, const KernelContext& ctx) {
  if (ctx.node->inputs.size() != 2 || ctx.node->inputs[0].empty() || ctx.node->inputs[1].empty())
    return Status::InvalidArgument(ctx.node->Label() + " needs exactly two inputs");
  return std::unique_ptr<OpKernel>(new Binary(op, ctx.node->Label()));
}

}  // namespace

KernelResult MakeAdd(const KernelContext& ctx) { return Make(BinOp::kAdd, ctx); }
KernelResult MakeSub(const KernelContext& ctx) { return Make(BinOp::kSub, ctx); }
KernelResult MakeMul(const KernelContext& ctx) { return Make(BinOp::kMul, ctx); }
KernelResult MakeDiv(const KernelContext& ctx) { return Make(BinOp::kDiv, ctx); }
KernelResult MakePow(const KernelContext& ctx) { return Make(BinOp::kPow, ctx); }

}  // namespace fedmesh::graph::ops
