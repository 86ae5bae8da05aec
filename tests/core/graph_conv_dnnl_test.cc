// The Conv kernel's oneDNN path (core/graph/ops/conv_dnnl.h) against its im2col path on the
// shapes the ResNet trains (batch-major, 3x3, stride 1 and 2, two threads): the same Y, dX,
// dW and dB up to float rounding, and a Backward that follows DP-SGD's per-example calls in
// the same workspace (batch 1, no Forward of their own) still finds the right X. The
// finite-difference and reference checks of both paths are in graph_conv_pool_norm_test.cc.
// Also: FEDMESH_CPU_CONV values other than the two engines are refused by name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/graph/graph.h"
#include "core/graph/graph_model.h"
#include "core/graph/op_kernel.h"
#include "core/graph/ops/conv_dnnl.h"
#include "core/graph/ops/ops.h"
#include "tests/core/close_rel.h"
#include "tests/core/random_vector.h"

namespace fedmesh::graph {
namespace {

using Floats = std::vector<float>;

struct Shape {
  int64_t n, c, hw, m, stride;
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "[" << s.n << ", " << s.c << ", " << s.hw << "x" << s.hw << "] -> " << s.m << " stride " << s.stride;
}

// One Conv kernel (3x3, pads 1, bias) made with `engine`, its buffers, and calls at the
// planned batch or at batch 1 in the same workspace (as DP-SGD's per-example pass makes).
class ConvRun {
 public:
  ConvRun(ops::CpuConvEngine engine, const Shape& s, int threads) : s_(s) {
    be_ = MakeCpuBackend(threads);
    node_.name = "conv";
    node_.op_type = "Conv";
    node_.inputs = {"x", "w", "b"};
    node_.outputs = {"y"};
    node_.attrs["kernel_shape"] = Attribute::OfInts({3, 3});
    node_.attrs["pads"] = Attribute::OfInts({1, 1, 1, 1});
    node_.attrs["strides"] = Attribute::OfInts({s.stride, s.stride});
    const ops::CpuConvEngine saved = ops::GetCpuConvEngine();
    ops::SetCpuConvEngine(engine);
    KernelContext ctx;
    ctx.node = &node_;
    ctx.constant = [](const std::string&) -> const Tensor* { return nullptr; };
    auto k = ops::MakeConv(ctx);
    ops::SetCpuConvEngine(saved);
    EXPECT_TRUE(k.ok());
    kernel_ = std::move(*k);
    in_dims_ = {{s.n, s.c, s.hw, s.hw}, {s.m, s.c, 3, 3}, {s.m}};
    EXPECT_TRUE(kernel_->InferShapes(in_dims_, &out_dims_).ok());
    x = RandomVector(NumElements(in_dims_[0]), 1);
    w = RandomVector(NumElements(in_dims_[1]), 2);
    b = RandomVector(s.m, 3);
    dy = RandomVector(NumElements(out_dims_[0]), 4);
    y.assign(NumElements(out_dims_[0]), std::numeric_limits<float>::quiet_NaN());
    workspace_.assign(kernel_->WorkspaceFloats(in_dims_, out_dims_), std::numeric_limits<float>::quiet_NaN());
  }

  void Forward() {
    KernelCall c = Call(in_dims_[0], out_dims_[0], x.data(), dy.data());
    ASSERT_TRUE(kernel_->Forward(c).ok());
  }

  // dX, dW, dB (prefilled with 0.5: Backward adds) of the whole batch, or of example j alone.
  std::vector<Floats> Backward(int64_t j = -1) {
    Dims xd = in_dims_[0], yd = out_dims_[0];
    const float* xp = x.data();
    const float* dyp = dy.data();
    if (j >= 0) {
      xd[0] = yd[0] = 1;
      xp += j * NumElements(xd);
      dyp += j * NumElements(yd);
    }
    std::vector<Floats> d = {Floats(NumElements(xd), 0.5f), Floats(w.size(), 0.5f), Floats(b.size(), 0.5f)};
    KernelCall c = Call(xd, yd, xp, dyp);
    c.din = {d[0].data(), d[1].data(), d[2].data()};
    kernel_->Backward(c);
    return d;
  }

  Floats x, w, b, y, dy;
  size_t workspace_floats() const { return workspace_.size(); }

 private:
  KernelCall Call(const Dims& xd, const Dims& yd, const float* xp, const float* dyp) {
    xd_ = xd;
    yd_ = yd;
    KernelCall c;
    c.be = be_.get();
    c.in = {const_cast<float*>(xp), w.data(), b.data()};
    c.in_dims = {&xd_, &in_dims_[1], &in_dims_[2]};
    c.out = {y.data()};
    c.out_dims = {&yd_};
    c.din = {nullptr, nullptr, nullptr};
    c.dout = {dyp};
    c.workspace = workspace_.data();
    c.training = true;
    return c;
  }

  Shape s_;
  std::unique_ptr<Backend> be_;
  Node node_;
  std::unique_ptr<OpKernel> kernel_;
  std::vector<Dims> in_dims_, out_dims_;
  Dims xd_, yd_;
  Floats workspace_;
};

class ConvDnnl : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (!ops::DnnlConvBuilt()) GTEST_SKIP() << "this build has no oneDNN (libdnnl-dev)";
  }
};

