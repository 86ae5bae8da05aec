// Relu fusion (GraphModelOptions::fuse_relu): a Relu that alone reads a BatchNormalization's,
// a Conv's or a same-shape Add's / Sub's output runs inside that kernel. Training with it gives the
// outputs, gradients and weights of training without it (the Relu's own kernel), over
// several steps of Backward + SGD and of BackwardSgd, in training and evaluation forwards:
// equal up to rounding (relative 1e-5 of each tensor's largest value), since the kernels
// are built with FMA and the compiler contracts the fused loops' products differently; a
// wrong mask moves a gradient by its own size. The plan says how many Relus it fused, so a
// fusion that silently stops happening fails here too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/graph/graph.h"
#include "core/graph/graph_model.h"
#include "core/graph/ops/conv_dnnl.h"
#include "core/onnx/onnx_reader.h"

namespace fedmesh::graph {
namespace {

const std::string kDir = std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/";

// A float initializer of dims `d` with values of both signs around `base`.
Tensor Filled(std::string name, Dims d, float base) {
  Tensor x{std::move(name), DType::kFloat32, d, {}, {}};
  x.f.resize(static_cast<size_t>(NumElements(d)));
  for (size_t i = 0; i < x.f.size(); ++i) x.f[i] = base + 0.13f * float(i % 5) - 0.21f * float(i % 3);
  return x;
}

// x [N, 4] -> a = x Wa + Ba, b = x Wb + Bb, then:
//   s = Sub(a, b); r = Relu(s)   (fusable: same shapes, r the only reader of s)
//   t = Add(r, b); u = Relu(t)   (fusable; b is read twice: its gradient accumulates)
//   v = Add(u, Bc) with Bc [3] (broadcast: Relu(v) is NOT fused) -> y = Relu(v)
Graph SubAddNet() {
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, {-1, 4}}};
  const auto t = Filled;
  g.initializers = {t("Wa", {4, 3}, 0.1f), t("Ba", {3}, -0.05f), t("Wb", {4, 3}, -0.2f),
                    t("Bb", {3}, 0.02f), t("Bc", {3}, 0.01f)};
  g.nodes = {Node{"ga", "Gemm", {"x", "Wa", "Ba"}, {"a"}, {}},
             Node{"gb", "Gemm", {"x", "Wb", "Bb"}, {"b"}, {}},
             Node{"sub", "Sub", {"a", "b"}, {"s"}, {}},
             Node{"r1", "Relu", {"s"}, {"r"}, {}},
             Node{"add", "Add", {"r", "b"}, {"t"}, {}},
             Node{"r2", "Relu", {"t"}, {"u"}, {}},
             Node{"bias", "Add", {"u", "Bc"}, {"v"}, {}},
             Node{"r3", "Relu", {"v"}, {"y"}, {}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  return g;
}

struct Net {
  std::unique_ptr<GraphModel> m;
  std::vector<float> x, r;  // one batch of inputs and of output gradients
  int64_t batch = 0;
};

// x [N, 3, 5, 5] -> BatchNormalization -> Relu (fused) -> GlobalAveragePool -> Gemm.
Graph BnNet() {
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, {-1, 3, 5, 5}}};
  const auto t = Filled;
  g.initializers = {t("s", {3}, 1.0f), t("b", {3}, 0.1f), t("rm", {3}, 0.0f), t("rv", {3}, 1.0f), t("Wb", {3, 2}, -0.2f)};
  g.nodes = {Node{"bn", "BatchNormalization", {"x", "s", "b", "rm", "rv"}, {"n"}, {}},
             Node{"r1", "Relu", {"n"}, {"r"}, {}},
             Node{"gap", "GlobalAveragePool", {"r"}, {"p"}, {}},
             Node{"fl", "Flatten", {"p"}, {"f"}, {}},
             Node{"gb", "Gemm", {"f", "Wb"}, {"y"}, {}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  return g;
}

// x [N, 2, 6, 6] -> Conv 3x3 pad 1 (+B) -> Relu (fused) -> Conv 3x3 stride 2 (no bias)
// -> Relu (fused) -> GlobalAveragePool -> Flatten -> Gemm.
Graph ConvNet() {
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, {-1, 2, 6, 6}}};
  const auto t = Filled;
  g.initializers = {t("W1", {4, 2, 3, 3}, 0.02f), t("B1", {4}, -0.05f), t("W2", {3, 4, 3, 3}, -0.03f),
                    t("Wg", {3, 2}, 0.1f)};
  const Attribute k3 = Attribute::OfInts({3, 3});
  g.nodes = {Node{"c1", "Conv", {"x", "W1", "B1"}, {"a"}, {{"kernel_shape", k3}, {"pads", Attribute::OfInts({1, 1, 1, 1})}}},
             Node{"r1", "Relu", {"a"}, {"r"}, {}},
             Node{"c2", "Conv", {"r", "W2"}, {"b"}, {{"kernel_shape", k3}, {"strides", Attribute::OfInts({2, 2})}}},
             Node{"r2", "Relu", {"b"}, {"u"}, {}},
             Node{"gap", "GlobalAveragePool", {"u"}, {"p"}, {}},
             Node{"fl", "Flatten", {"p"}, {"f"}, {}},
             Node{"gg", "Gemm", {"f", "Wg"}, {"y"}, {}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  return g;
}

Result<Graph> Fixture(const std::string& name) {
  if (name == "bn") return BnNet();
  if (name == "conv" || name == "conv_im2col") return ConvNet();
  if (name == "sub_add") return SubAddNet();
  auto g = onnx::ReadOnnxFile(kDir + name);
  if (g.ok()) {
    // Dropout off: the two models must draw nothing different.
    for (Node& n : g->nodes)
      if (n.op_type == "Dropout") n.inputs.resize(1), n.attrs.erase("ratio");
  }
  return g;
}

void Make(const std::string& name, bool fuse, Backend* be, Net* net) {
  auto g = Fixture(name);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  GraphModelOptions o;
  o.fuse_relu = fuse;
  o.input_gradients = true;
  o.poison_plans = true;  // a value the fused kernels leave unwritten shows as NaN
  // The Conv kernel's engine is read when the kernel is made: "_im2col" runs the other one.
  const ops::CpuConvEngine engine = ops::GetCpuConvEngine();
  if (name.ends_with("_im2col")) ops::SetCpuConvEngine(ops::CpuConvEngine::kIm2col);
  auto m = GraphModel::Create(std::move(*g), be, o);
  ops::SetCpuConvEngine(engine);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  net->m = std::move(*m);
  net->batch = 6;
  ASSERT_TRUE(net->m->Plan(net->batch).ok());
  net->x.resize(static_cast<size_t>(NumElements(net->m->input_dims(0, net->batch))));
  // Inputs around zero, so that every Relu sees both signs.
  for (size_t i = 0; i < net->x.size(); ++i) net->x[i] = 0.8f * float((i * 37) % 17) / 17.0f - 0.3f;
  net->r.resize(static_cast<size_t>(NumElements(net->m->output_dims_for(0, net->batch))));
  for (size_t i = 0; i < net->r.size(); ++i) net->r[i] = 0.05f * float((i * 11) % 7) - 0.15f;
}

double Largest(const float* b, size_t n) {
  double top = 0.0;
  for (size_t i = 0; i < n; ++i) top = std::max(top, std::fabs(double(b[i])));
  return top;
}

// a equals b up to rounding: within 1e-5 of b's largest magnitude plus `floor`, elementwise;
// no NaN. The floor (1e-4 of the whole vector's largest value) covers tensors whose true
// gradient is zero (a convolution's bias before a BatchNorm): they hold rounding noise of
// the sums over the batch only, which the two runs round differently.
::testing::AssertionResult Close(const float* a, const float* b, size_t n, double floor = 0.0) {
  const double top = Largest(b, n);
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(a[i]) - b[i]);
    if (!(d <= 1e-5 * top + floor))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i]
                                           << " (largest " << top << ")";
  }
  return ::testing::AssertionSuccess();
}

