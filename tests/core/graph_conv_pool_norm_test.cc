// The Conv, pooling and normalization kernels (core/graph/ops/{conv,pool,normalization}.cc)
// driven directly through their factories, without GraphModel: forward against naive
// reference loops written here, backward against central finite differences of
// L = sum_k sum(Y_k * R_k) for every differentiable input, accumulation into prefilled
// gradients, BatchNorm's running statistics against hand-computed values, and the shape
// errors naming the node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/graph/graph.h"
#include "core/graph/op_kernel.h"
#include "core/graph/ops/conv_dnnl.h"
#include "core/graph/ops/ops.h"
#include "core/rng.h"
#include "tests/core/random_vector.h"
#include "tests/core/status_assertions.h"

namespace fedmesh::graph {
namespace {

using fedmesh::testing::HasCode;
using Floats = std::vector<float>;

Attribute IntsAttr(std::vector<int64_t> v) { return Attribute::OfInts(std::move(v)); }
Attribute IntAttr(int64_t v) { return Attribute::OfInt(v); }
Attribute FloatAttr(float v) { return Attribute::OfFloat(v); }
Attribute StringAttr(std::string v) { return Attribute::OfString(std::move(v)); }

Node MakeNode(std::string op, std::vector<std::string> inputs, std::vector<std::string> outputs,
              std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = std::string("k");
  n.op_type = std::move(op);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

Result<std::unique_ptr<OpKernel>> Create(KernelFactory f, const Node& node) {
  KernelContext ctx;
  ctx.node = &node;
  ctx.constant = [](const std::string&) -> const Tensor* { return nullptr; };
  return f(ctx);
}

// One kernel with host buffers for every input, output and its workspace, as the executor
// would plan them for one set of input dims. Outputs and workspace start as NaN, so a
// value the kernel forgets to write shows.
class KernelRun {
 public:
  Status Init(KernelFactory f, Node node, std::vector<Dims> in_dims, int threads = 1) {
    be_ = MakeCpuBackend(threads);  // before WorkspaceFloats: it sets the OpenMP threads
    node_ = std::move(node);
    auto k = Create(f, node_);
    if (!k.ok()) return k.status();
    kernel_ = std::move(*k);
    in_dims_ = std::move(in_dims);
    FM_RETURN_IF_ERROR(kernel_->InferShapes(in_dims_, &out_dims_));
    if (out_dims_.size() < node_.outputs.size())
      return Status::Internal("fewer output shapes than outputs");
    in.assign(in_dims_.size(), {});
    for (size_t i = 0; i < in_dims_.size(); ++i)
      if (!node_.inputs[i].empty()) in[i].assign(NumElements(in_dims_[i]), 0.0f);
    out.assign(node_.outputs.size(), {});
    for (size_t o = 0; o < node_.outputs.size(); ++o)
      if (!node_.outputs[o].empty())
        out[o].assign(NumElements(out_dims_[o]), std::numeric_limits<float>::quiet_NaN());
    workspace_.assign(kernel_->WorkspaceFloats(in_dims_, out_dims_),
                      std::numeric_limits<float>::quiet_NaN());
    return Status::OK();
  }

  OpKernel& kernel() { return *kernel_; }
  const Dims& out_dims(size_t o) const { return out_dims_[o]; }
  size_t num_inputs() const { return in.size(); }

  Status Forward(bool training) {
    KernelCall c = Call(training);
    return kernel_->Forward(c);
  }

  // Backward with output gradients `r` (empty: none); din[i] is allocated, prefilled with
  // `fill`, for the inputs in `want` and null otherwise. `overwrite`: the call's
  // overwrite_input.
  std::vector<Floats> Backward(const std::vector<Floats>& r, const std::vector<size_t>& want,
                               float fill, bool training, std::vector<bool> overwrite = {}) {
    std::vector<Floats> din(in.size());
    KernelCall c = Call(training);
    c.overwrite_input = std::move(overwrite);
    for (size_t i = 0; i < in.size(); ++i)
      if (std::find(want.begin(), want.end(), i) != want.end()) {
        din[i].assign(in[i].size(), fill);
        c.din[i] = din[i].data();
      }
    for (size_t o = 0; o < out.size() && o < r.size(); ++o)
      if (!r[o].empty()) c.dout[o] = r[o].data();
    kernel_->Backward(c);
    return din;
  }

  // sum_o sum_i out[o][i] * r[o][i], in double.
  double Loss(const std::vector<Floats>& r) const {
    double l = 0.0;
    for (size_t o = 0; o < out.size() && o < r.size(); ++o)
      for (size_t i = 0; i < r[o].size(); ++i) l += double(out[o][i]) * r[o][i];
    return l;
  }

  std::vector<Floats> in, out;

 private:
  KernelCall Call(bool training) {
    KernelCall c;
    c.be = be_.get();
    for (size_t i = 0; i < in.size(); ++i) {
      c.in.push_back(in[i].empty() ? nullptr : in[i].data());
      c.in_dims.push_back(&in_dims_[i]);
      c.din.push_back(nullptr);
    }
    for (size_t o = 0; o < out.size(); ++o) {
      c.out.push_back(out[o].empty() ? nullptr : out[o].data());
      c.out_dims.push_back(&out_dims_[o]);
      c.dout.push_back(nullptr);
    }
    c.workspace = workspace_.data();
    c.training = training;
    return c;
  }

  std::unique_ptr<Backend> be_;
  Node node_;
  std::unique_ptr<OpKernel> kernel_;
  std::vector<Dims> in_dims_, out_dims_;
  Floats workspace_;
};

bool Close(double analytic, double numeric, double atol = 2e-3, double rtol = 2e-2) {
  return std::abs(analytic - numeric) <= atol + rtol * std::abs(numeric);
}

// Checks the analytic gradient of every input in `want` against central differences of
// run.Loss(r), and that Backward adds to what din already holds. Leaves the inputs as they
// were. `eps` must not cross a decision (max-pool argmax) of the kernel.
void CheckGradients(KernelRun& run, const std::vector<Floats>& r, const std::vector<size_t>& want,
                    bool training, float eps = 1e-2f) {
  ASSERT_TRUE(run.Forward(training).ok());
  const std::vector<Floats> grad = run.Backward(r, want, 0.0f, training);
  const std::vector<Floats> grad_plus_one = run.Backward(r, want, 1.0f, training);
  // Inputs the kernel may overwrite (a parameter or an activation with one reader): prefilled NaN, overwritten
  // with the same gradient.
  std::vector<bool> overwrite(run.num_inputs(), false);
  for (size_t i : want) overwrite[i] = run.kernel().CanStepInput(i) || run.kernel().CanOverwriteInputGradient(i);
  const std::vector<Floats> grad_over =
      run.Backward(r, want, std::nanf(""), training, overwrite);
  for (size_t i : want) {
    if (overwrite[i]) {
      EXPECT_EQ(grad_over[i], grad[i]) << "input " << i << " overwritten";
    }
    int bad = 0;
    for (size_t j = 0; j < run.in[i].size(); ++j) {
      // Accumulation: din prefilled with 1 gets 1 + grad.
      if (std::abs(grad_plus_one[i][j] - (1.0f + grad[i][j])) >
          1e-5f * (1.0f + std::abs(grad[i][j])))
        ADD_FAILURE() << "input " << i << " element " << j << ": prefilled 1 + grad " << grad[i][j]
                      << " gave " << grad_plus_one[i][j];
      const float v = run.in[i][j];
      run.in[i][j] = v + eps;
      ASSERT_TRUE(run.Forward(training).ok());
      const double lp = run.Loss(r);
      run.in[i][j] = v - eps;
      ASSERT_TRUE(run.Forward(training).ok());
      const double lm = run.Loss(r);
      run.in[i][j] = v;
      const double numeric = (lp - lm) / (2.0 * eps);
      if (!Close(grad[i][j], numeric) && ++bad <= 5)
        ADD_FAILURE() << "input " << i << " element " << j << ": analytic " << grad[i][j]
                      << " vs numeric " << numeric;
    }
    EXPECT_EQ(bad, 0) << "mismatched gradient elements of input " << i;
  }
}

std::vector<Floats> RandomGrads(KernelRun& run, const std::vector<size_t>& outputs, uint64_t seed) {
  std::vector<Floats> r(run.out.size());
  for (size_t o : outputs) r[o] = RandomVector(run.out[o].size(), seed + o);
  return r;
}

void ExpectAllNear(const Floats& got, const std::vector<double>& want, double tol,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i]))) && ++bad <= 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

