// Elementwise unary ops (activations and math functions), Identity, IsNaN and Dropout. Each has
// a forward map and a derivative written from the input x and the output y.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/graph/ops/ops.h"
#include "core/rng.h"

namespace fedmesh::graph::ops {
namespace {

constexpr float kSqrt2 = 1.41421356237309505f;
constexpr float kInvSqrt2Pi = 0.398942280401432678f;  // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.797884560802865356f;

enum class Fn { kRelu, kLeakyRelu, kSigmoid, kTanh, kGelu, kGeluTanh, kErf, kSqrt, kNeg, kExp, kLog, kIdentity, kIsNaN };

// Elements above which the memory-bound loops (Relu, Identity's gradient) split over the
// team: a ResNet activation (32 x 16 x 28 x 28) is 401,408.
constexpr int64_t kParallelCopy = 1 << 17;

class Unary final : public OpKernel {
 public:
  Unary(Fn fn, float alpha) : fn_(fn), alpha_(alpha) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    *out = {in[0]};
    return Status::OK();
  }

  Status Forward(const KernelCall& c) override {
    const int64_t n = NumElements(*c.in_dims[0]);
    const float* x = c.in[0];
    float* y = c.out[0];
    switch (fn_) {  // the two cheap ones on their own, so the compiler vectorises them
      case Fn::kIdentity:
        if (y != x) std::memcpy(y, x, n * sizeof(float));
        return Status::OK();
      case Fn::kRelu:
#pragma omp parallel for schedule(static) if (n > kParallelCopy)
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return Status::OK();
      default:
        break;
    }
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) y[i] = F(x[i]);
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    float* dx = c.din[0];
    if (!dx) return;
    const int64_t n = NumElements(*c.in_dims[0]);
    const float* x = c.in[0];
    const float* y = c.out[0];
    const float* dy = c.dout[0];
    const bool assign = c.Write(0).keep == 0.0f;  // CanOverwriteInputGradient
    if (fn_ == Fn::kRelu || fn_ == Fn::kIdentity) {
      const bool relu = fn_ == Fn::kRelu;
      if (assign) {
#pragma omp parallel for schedule(static) if (n > kParallelCopy)
        for (int64_t i = 0; i < n; ++i) dx[i] = (!relu || x[i] > 0.0f) ? dy[i] : 0.0f;
      } else {
#pragma omp parallel for schedule(static) if (n > kParallelCopy)
        for (int64_t i = 0; i < n; ++i) dx[i] += (!relu || x[i] > 0.0f) ? dy[i] : 0.0f;
      }
      return;
    }
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      const float g = dy[i] * D(x[i], y[i]);
      dx[i] = assign ? g : dx[i] + g;
    }
  }

  bool CanOverwriteInputGradient(size_t i) const override { return i == 0; }

 private:
  float F(float x) const {
    switch (fn_) {
      case Fn::kRelu: return x > 0.0f ? x : 0.0f;
      case Fn::kLeakyRelu: return x > 0.0f ? x : alpha_ * x;
      case Fn::kSigmoid: return 1.0f / (1.0f + std::exp(-x));
      case Fn::kTanh: return std::tanh(x);
      case Fn::kGelu: return 0.5f * x * (1.0f + std::erf(x / kSqrt2));
      case Fn::kGeluTanh:
        return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
      case Fn::kErf: return std::erf(x);
      case Fn::kSqrt: return std::sqrt(x);
      case Fn::kNeg: return -x;
      case Fn::kExp: return std::exp(x);
      case Fn::kLog: return std::log(x);
      case Fn::kIdentity: return x;
      case Fn::kIsNaN: {  // on the bits: correct whatever the compiler assumes about NaN
        uint32_t bits;
        std::memcpy(&bits, &x, sizeof bits);
        return (bits & 0x7fffffffu) > 0x7f800000u ? 1.0f : 0.0f;
      }
    }
    return 0.0f;
  }
  // dy/dx from x and y = F(x).
  float D(float x, float y) const {
    switch (fn_) {
      case Fn::kRelu: return x > 0.0f ? 1.0f : 0.0f;
      case Fn::kLeakyRelu: return x > 0.0f ? 1.0f : alpha_;
      case Fn::kSigmoid: return y * (1.0f - y);
      case Fn::kTanh: return 1.0f - y * y;
      case Fn::kGelu:
        return 0.5f * (1.0f + std::erf(x / kSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
      case Fn::kGeluTanh: {
        const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
        const float t = std::tanh(u);
        const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
      }
      case Fn::kErf: return 2.0f * kInvSqrt2Pi * kSqrt2 * std::exp(-x * x);  // 2/sqrt(pi)
      case Fn::kSqrt: return 0.5f / y;
      case Fn::kNeg: return -1.0f;
      case Fn::kExp: return y;
      case Fn::kLog: return 1.0f / x;
      case Fn::kIdentity: return 1.0f;
      case Fn::kIsNaN: return 0.0f;  // a boolean: no gradient
    }
    return 0.0f;
  }

  Fn fn_;
  float alpha_;
};

KernelResult Make(Fn fn, const KernelContext& ctx, float alpha = 0.0f) {
  if (ctx.node->inputs.empty() || ctx.node->inputs[0].empty())
    return Status::InvalidArgument(ctx.node->Label() + " has no input");
  return std::unique_ptr<OpKernel>(new Unary(fn, alpha));
}

// Inverted dropout with the mask drawn from CounterUniform(seed, i), as the built-in
// layers draw it; the identity outside training.
class Dropout final : public OpKernel {
 public:
  explicit Dropout(float ratio) : ratio_(ratio) {}
  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    *out = {in[0], in[0]};
    return Status::OK();
  }
  size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>&) const override {
    return static_cast<size_t>(NumElements(in[0]));
  }
  bool IsIndexInput(size_t i) const override { return i > 0; }
  Status Forward(const KernelCall& c) override {
    const int64_t n = NumElements(*c.in_dims[0]);
    const float* x = c.in[0];
    float* y = c.out[0];
    float* mask = c.workspace;
    const bool drop = c.training && ratio_ > 0.0f;
    const float scale = drop ? 1.0f / (1.0f - ratio_) : 1.0f;
    for (int64_t i = 0; i < n; ++i) {
      mask[i] = !drop || CounterUniform(c.seed, static_cast<uint64_t>(i)) >= ratio_ ? scale : 0.0f;
      y[i] = x[i] * mask[i];
    }
    if (c.out.size() > 1 && c.out[1])
      for (int64_t i = 0; i < n; ++i) c.out[1][i] = mask[i] != 0.0f ? 1.0f : 0.0f;
    return Status::OK();
  }
  void Backward(const KernelCall& c) override {
    if (!c.din[0]) return;
    const int64_t n = NumElements(*c.in_dims[0]);
    for (int64_t i = 0; i < n; ++i) c.din[0][i] += c.dout[0][i] * c.workspace[i];
  }

 private:
  float ratio_;
};

}  // namespace