TEST_P(ConvDnnl, MatchesIm2colAndSurvivesPerExampleCallsBetweenForwardAndBackward) {
  const Shape s = GetParam();
  ConvRun dnnl(ops::CpuConvEngine::kDnnl, s, 2), im2col(ops::CpuConvEngine::kIm2col, s, 2);
  dnnl.Forward();
  im2col.Forward();
  EXPECT_TRUE(CloseRel(dnnl.y, im2col.y, 1e-5, "Y"));
  const std::vector<Floats> d = dnnl.Backward(), r = im2col.Backward();
  const char* names[] = {"dX", "dW", "dB"};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(CloseRel(d[i], r[i], 1e-5, names[i]));

  // DP-SGD's order: Forward, Backward, per-example Backwards in the same workspace, then the
  // batch's Backward again: it must not take the per-example X for the batch's.
  dnnl.Forward();
  const std::vector<Floats> first = dnnl.Backward();
  const std::vector<Floats> one = dnnl.Backward(s.n - 1), one_ref = im2col.Backward(s.n - 1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(CloseRel(one[i], one_ref[i], 1e-5, std::string("example ") + names[i]));
  const std::vector<Floats> again = dnnl.Backward();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(again[i], first[i]) << names[i] << " after the per-example calls";
}

// The ResNet's layers (examples/pytorch/models.py FmnistResNet) at a smaller batch.
INSTANTIATE_TEST_SUITE_P(ResNetLayers, ConvDnnl,
                         ::testing::Values(Shape{8, 1, 28, 16, 1}, Shape{8, 16, 28, 16, 1}, Shape{8, 16, 28, 32, 2},
                                           Shape{8, 32, 14, 32, 1}, Shape{3, 5, 9, 7, 2}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           const Shape& s = i.param;
                           return "C" + std::to_string(s.c) + "M" + std::to_string(s.m) + "HW" + std::to_string(s.hw) +
                                  "S" + std::to_string(s.stride);
                         });

TEST(ConvDnnlChoice, OneDnnRunsTheResNetLayersWhereBuilt) {
  if (!ops::DnnlConvBuilt()) GTEST_SKIP() << "this build has no oneDNN (libdnnl-dev)";
  ops::ConvGeometry g;
  g.n = 32, g.c = 16, g.m = 16;
  g.h = {28, 3, 1, 1, 1, 1, 28};
  g.w = g.h;
  EXPECT_NE(ops::DnnlConv::Create(g, true), nullptr);
}

// The workspace holds three activation-sized buffers (the forward's X kept for the weight
// pass; dY and dX over the forward's Y), not one per staging: at an evaluation batch of 500
// a ResNet layer's workspace would otherwise be six times its 25 MB input.
TEST(ConvDnnlChoice, WorkspaceStaysNearThreeActivations) {
  if (!ops::DnnlConvBuilt()) GTEST_SKIP() << "this build has no oneDNN (libdnnl-dev)";
  ConvRun run(ops::CpuConvEngine::kDnnl, Shape{500, 16, 28, 16, 1}, 2);
  const double activation = 500.0 * 16 * 28 * 28;
  EXPECT_LE(run.workspace_floats(), 3.2 * activation) << run.workspace_floats() / activation << " activations";
  EXPECT_GE(run.workspace_floats(), 3.0 * activation);
}

}  // namespace
}  // namespace fedmesh::graph

namespace fedmesh::graph {
namespace {

// FEDMESH_CPU_CONV: unset, empty, "dnnl" and "im2col" are engines; anything else (a typo) is
// refused by name when a graph with a Conv is made on the CPU, not silently the default.
TEST(ConvDnnlChoice, EnvironmentValueIsCheckedNotGuessed) {
  const char* old = std::getenv("FEDMESH_CPU_CONV");
  const std::string saved = old ? old : "";
  unsetenv("FEDMESH_CPU_CONV");
  EXPECT_EQ(*ops::CpuConvEngineFromEnvironment(), ops::CpuConvEngine::kDnnl);
  setenv("FEDMESH_CPU_CONV", "", 1);
  EXPECT_EQ(*ops::CpuConvEngineFromEnvironment(), ops::CpuConvEngine::kDnnl);
  setenv("FEDMESH_CPU_CONV", "dnnl", 1);
  EXPECT_EQ(*ops::CpuConvEngineFromEnvironment(), ops::CpuConvEngine::kDnnl);
  setenv("FEDMESH_CPU_CONV", "im2col", 1);
  EXPECT_EQ(*ops::CpuConvEngineFromEnvironment(), ops::CpuConvEngine::kIm2col);
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, {-1, 1, 4, 4}}};
  g.initializers = {Tensor{"w", DType::kFloat32, {1, 1, 3, 3}, Floats(9, 0.5f), {}}};
  g.nodes = {Node{"conv", "Conv", {"x", "w"}, {"y"}, {}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  auto be = MakeCpuBackend(1);
  EXPECT_TRUE(GraphModel::Create(g, be.get()).ok());
  for (const char* bad : {"im2coll", "onednn", "IM2COL"}) {
    setenv("FEDMESH_CPU_CONV", bad, 1);
    const auto e = ops::CpuConvEngineFromEnvironment();
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("FEDMESH_CPU_CONV = '" + std::string(bad) + "'"), std::string::npos)
        << e.status().ToString();
    const auto m = GraphModel::Create(g, be.get());
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_NE(m.status().message().find("FEDMESH_CPU_CONV"), std::string::npos) << m.status().ToString();
  }
  if (old) setenv("FEDMESH_CPU_CONV", saved.c_str(), 1);
  else unsetenv("FEDMESH_CPU_CONV");
}

}  // namespace
}  // namespace fedmesh::graph