// ---- Conv ---------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  int64_t n, c, h, w, m, kh, kw;
  int64_t sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;  // effective pads, for the reference
  int64_t group = 1;
  bool bias = true;
  bool one_d = false;         // X [N,C,W], attributes 1-D (h, kh, sh, dh, pt, pb unused)
  std::string auto_pad = "";  // when set, pads are not passed as an attribute
  int threads = 1;
};

std::vector<double> ReferenceConv(const ConvCase& k, const Floats& x, const Floats& w,
                                  const Floats* b, int64_t oh_n, int64_t ow_n) {
  const int64_t cg = k.c / k.group, mg = k.m / k.group;
  std::vector<double> y(k.n * k.m * oh_n * ow_n);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t m = 0; m < k.m; ++m)
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          double s = b ? (*b)[m] : 0.0;
          const int64_t g = m / mg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t ih = oh * k.sh - k.pt + i * k.dh;
                const int64_t iw = ow * k.sw - k.pl + j * k.dw;
                if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                s += double(x[((n * k.c + g * cg + ci) * k.h + ih) * k.w + iw]) *
                     w[((m * cg + ci) * k.kh + i) * k.kw + j];
              }
          y[((n * k.m + m) * oh_n + oh) * ow_n + ow] = s;
        }
  return y;
}

void PrintTo(const ConvCase& k, std::ostream* os) { *os << k.name; }

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

// The CPU convolutions to check: im2col always, oneDNN where built.
std::vector<ops::CpuConvEngine> ConvEngines() {
  std::vector<ops::CpuConvEngine> e = {ops::CpuConvEngine::kIm2col};
  if (ops::DnnlConvBuilt()) e.push_back(ops::CpuConvEngine::kDnnl);
  return e;
}

// Kernels created in its lifetime use `engine`.
class ScopedConvEngine {
 public:
  explicit ScopedConvEngine(ops::CpuConvEngine engine) : saved_(ops::GetCpuConvEngine()) {
    ops::SetCpuConvEngine(engine);
  }
  ~ScopedConvEngine() { ops::SetCpuConvEngine(saved_); }

 private:
  ops::CpuConvEngine saved_;
};

void CheckConv(ConvCase k);

TEST_P(ConvTest, ForwardMatchesReferenceAndGradientsMatchFiniteDifferences) {
  for (ops::CpuConvEngine engine : ConvEngines()) {
    SCOPED_TRACE(engine == ops::CpuConvEngine::kDnnl ? "oneDNN" : "im2col");
    const ScopedConvEngine use(engine);
    CheckConv(GetParam());
  }
}