struct FusionCase {
  std::string model;
  size_t fused;  // Relus the plan fuses
};
void PrintTo(const FusionCase& c, std::ostream* os) { *os << c.model << " (" << c.fused << " fused)"; }

class ReluFusion : public ::testing::TestWithParam<FusionCase> {};

TEST_P(ReluFusion, TrainsAsTheUnfusedGraph) {
  auto be = MakeCpuBackend(2);
  Net a, b;  // fused, unfused
  ASSERT_NO_FATAL_FAILURE(Make(GetParam().model, true, be.get(), &a));
  ASSERT_NO_FATAL_FAILURE(Make(GetParam().model, false, be.get(), &b));
  EXPECT_EQ(a.m->num_fused_relus(a.batch), GetParam().fused);
  EXPECT_EQ(b.m->num_fused_relus(b.batch), 0u);
  const size_t flat = a.m->num_flat(), out = a.r.size(), in = a.x.size();
  double moved = 0.0;
  const std::vector<float> start(a.m->params(), a.m->params() + flat);
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    for (Net* n : {&a, &b}) {
      std::copy(n->x.begin(), n->x.end(), n->m->input(0, n->batch));
      ASSERT_TRUE(n->m->Forward(n->batch, true, 11 + step).ok());
      std::copy(n->r.begin(), n->r.end(), n->m->output_grad(0));
    }
    ASSERT_TRUE(Close(a.m->output(0), b.m->output(0), out)) << "training forward";
    if (step % 2 == 0) {
      for (Net* n : {&a, &b}) n->m->Backward();
      const double floor = 1e-4 * Largest(b.m->grads(), b.m->num_trainable());
      for (const TensorSlot& t : a.m->param_slots())
        ASSERT_TRUE(Close(a.m->grads() + t.offset, b.m->grads() + t.offset, t.size, floor))
            << "gradient of " << t.name;
      ASSERT_TRUE(Close(a.m->input_grad(0), b.m->input_grad(0), in)) << "input gradient";
      for (Net* n : {&a, &b})
        be->SgdStep(n->m->params(), n->m->grads(), nullptr, nullptr, n->m->num_trainable(),
                    SgdStepParams{.lr = 0.1f});
    } else {
      for (Net* n : {&a, &b}) n->m->BackwardSgd(0.1f);
    }
    for (const auto* slots : {&a.m->param_slots(), &a.m->state_slots()})
      for (const TensorSlot& t : *slots)
        ASSERT_TRUE(Close(a.m->params() + t.offset, b.m->params() + t.offset, t.size)) << t.name;
    for (Net* n : {&a, &b}) {
      std::copy(n->x.begin(), n->x.end(), n->m->input(0, n->batch));
      ASSERT_TRUE(n->m->Forward(n->batch, false, 0).ok());
    }
    ASSERT_TRUE(Close(a.m->output(0), b.m->output(0), out)) << "evaluation forward";
  }
  for (size_t i = 0; i < flat; ++i) moved = std::max(moved, std::fabs(double(a.m->params()[i]) - start[i]));
  EXPECT_GT(moved, 1e-3);  // it trained
  for (size_t i = 0; i < out; ++i) ASSERT_FALSE(std::isnan(a.m->output(0)[i])) << i;
}

// resnet_bn: bn1-Relu, the block's bn1-Relu and Add-Relu, bn2-Relu and conv3-Relu fused;
// in inference form (BatchNorm folded into the Convs) Conv-Relu throughout. opzoo: no
// BatchNorm-, Add- or Conv-fed Relu. sub_add: Sub-Relu, Add-Relu fused, the broadcast
// Add-Relu not. conv: both Conv-Relus, on oneDNN and on im2col.
INSTANTIATE_TEST_SUITE_P(Graphs, ReluFusion,
                         ::testing::Values(FusionCase{"resnet_bn/model_train.onnx", 5},
                                           FusionCase{"resnet_bn/model_train_op13.onnx", 5},
                                           FusionCase{"resnet_bn/model_eval.onnx", 5},
                                           FusionCase{"opzoo/model_train.onnx", 0},
                                           FusionCase{"sub_add", 2}, FusionCase{"bn", 1},
                                           FusionCase{"conv", 2}, FusionCase{"conv_im2col", 2}),
                         [](const auto& info) {
                           std::string s = info.param.model;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

}  // namespace
}  // namespace fedmesh::graph