KernelResult MakeRelu(const KernelContext& ctx) { return Make(Fn::kRelu, ctx); }
KernelResult MakeLeakyRelu(const KernelContext& ctx) {
  return Make(Fn::kLeakyRelu, ctx, ctx.node->Float("alpha", 0.01f));
}
KernelResult MakeSigmoid(const KernelContext& ctx) { return Make(Fn::kSigmoid, ctx); }
KernelResult MakeTanh(const KernelContext& ctx) { return Make(Fn::kTanh, ctx); }
KernelResult MakeGelu(const KernelContext& ctx) {
  const std::string approx = ctx.node->String("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return Status::InvalidArgument(ctx.node->Label() + ": approximate='" + approx +
                                   "' is not supported (none | tanh)");
  return Make(approx == "tanh" ? Fn::kGeluTanh : Fn::kGelu, ctx);
}
KernelResult MakeErf(const KernelContext& ctx) { return Make(Fn::kErf, ctx); }
KernelResult MakeSqrt(const KernelContext& ctx) { return Make(Fn::kSqrt, ctx); }
KernelResult MakeNeg(const KernelContext& ctx) { return Make(Fn::kNeg, ctx); }
KernelResult MakeExp(const KernelContext& ctx) { return Make(Fn::kExp, ctx); }
KernelResult MakeLog(const KernelContext& ctx) { return Make(Fn::kLog, ctx); }
KernelResult MakeIdentity(const KernelContext& ctx) { return Make(Fn::kIdentity, ctx); }
// The output is a boolean, kept as float 0 / 1 like Dropout's mask.
KernelResult MakeIsNaN(const KernelContext& ctx) { return Make(Fn::kIsNaN, ctx); }

KernelResult MakeDropout(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  if (n.inputs.empty() || n.inputs[0].empty())
    return Status::InvalidArgument(n.Label() + " has no input");
  float ratio = n.Float("ratio", 0.5f);  // opset < 12: an attribute
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const Tensor* t = ctx.constant(n.inputs[1]);
    if (!t || t->numel() != 1)
      return Status::InvalidArgument(n.Label() + ": the dropout ratio must be a constant scalar");
    ratio = t->dtype == DType::kFloat32 ? t->f[0] : static_cast<float>(t->i[0]);
  }
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return Status::InvalidArgument(n.Label() + ": dropout ratio " + std::to_string(ratio) +
                                   " is outside [0, 1)");
  return std::unique_ptr<OpKernel>(new Dropout(ratio));
}

}  // namespace fedmesh::graph::ops