void CheckConv(ConvCase k) {
  if (k.one_d) k.h = k.kh = k.sh = k.dh = 1, k.pt = k.pb = 0;
  std::map<std::string, Attribute> attrs;
  if (k.one_d) {
    attrs["strides"] = IntsAttr({k.sw});
    attrs["dilations"] = IntsAttr({k.dw});
    attrs["kernel_shape"] = IntsAttr({k.kw});
    if (k.auto_pad.empty()) attrs["pads"] = IntsAttr({k.pl, k.pr});
  } else {
    attrs["strides"] = IntsAttr({k.sh, k.sw});
    attrs["dilations"] = IntsAttr({k.dh, k.dw});
    attrs["kernel_shape"] = IntsAttr({k.kh, k.kw});
    if (k.auto_pad.empty()) attrs["pads"] = IntsAttr({k.pt, k.pl, k.pb, k.pr});
  }
  if (!k.auto_pad.empty()) attrs["auto_pad"] = StringAttr(k.auto_pad);
  if (k.group != 1) attrs["group"] = IntAttr(k.group);
  const Dims xd = k.one_d ? Dims{k.n, k.c, k.w} : Dims{k.n, k.c, k.h, k.w};
  const Dims wd = k.one_d ? Dims{k.m, k.c / k.group, k.kw} : Dims{k.m, k.c / k.group, k.kh, k.kw};
  std::vector<Dims> in_dims = {xd, wd};
  std::vector<std::string> inputs = {"x", "w"};
  if (k.bias) {
    in_dims.push_back({k.m});
    inputs.push_back("b");
  }
  KernelRun run;
  ASSERT_TRUE(
      run.Init(ops::MakeConv, MakeNode("Conv", inputs, {"y"}, attrs), in_dims, k.threads).ok());
  const int64_t oh = (k.h + k.pt + k.pb - k.dh * (k.kh - 1) - 1) / k.sh + 1;
  const int64_t ow = (k.w + k.pl + k.pr - k.dw * (k.kw - 1) - 1) / k.sw + 1;
  EXPECT_EQ(run.out_dims(0), k.one_d ? Dims({k.n, k.m, ow}) : Dims({k.n, k.m, oh, ow}));
  run.in[0] = RandomVector(run.in[0].size(), 1);
  run.in[1] = RandomVector(run.in[1].size(), 2);
  if (k.bias) run.in[2] = RandomVector(run.in[2].size(), 3);
  ASSERT_TRUE(run.Forward(false).ok());
  ExpectAllNear(run.out[0],
                ReferenceConv(k, run.in[0], run.in[1], k.bias ? &run.in[2] : nullptr, oh, ow), 1e-5,
                "Y");
  std::vector<size_t> want = {0, 1};
  if (k.bias) want.push_back(2);
  CheckGradients(run, RandomGrads(run, {0}, 7), want, true);
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Configs, ConvTest,
    ::testing::Values(
        //        name            n  c  h  w  m kh kw sh sw dh dw pt pl pb pr
        ConvCase{"Pad1", 2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        // Rows as wide out as in (Im2Col's block copy) with padding on one side only and
        // dilated rows.
        ConvCase{"SameWidthOneSidedPadsDilatedRows", 1, 2, 7, 6, 2, 3, 3, 1, 1, 2, 1, 2, 0, 2, 2},
        // Stride 1 without padding and a 3 x 2 kernel: dX as a convolution of dY with the
        // flipped kernel, padded by its reach.
        ConvCase{"ValidStride1NonSquareKernel", 2, 3, 6, 7, 2, 3, 2, 1, 1, 1, 1, 0, 0, 0, 0},
        ConvCase{"Stride2AsymPads", 2, 2, 7, 5, 3, 3, 2, 2, 2, 1, 1, 1, 0, 0, 1},
        ConvCase{"Dilation2", 1, 2, 7, 8, 3, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},
        ConvCase{"Groups2NoBias", 2, 4, 5, 5, 6, 3, 3, 1, 2, 1, 1, 1, 1, 1, 1, 2, false},
        ConvCase{"Depthwise", 1, 3, 6, 5, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 3},
        ConvCase{"OneByOne", 2, 3, 4, 5, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
        ConvCase{"OneByOneStride2", 1, 3, 5, 5, 2, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0},
        ConvCase{"OddKernelOddSizes", 3, 1, 9, 7, 2, 5, 3, 3, 2, 1, 1, 2, 0, 1, 1},
        ConvCase{"SameUpper", 1, 2, 6, 6, 2, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 1, true, false,
                 "SAME_UPPER"},
        ConvCase{"SameLower", 1, 2, 6, 6, 2, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1, true, false,
                 "SAME_LOWER"},
        ConvCase{"Valid", 1, 2, 6, 7, 2, 3, 2, 2, 1, 1, 1, 0, 0, 0, 0, 1, true, false, "VALID"},
        ConvCase{"OneD", 2, 3, 0, 11, 4, 0, 3, 0, 2, 0, 2, 0, 1, 0, 2, 1, true, true},
        ConvCase{"TwoThreads", 3, 4, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true, false, "",
                 2},
        ConvCase{"TwoThreadsOneByOne", 3, 4, 5, 4, 6, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, true,
                 false, "", 2}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });
// clang-format on

TEST(ConvShapes, WrongShapesFailNamingTheNodeAndTheShapes) {
  const Node n = MakeNode("Conv", {"x", "w", "b"}, {"y"});
  auto k = Create(ops::MakeConv, n);
  ASSERT_TRUE(k.ok());
  std::vector<Dims> out;
  Status s = (*k)->InferShapes({{1, 4, 5, 5}, {6, 3, 3, 3}, {6}}, &out);
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "node 'k' (Conv)"));
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "[1,4,5,5]"));
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "[6,3,3,3]"));
  EXPECT_TRUE(HasCode((*k)->InferShapes({{1, 3, 5, 5}, {6, 3, 3, 3}, {5}}, &out),
                      StatusCode::kInvalidArgument, "bias"));
  EXPECT_TRUE(HasCode((*k)->InferShapes({{1, 3, 5, 5, 5}, {6, 3, 3, 3, 3}, {6}}, &out),
                      StatusCode::kInvalidArgument, "[1,3,5,5,5]"));
  EXPECT_TRUE(HasCode((*k)->InferShapes({{1, 3, 2, 5}, {6, 3, 3, 3}, {6}}, &out),
                      StatusCode::kInvalidArgument, "larger than the padded input"));
  ASSERT_TRUE((*k)->InferShapes({{2, 3, 5, 5}, {6, 3, 3, 3}, {6}}, &out).ok());
  EXPECT_EQ(out, std::vector<Dims>({{2, 6, 3, 3}}));

  auto ks = Create(ops::MakeConv,
                   MakeNode("Conv", {"x", "w"}, {"y"}, {{"kernel_shape", IntsAttr({2, 2})}}));
  ASSERT_TRUE(ks.ok());
  EXPECT_TRUE(HasCode((*ks)->InferShapes({{1, 3, 5, 5}, {6, 3, 3, 3}}, &out),
                      StatusCode::kInvalidArgument, "kernel_shape [2,2] does not match W"));
  auto g = Create(ops::MakeConv, MakeNode("Conv", {"x", "w"}, {"y"}, {{"group", IntAttr(2)}}));
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(HasCode((*g)->InferShapes({{1, 4, 5, 5}, {5, 2, 3, 3}}, &out),
                      StatusCode::kInvalidArgument, "group 2"));
  auto st =
      Create(ops::MakeConv, MakeNode("Conv", {"x", "w"}, {"y"}, {{"strides", IntsAttr({1, 1})}}));
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(HasCode((*st)->InferShapes({{1, 3, 5}, {6, 3, 3}}, &out),
                      StatusCode::kInvalidArgument, "strides [1,1]"));
}

TEST(ConvShapes, BadAttributesFailAtCreation) {
  EXPECT_TRUE(HasCode(
      Create(ops::MakeConv, MakeNode("Conv", {"x", "w"}, {"y"}, {{"auto_pad", StringAttr("FOO")}}))
          .status(),
      StatusCode::kInvalidArgument, "node 'k' (Conv): unknown auto_pad 'FOO'"));
  EXPECT_TRUE(HasCode(Create(ops::MakeConv, MakeNode("Conv", {"x", "w"}, {"y"},
                                                     {{"kernel_shape", IntsAttr({3, 3, 3})}}))
                          .status(),
                      StatusCode::kUnimplemented, "node 'k' (Conv)"));
  EXPECT_TRUE(HasCode(
      Create(ops::MakeConv, MakeNode("Conv", {"x", "w"}, {"y"}, {{"strides", IntsAttr({0, 1})}}))
          .status(),
      StatusCode::kInvalidArgument, "strides"));
  EXPECT_TRUE(HasCode(Create(ops::MakeConv, MakeNode("Conv", {"x"}, {"y"})).status(),
                      StatusCode::kInvalidArgument, "node 'k' (Conv)"));
}

// A hand-computed case, independent of the reference loop above: 1-D, stride 2, pad 1.
TEST(ConvValues, OneDimensionalHandComputed) {
  KernelRun run;
  ASSERT_TRUE(run.Init(ops::MakeConv,
                       MakeNode("Conv", {"x", "w", "b"}, {"y"},
                                {{"strides", IntsAttr({2})}, {"pads", IntsAttr({1, 1})}}),
                       {{1, 1, 5}, {1, 1, 3}, {1}})
                  .ok());
  run.in[0] = {1, 2, 3, 4, 5};
  run.in[1] = {1, 10, 100};
  run.in[2] = {0.5f};
  ASSERT_TRUE(run.Forward(false).ok());
  // windows [pad,1,2], [2,3,4], [4,5,pad]
  EXPECT_EQ(run.out_dims(0), Dims({1, 1, 3}));
  EXPECT_EQ(run.out[0], Floats({210.5f, 432.5f, 54.5f}));
}

// ---- Pooling ------------------------------------------------------------------------------

struct PoolCase {
  std::string name;
  int64_t n, c, h, w, kh, kw, sh, sw, pt, pl, pb, pr;
  bool ceil_mode;
  int64_t oh, ow;  // expected output size (worked out by hand from PyTorch's formula)
  bool one_d = false;
};

std::map<std::string, Attribute> PoolAttrs(const PoolCase& k) {
  std::map<std::string, Attribute> a;
  if (k.one_d) {
    a["kernel_shape"] = IntsAttr({k.kw});
    a["strides"] = IntsAttr({k.sw});
    a["pads"] = IntsAttr({k.pl, k.pr});
  } else {
    a["kernel_shape"] = IntsAttr({k.kh, k.kw});
    a["strides"] = IntsAttr({k.sh, k.sw});
    a["pads"] = IntsAttr({k.pt, k.pl, k.pb, k.pr});
  }
  a["ceil_mode"] = IntAttr(k.ceil_mode ? 1 : 0);
  return a;
}

// kind 0: max; 1: average excluding padding; 2: average including padding (but not the
// overhang of a ceil_mode window past the end padding).
std::vector<double> ReferencePool(const PoolCase& k, const Floats& x, int kind) {
  std::vector<double> y;
  for (int64_t p = 0; p < k.n * k.c; ++p)
    for (int64_t oh = 0; oh < k.oh; ++oh)
      for (int64_t ow = 0; ow < k.ow; ++ow) {
        double best = -INFINITY, sum = 0.0;
        int64_t inside = 0, padded = 0;
        for (int64_t i = 0; i < k.kh; ++i)
          for (int64_t j = 0; j < k.kw; ++j) {
            const int64_t ih = oh * k.sh - k.pt + i, iw = ow * k.sw - k.pl + j;
            if (ih < k.h + k.pb && iw < k.w + k.pr) ++padded;
            if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
            const double v = x[(p * k.h + ih) * k.w + iw];
            best = std::max(best, v);
            sum += v;
            ++inside;
          }
        y.push_back(kind == 0 ? best : sum / (kind == 1 ? inside : padded));
      }
  return y;
}

std::vector<Dims> PoolInDims(const PoolCase& k) {
  return {k.one_d ? Dims{k.n, k.c, k.w} : Dims{k.n, k.c, k.h, k.w}};
}
Dims PoolOutDims(const PoolCase& k) {
  return k.one_d ? Dims{k.n, k.c, k.ow} : Dims{k.n, k.c, k.oh, k.ow};
}

// Distinct values at least 0.05 apart, so a +-0.01 perturbation never moves an argmax.
Floats Separated(size_t n, uint64_t seed) {
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(seed);
  rng.Shuffle(perm);
  Floats v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.05f * static_cast<float>(perm[i]) - 1.0f;
  return v;
}

void PrintTo(const PoolCase& k, std::ostream* os) { *os << k.name; }

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, MaxPoolMatchesReferenceAndFiniteDifferences) {
  PoolCase k = GetParam();
  if (k.one_d) k.h = k.kh = k.sh = k.oh = 1, k.pt = k.pb = 0;
  KernelRun run;
  ASSERT_TRUE(
      run.Init(ops::MakeMaxPool, MakeNode("MaxPool", {"x"}, {"y"}, PoolAttrs(k)), PoolInDims(k))
          .ok());
  ASSERT_EQ(run.out_dims(0), PoolOutDims(k));
  run.in[0] = Separated(run.in[0].size(), 11);
  ASSERT_TRUE(run.Forward(false).ok());
  ExpectAllNear(run.out[0], ReferencePool(k, run.in[0], 0), 0.0, "Y");
  CheckGradients(run, RandomGrads(run, {0}, 12), {0}, true);
}

TEST_P(PoolTest, AveragePoolMatchesReferenceAndFiniteDifferences) {
  PoolCase k = GetParam();
  if (k.one_d) k.h = k.kh = k.sh = k.oh = 1, k.pt = k.pb = 0;
  for (int include_pad : {0, 1}) {
    SCOPED_TRACE("count_include_pad " + std::to_string(include_pad));
    auto attrs = PoolAttrs(k);
    attrs["count_include_pad"] = IntAttr(include_pad);
    KernelRun run;
    ASSERT_TRUE(
        run.Init(ops::MakeAveragePool, MakeNode("AveragePool", {"x"}, {"y"}, attrs), PoolInDims(k))
            .ok());
    ASSERT_EQ(run.out_dims(0), PoolOutDims(k));
    run.in[0] = RandomVector(run.in[0].size(), 13);
    ASSERT_TRUE(run.Forward(false).ok());
    ExpectAllNear(run.out[0], ReferencePool(k, run.in[0], 1 + include_pad), 1e-5, "Y");
    CheckGradients(run, RandomGrads(run, {0}, 14), {0}, true);
  }
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Configs, PoolTest,
    ::testing::Values(
        //        name        n  c  h  w kh kw sh sw pt pl pb pr ceil  oh ow
        PoolCase{"K2S2", 2, 3, 6, 5, 2, 2, 2, 2, 0, 0, 0, 0, false, 3, 2},
        PoolCase{"K3S2Pad1", 1, 2, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, false, 4, 3},
        PoolCase{"CeilMode", 1, 2, 6, 8, 3, 3, 2, 2, 0, 0, 0, 0, true, 3, 4},
        // ceil would give 4, but the 4th window would start in the end padding: 3.
        PoolCase{"CeilModeDropsWindowInPadding", 1, 1, 5, 5, 2, 2, 2, 2, 1, 1, 1, 1, true, 3, 3},
        PoolCase{"CeilModeWithPads", 1, 2, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, true, 4, 4},
        PoolCase{"AsymmetricPads", 2, 1, 5, 6, 3, 2, 1, 2, 1, 0, 0, 1, false, 4, 3},
        PoolCase{"OneD", 2, 3, 0, 9, 0, 3, 0, 2, 0, 1, 0, 1, true, 0, 5, true}),
    [](const ::testing::TestParamInfo<PoolCase>& info) { return info.param.name; });
// clang-format on

TEST(PoolValues, HandComputedCeilModeWindows) {
  // AveragePool 1-D, k 3, s 2, pads 1, ceil: windows [pad,1,2], [2,3,4], [4,pad] (the third
  // window's overhang past the end padding never counts).
  for (int include_pad : {0, 1}) {
    KernelRun run;
    ASSERT_TRUE(run.Init(ops::MakeAveragePool,
                         MakeNode("AveragePool", {"x"}, {"y"},
                                  {{"kernel_shape", IntsAttr({3})},
                                   {"strides", IntsAttr({2})},
                                   {"pads", IntsAttr({1, 1})},
                                   {"ceil_mode", IntAttr(1)},
                                   {"count_include_pad", IntAttr(include_pad)}}),
                         {{1, 1, 4}})
                    .ok());
    run.in[0] = {1, 2, 3, 4};
    ASSERT_TRUE(run.Forward(false).ok());
    EXPECT_EQ(run.out[0], include_pad ? Floats({1.0f, 3.0f, 2.0f}) : Floats({1.5f, 3.0f, 4.0f}));
  }
  for (int ceil : {0, 1}) {
    KernelRun run;
    ASSERT_TRUE(run.Init(ops::MakeMaxPool,
                         MakeNode("MaxPool", {"x"}, {"y", ""},
                                  {{"kernel_shape", IntsAttr({2})},
                                   {"strides", IntsAttr({2})},
                                   {"ceil_mode", IntAttr(ceil)}}),
                         {{1, 1, 5}})
                    .ok());
    run.in[0] = {1, 3, 2, 5, 4};
    ASSERT_TRUE(run.Forward(false).ok());
    EXPECT_EQ(run.out[0], ceil ? Floats({3, 5, 4}) : Floats({3, 5}));
    // The gradient goes to the argmax only.
    auto din = run.Backward({{1, 10, 100}}, {0}, 0.0f, true);
    EXPECT_EQ(din[0], ceil ? Floats({0, 1, 0, 10, 100}) : Floats({0, 1, 0, 10, 0}));
  }
}

// The 2x2 stride-2 fast path (the ResNet's pool) picks as the general loop does: the first
// of equal maxima, and a NaN anywhere in the window, as PyTorch does.
TEST(PoolValues, MaxPoolTiesAndNaNOnTheTwoByTwoPath) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  KernelRun run;
  ASSERT_TRUE(run.Init(ops::MakeMaxPool,
                       MakeNode("MaxPool", {"x"}, {"y"},
                                {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({2, 2})}}),
                       {{1, 1, 4, 5}})
                  .ok());
  // Windows (row-major): {1, nan, 3, 0}, {2, 2, 1, 1}, {nan, 5, 5, 4}, {0, 7, 7, 0}; the
  // fifth column is left out (floor).
  run.in[0] = {1, nan, 2, 2, 9,  //
               3, 0,   1, 1, 9,  //
               nan, 5, 0, 7, 9,  //
               5, 4,   7, 0, 9};
  ASSERT_TRUE(run.Forward(false).ok());
  ASSERT_EQ(run.out[0].size(), 4u);
  EXPECT_TRUE(std::isnan(run.out[0][0]));
  EXPECT_EQ(run.out[0][1], 2.0f);
  EXPECT_TRUE(std::isnan(run.out[0][2]));
  EXPECT_EQ(run.out[0][3], 7.0f);
  const auto din = run.Backward({{1, 10, 100, 1000}}, {0}, 0.0f, true);
  EXPECT_EQ(din[0], Floats({0, 1, 10, 0, 0,  //
                            0, 0, 0, 0, 0,   //
                            100, 0, 0, 1000, 0, 0, 0, 0, 0, 0}));
}

// The 2x2 path's vector loop (eight outputs a step) and scalar tail against the rule written
// out: 37 columns give 18 outputs a row (two vector steps and a tail of 2); values drawn
// from a few levels so windows tie, and NaNs sprinkled in. The argmax is read back through
// Backward with a distinct gradient per output.
TEST(PoolValues, MaxPoolTwoByTwoVectorLoopMatchesTheRule) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t planes = 6, H = 7, W = 37, OH = 3, OW = 18;
  KernelRun run;
  ASSERT_TRUE(run.Init(ops::MakeMaxPool,
                       MakeNode("MaxPool", {"x"}, {"y"},
                                {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({2, 2})}}),
                       {{2, 3, H, W}})
                  .ok());
  for (size_t i = 0; i < run.in[0].size(); ++i) {
    const uint32_t h = static_cast<uint32_t>(i * 2654435761u) >> 7;
    run.in[0][i] = h % 29 == 0 ? nan : static_cast<float>(h % 5) - 2.0f;
  }
  ASSERT_TRUE(run.Forward(false).ok());
  ASSERT_EQ(run.out[0].size(), static_cast<size_t>(planes * OH * OW));
  Floats dy(run.out[0].size());
  for (size_t o = 0; o < dy.size(); ++o) dy[o] = static_cast<float>(o + 1);
  const auto din = run.Backward({dy}, {0}, 0.0f, true);
  Floats want_dx(run.in[0].size(), 0.0f);
  int nans = 0;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t base = p * H * W;
        const int64_t at[4] = {(2 * oh) * W + 2 * ow, (2 * oh) * W + 2 * ow + 1, (2 * oh + 1) * W + 2 * ow,
                               (2 * oh + 1) * W + 2 * ow + 1};
        int64_t best_at = at[0];
        float best = run.in[0][base + at[0]];
        for (int j = 1; j < 4; ++j) {
          const float v = run.in[0][base + at[j]];
          if (v > best || std::isnan(v)) best = v, best_at = at[j];
        }
        const int64_t o = (p * OH + oh) * OW + ow;
        if (std::isnan(best)) {
          ++nans;
          EXPECT_TRUE(std::isnan(run.out[0][o])) << o;
        } else {
          EXPECT_EQ(run.out[0][o], best) << o;
        }
        want_dx[base + best_at] += dy[o];
      }
  EXPECT_GT(nans, 3);
  EXPECT_EQ(din[0], want_dx);
}

TEST(PoolValues, GlobalAveragePool) {
  KernelRun run;
  ASSERT_TRUE(run.Init(ops::MakeGlobalAveragePool, MakeNode("GlobalAveragePool", {"x"}, {"y"}),
                       {{2, 3, 4, 5}}, 2)
                  .ok());
  EXPECT_EQ(run.out_dims(0), Dims({2, 3, 1, 1}));
  run.in[0] = RandomVector(run.in[0].size(), 21);
  ASSERT_TRUE(run.Forward(false).ok());
  std::vector<double> want;
  for (int p = 0; p < 6; ++p)
    want.push_back(
        std::accumulate(run.in[0].begin() + p * 20, run.in[0].begin() + (p + 1) * 20, 0.0) / 20.0);
  ExpectAllNear(run.out[0], want, 1e-6, "Y");
  CheckGradients(run, RandomGrads(run, {0}, 22), {0}, true);
  std::vector<Dims> out;
  EXPECT_TRUE(HasCode(run.kernel().InferShapes({{2, 3}}, &out), StatusCode::kInvalidArgument,
                      "node 'k' (GlobalAveragePool)"));
}

TEST(PoolShapes, UnsupportedAndWrongAttributesFail) {
  const std::map<std::string, Attribute> k2 = {{"kernel_shape", IntsAttr({2, 2})}};
  EXPECT_TRUE(
      HasCode(Create(ops::MakeMaxPool, MakeNode("MaxPool", {"x"}, {"y", "idx"}, k2)).status(),
              StatusCode::kUnimplemented, "node 'k' (MaxPool): the Indices output"));
  auto dil = k2;
  dil["dilations"] = IntsAttr({2, 2});
  EXPECT_TRUE(HasCode(Create(ops::MakeMaxPool, MakeNode("MaxPool", {"x"}, {"y"}, dil)).status(),
                      StatusCode::kUnimplemented, "dilations"));
  EXPECT_TRUE(HasCode(Create(ops::MakeAveragePool, MakeNode("AveragePool", {"x"}, {"y"})).status(),
                      StatusCode::kInvalidArgument, "kernel_shape"));
  auto pads = k2;
  pads["pads"] = IntsAttr({2, 0, 0, 0});
  auto k = Create(ops::MakeMaxPool, MakeNode("MaxPool", {"x"}, {"y"}, pads));
  ASSERT_TRUE(k.ok());
  std::vector<Dims> out;
  EXPECT_TRUE(HasCode((*k)->InferShapes({{1, 1, 5, 5}}, &out), StatusCode::kInvalidArgument,
                      "smaller than kernel_shape"));
  auto ok = Create(ops::MakeMaxPool, MakeNode("MaxPool", {"x"}, {"y"}, k2));
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(
      HasCode((*ok)->InferShapes({{1, 5, 5}}, &out), StatusCode::kInvalidArgument, "[1,5,5]"));
  EXPECT_TRUE(HasCode((*ok)->InferShapes({{1, 1, 1, 5}}, &out), StatusCode::kInvalidArgument,
                      "node 'k' (MaxPool)"));
}

// ---- BatchNormalization ---------------------------------------------------------------------

Node BatchNormNode(std::vector<std::string> outputs, float momentum) {
  return MakeNode("BatchNormalization", {"x", "scale", "b", "mean", "var"}, std::move(outputs),
                  {{"momentum", FloatAttr(momentum)}});
}

// X [N=2, C=2, L=2]: channel 0 holds {1,2,3,6} (mean 3, squared deviations 14), channel 1
// holds {0,4,2,-2} (mean 1, squared deviations 20).
void FillBatchNorm(KernelRun& run) {
  run.in[0] = {1, 2, 0, 4, 3, 6, 2, -2};
  run.in[1] = {2.0f, 0.5f};
  run.in[2] = {1.0f, -1.0f};
  run.in[3] = {0.5f, -1.0f};
  run.in[4] = {1.0f, 2.0f};
}

TEST(BatchNorm, TrainingUsesBatchStatisticsAndUpdatesRunningOnesLikePyTorch) {
  KernelRun run;
  ASSERT_TRUE(run.Init(ops::MakeBatchNormalization,
                       BatchNormNode({"y", "rm", "rv", "sm", "sv"}, 0.8f),
                       {{2, 2, 2}, {2}, {2}, {2}, {2}})
                  .ok());
  EXPECT_TRUE(run.kernel().IsStateInput(3));
  EXPECT_TRUE(run.kernel().IsStateInput(4));
  EXPECT_FALSE(run.kernel().IsStateInput(0));
  EXPECT_FALSE(run.kernel().IsStateInput(1));
  FillBatchNorm(run);
  ASSERT_TRUE(run.Forward(true).ok());
  const double eps = 1e-5;
  const double mean[2] = {3.0, 1.0}, var[2] = {3.5, 5.0};
  const double scale[2] = {2.0, 0.5}, bias[2] = {1.0, -1.0};
  const double x[8] = {1, 2, 0, 4, 3, 6, 2, -2};
  std::vector<double> y;
  for (int i = 0; i < 8; ++i) {
    const int c = (i / 2) % 2;
    y.push_back(scale[c] * (x[i] - mean[c]) / std::sqrt(var[c] + eps) + bias[c]);
  }
  ExpectAllNear(run.out[0], y, 1e-6, "Y");
  // running = 0.8 * running + 0.2 * batch, with the unbiased variance (14/3, 20/3).
  ExpectAllNear(run.in[3], {0.8 * 0.5 + 0.2 * 3.0, 0.8 * -1.0 + 0.2 * 1.0}, 1e-6, "running_mean");
  ExpectAllNear(run.in[4], {0.8 * 1.0 + 0.2 * 14.0 / 3.0, 0.8 * 2.0 + 0.2 * 20.0 / 3.0}, 1e-6,
                "running_var");
  EXPECT_EQ(run.out[1], run.in[3]);
  EXPECT_EQ(run.out[2], run.in[4]);
  ExpectAllNear(run.out[3], {3.0, 1.0}, 1e-6, "saved_mean");
  ExpectAllNear(run.out[4], {3.5, 5.0}, 1e-6, "saved_var");
  // A second step moves the running statistics again.
  ASSERT_TRUE(run.Forward(true).ok());
  ExpectAllNear(run.in[3], {0.8 * 1.0 + 0.2 * 3.0, 0.8 * -0.6 + 0.2 * 1.0}, 1e-6,
                "running_mean after two steps");
}

TEST(BatchNorm, EvalUsesRunningStatisticsAndLeavesThemAlone) {
  KernelRun run;
  ASSERT_TRUE(run.Init(ops::MakeBatchNormalization, BatchNormNode({"y"}, 0.8f),
                       {{2, 2, 2}, {2}, {2}, {2}, {2}})
                  .ok());
  FillBatchNorm(run);
  ASSERT_TRUE(run.Forward(false).ok());
  const double rm[2] = {0.5, -1.0}, rv[2] = {1.0, 2.0};
  const double scale[2] = {2.0, 0.5}, bias[2] = {1.0, -1.0};
  std::vector<double> y;
  for (int i = 0; i < 8; ++i) {
    const int c = (i / 2) % 2;
    y.push_back(scale[c] * (run.in[0][i] - rm[c]) / std::sqrt(rv[c] + 1e-5) + bias[c]);
  }
  ExpectAllNear(run.out[0], y, 1e-6, "Y");
  EXPECT_EQ(run.in[3], Floats({0.5f, -1.0f}));
  EXPECT_EQ(run.in[4], Floats({1.0f, 2.0f}));
  // The frozen-statistics gradient: dX = dY * scale / sqrt(var + eps).
  CheckGradients(run, RandomGrads(run, {0}, 31), {0, 1, 2}, false);
}

TEST(BatchNorm, DefaultMomentumIsPointNine) {
  KernelRun run;
  ASSERT_TRUE(run.Init(ops::MakeBatchNormalization,
                       MakeNode("BatchNormalization", {"x", "scale", "b", "mean", "var"}, {"y"}),
                       {{2, 2, 2}, {2}, {2}, {2}, {2}})
                  .ok());
  FillBatchNorm(run);
  ASSERT_TRUE(run.Forward(true).ok());
  ExpectAllNear(run.in[3], {0.9 * 0.5 + 0.1 * 3.0, 0.9 * -1.0 + 0.1 * 1.0}, 1e-6, "running_mean");
}

TEST(BatchNorm, TrainingGradientsMatchFiniteDifferences) {
  for (const Dims& xd : {Dims{4, 3, 3, 2}, Dims{5, 3}}) {
    SCOPED_TRACE(DimsToString(xd));
    KernelRun run;
    ASSERT_TRUE(run.Init(ops::MakeBatchNormalization, BatchNormNode({"y", "rm", "rv"}, 0.9f),
                         {xd, {3}, {3}, {3}, {3}}, 2)
                    .ok());
    run.in[0] = RandomVector(run.in[0].size(), 41);
    for (float& v : run.in[0]) v = 2.0f * v + 0.5f;
    run.in[1] = {1.5f, -0.7f, 0.9f};
    run.in[2] = {0.1f, 0.2f, -0.3f};
    run.in[3] = {0, 0, 0};
    run.in[4] = {1, 1, 1};
    CheckGradients(run, RandomGrads(run, {0}, 42), {0, 1, 2}, true);
  }
}

TEST(BatchNorm, ShapeErrorsAndDegenerateBatches) {
  KernelRun run;
  Status s = run.Init(ops::MakeBatchNormalization, BatchNormNode({"y"}, 0.9f),
                      {{2, 2, 2}, {3}, {2}, {2}, {2}});
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "node 'k' (BatchNormalization): scale"));
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "[2,2,2]"));
  EXPECT_TRUE(HasCode(
      run.Init(ops::MakeBatchNormalization, BatchNormNode({"y"}, 0.9f), {{2}, {2}, {2}, {2}, {2}}),
      StatusCode::kInvalidArgument, "rank >= 2"));
  EXPECT_TRUE(HasCode(Create(ops::MakeBatchNormalization,
                             MakeNode("BatchNormalization", {"x", "scale", "b", "mean"}, {"y"}))
                          .status(),
                      StatusCode::kInvalidArgument, "node 'k' (BatchNormalization)"));
  KernelRun one;
  ASSERT_TRUE(one.Init(ops::MakeBatchNormalization, BatchNormNode({"y"}, 0.9f),
                       {{1, 2}, {2}, {2}, {2}, {2}})
                  .ok());
  one.in[1] = one.in[4] = {1, 1};
  EXPECT_TRUE(HasCode(one.Forward(true), StatusCode::kInvalidArgument, "more than one value"));
  EXPECT_TRUE(one.Forward(false).ok());  // eval on one sample is fine
}

// ---- LayerNormalization ---------------------------------------------------------------------

std::vector<double> ReferenceLayerNorm(const Floats& x, const Floats& scale, const Floats* b,
                                       int64_t rows, int64_t len, double eps,
                                       std::vector<double>* mean, std::vector<double>* inv) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < len; ++j) m += x[r * len + j];
    m /= len;
    for (int64_t j = 0; j < len; ++j) v += (x[r * len + j] - m) * (x[r * len + j] - m);
    const double is = 1.0 / std::sqrt(v / len + eps);
    for (int64_t j = 0; j < len; ++j)
      y[r * len + j] = (x[r * len + j] - m) * is * scale[j] + (b ? (*b)[j] : 0.0);
    mean->push_back(m);
    inv->push_back(is);
  }
  return y;
}

TEST(LayerNorm, ForwardMatchesReferenceWithStatisticsOutputs) {
  // axis 1 of [2,3,4]: rows of 12; axis -1: rows of 4.
  for (int64_t axis : {int64_t{1}, int64_t{-1}}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    const Dims norm = axis == 1 ? Dims{3, 4} : Dims{4};
    const int64_t len = NumElements(norm), rows = 24 / len;
    KernelRun run;
    ASSERT_TRUE(run.Init(ops::MakeLayerNormalization,
                         MakeNode("LayerNormalization", {"x", "s", "b"}, {"y", "mean", "inv"},
                                  {{"axis", IntAttr(axis)}, {"epsilon", FloatAttr(1e-3f)}}),
                         {{2, 3, 4}, norm, norm})
                    .ok());
    EXPECT_EQ(run.out_dims(1), axis == 1 ? Dims({2, 1, 1}) : Dims({2, 3, 1}));
    EXPECT_EQ(run.out_dims(2), run.out_dims(1));
    run.in[0] = RandomVector(24, 51);
    run.in[1] = RandomVector(len, 52);
    run.in[2] = RandomVector(len, 53);
    ASSERT_TRUE(run.Forward(true).ok());
    std::vector<double> mean, inv;
    ExpectAllNear(
        run.out[0],
        ReferenceLayerNorm(run.in[0], run.in[1], &run.in[2], rows, len, 1e-3, &mean, &inv), 1e-5,
        "Y");
    ExpectAllNear(run.out[1], mean, 1e-6, "Mean");
    ExpectAllNear(run.out[2], inv, 1e-5, "InvStdDev");
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  {
    SCOPED_TRACE("with B, gradients into Mean and InvStdDev too");
    KernelRun run;
    ASSERT_TRUE(run.Init(ops::MakeLayerNormalization,
                         MakeNode("LayerNormalization", {"x", "s", "b"}, {"y", "mean", "inv"}),
                         {{3, 2, 5}, {5}, {5}}, 2)
                    .ok());
    run.in[0] = RandomVector(30, 61);
    run.in[1] = RandomVector(5, 62);
    run.in[2] = RandomVector(5, 63);
    CheckGradients(run, RandomGrads(run, {0, 1, 2}, 64), {0, 1, 2}, true);
  }
  {
    SCOPED_TRACE("no B, axis 1, Mean output unnamed");
    KernelRun run;
    ASSERT_TRUE(
        run.Init(ops::MakeLayerNormalization,
                 MakeNode("LayerNormalization", {"x", "s"}, {"y", ""}, {{"axis", IntAttr(1)}}),
                 {{2, 3, 3}, {3, 3}})
            .ok());
    run.in[0] = RandomVector(18, 65);
    run.in[1] = RandomVector(9, 66);
    CheckGradients(run, RandomGrads(run, {0}, 67), {0, 1}, true);
  }
}

TEST(LayerNorm, ShapeErrorsNameTheNode) {
  KernelRun run;
  Status s =
      run.Init(ops::MakeLayerNormalization, MakeNode("LayerNormalization", {"x", "s", "b"}, {"y"}),
               {{2, 3, 4}, {3}, {4}});
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "node 'k' (LayerNormalization): Scale [3]"));
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "[2,3,4]"));
  EXPECT_TRUE(
      HasCode(run.Init(ops::MakeLayerNormalization,
                       MakeNode("LayerNormalization", {"x", "s"}, {"y"}, {{"axis", IntAttr(3)}}),
                       {{2, 3, 4}, {4}}),
              StatusCode::kInvalidArgument, "axis 3 is out of range"));
  // Leading 1s on Scale are accepted.
  EXPECT_TRUE(run.Init(ops::MakeLayerNormalization,
                       MakeNode("LayerNormalization", {"x", "s"}, {"y"}), {{2, 3, 4}, {1, 4}})
                  .ok());
}

}  // namespace
}  // namespace fedmesh::graph
