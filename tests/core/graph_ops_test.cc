// Finite-difference gradient checks of every graph op this file's cases build (the conv,
// pooling and normalisation kernels have their own file), through the real executor:
// each case is a one-node graph whose float operands are trainable initializers, the loss
// is L = sum(y * r) for a fixed random r, and every analytic gradient element must match
// the central difference (L(p + e) - L(p - e)) / 2e. Forward values are checked against
// hand-computed ones where a mistake would not show in a gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/backend.h"
#include "core/graph/graph_model.h"
#include "core/rng.h"
#include "tests/core/graph_test_util.h"

namespace fedmesh::graph {
namespace {


// One node over initializers `inits`, output "y" (and more outputs if the node has them).
std::unique_ptr<GraphModel> OneNode(Node node, std::vector<Tensor> inits, Backend* be,
                                    int64_t opset = 17) {
  Graph g;
  g.opset = opset;
  g.initializers = std::move(inits);
  node.name = "n";
  node.outputs = {"y"};
  g.nodes = {node};
  g.outputs = {{"y", DType::kFloat32, {}}};
  auto m = GraphModel::Create(std::move(g), be);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return nullptr;
  EXPECT_TRUE((*m)->Plan(1).ok());
  return std::move(*m);
}

double Loss(GraphModel& m, const std::vector<float>& r) {
  EXPECT_TRUE(m.Forward(1, true, 42).ok());
  double l = 0.0;
  for (size_t i = 0; i < r.size(); ++i) l += double(m.output(0)[i]) * r[i];
  return l;
}

// Checks every trainable element's gradient by central differences.
void CheckGradients(Node node, std::vector<Tensor> inits, int64_t opset = 17, float eps = 1e-2f) {
  auto be = MakeCpuBackend(1);
  auto m = OneNode(std::move(node), std::move(inits), be.get(), opset);
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->Forward(1, true, 42).ok());
  const int64_t n_out = NumElements(m->output_dims(0));
  Rng rng(7);
  std::vector<float> r(n_out);
  for (float& v : r) v = static_cast<float>(rng.Uniform(-1, 1));
  std::copy(r.begin(), r.end(), m->output_grad(0));
  // Backward overwrites what a previous step left, whether a kernel overwrites the gradient
  // (a parameter with one reader) or the executor zeroes it first: start from NaN, and a
  // second Backward must give the same values, not twice them.
  std::fill(m->grads(), m->grads() + m->num_flat(), std::nanf(""));
  m->Backward();
  std::vector<float> analytic(m->grads(), m->grads() + m->num_trainable());
  ASSERT_GT(analytic.size(), 0u);
  m->Backward();
  for (size_t k = 0; k < analytic.size(); ++k)
    ASSERT_EQ(m->grads()[k], analytic[k]) << "element " << k << " after a second Backward";
  for (size_t k = 0; k < analytic.size(); ++k) {
    float* p = m->params() + k;
    const float keep = *p;
    *p = keep + eps;
    const double up = Loss(*m, r);
    *p = keep - eps;
    const double down = Loss(*m, r);
    *p = keep;
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic[k], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << "element " << k;
  }
}

TEST(GraphOpsGradient, BroadcastingBinaryOps) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (const Dims& b : {Dims{2, 3, 4}, Dims{3, 1}, Dims{4}, Dims{}, Dims{1, 3, 1}}) {
      SCOPED_TRACE(std::string(op) + " with b " + DimsToString(b));
      Rng rng(1);
      CheckGradients(Node{"", op, {"a", "b"}, {}, {}},
                     {F("a", {2, 3, 4}, rng), F("b", b.empty() ? Dims{1} : b, rng, 0.5f, 1.5f)});
    }
  }
}

TEST(GraphOpsGradient, PowWithScalarAndTensorExponent) {
  Rng rng(2);
  CheckGradients(Node{"", "Pow", {"a", "e"}, {}, {}}, {F("a", {3, 4}, rng, 0.5f, 2.0f), F("e", {4}, rng, 0.5f, 3.0f)});
}

TEST(GraphOpsGradient, UnaryOps) {
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Gelu", "Erf", "Neg", "Exp", "Identity"}) {
    SCOPED_TRACE(op);
    Rng rng(3);
    Tensor x = F("x", {3, 5}, rng, -2.0f, 2.0f);
    for (float& v : x.f)
      if (std::fabs(v) < 0.05f) v = 0.3f;  // away from Relu's kink
    CheckGradients(Node{"", op, {"x"}, {}, {}}, {x});
  }
  Rng rng(4);
  CheckGradients(Node{"", "Sqrt", {"x"}, {}, {}}, {F("x", {6}, rng, 0.5f, 3.0f)});
  CheckGradients(Node{"", "Log", {"x"}, {}, {}}, {F("x", {6}, rng, 0.5f, 3.0f)});
  Node leaky{"", "LeakyRelu", {"x"}, {}, {}};
  leaky.attrs["alpha"] = Flt(0.1f);
  CheckGradients(leaky, {F("x", {7}, rng, 0.1f, 1.0f), });
  Node gelu_tanh{"", "Gelu", {"x"}, {}, {}};
  gelu_tanh.attrs["approximate"] = Str("tanh");
  CheckGradients(gelu_tanh, {F("x", {7}, rng, -2.0f, 2.0f)});
}

// Where(c, a, b): each output element's gradient goes to the operand it came from, summed
// back over broadcast dims (b [3, 1] over [2, 3, 4]); the condition (int64, as IsNaN's
// boolean output is kept) takes none.
TEST(GraphOpsGradient, WhereWithBroadcasting) {
  Rng rng(6);
  std::vector<int64_t> cond;
  for (int i = 0; i < 24; ++i) cond.push_back((i * 7) % 3 == 0);
  CheckGradients(Node{"", "Where", {"c", "a", "b"}, {}, {}},
                 {I("c", {2, 3, 4}, cond), F("a", {2, 3, 4}, rng), F("b", {3, 1}, rng)});
  CheckGradients(Node{"", "Where", {"c", "a", "b"}, {}, {}},
                 {I("c", {4}, {1, 0, 0, 1}), F("a", {1}, rng), F("b", {3, 4}, rng)});
}

TEST(GraphOpsGradient, DropoutWithAFixedSeedIsLinear) {
  Rng rng(5);
  Node d{"", "Dropout", {"x"}, {}, {}};
  d.attrs["ratio"] = Flt(0.5f);
  CheckGradients(d, {F("x", {4, 8}, rng)});
}

TEST(GraphOpsGradient, SoftmaxAndLogSoftmaxAlongEveryAxis) {
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (int64_t axis : {0, 1, -1}) {
      SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis));
      Rng rng(6);
      Node n{"", op, {"x"}, {}, {}};
      n.attrs["axis"] = Int(axis);
      CheckGradients(n, {F("x", {2, 3, 4}, rng, -2.0f, 2.0f)});
    }
}

TEST(GraphOpsGradient, GemmInEveryTransposeWithBiasBroadcast) {
  for (int ta : {0, 1})
    for (int tb : {0, 1})
      for (const Dims& c : {Dims{5}, Dims{3, 5}, Dims{3, 1}}) {
        SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb) + " C " +
                     DimsToString(c));
        Rng rng(7);
        Node n{"", "Gemm", {"A", "B", "C"}, {}, {}};
        n.attrs["transA"] = Int(ta);
        n.attrs["transB"] = Int(tb);
        n.attrs["alpha"] = Flt(0.7f);
        n.attrs["beta"] = Flt(1.3f);
        CheckGradients(n, {F("A", ta ? Dims{4, 3} : Dims{3, 4}, rng),
                           F("B", tb ? Dims{5, 4} : Dims{4, 5}, rng), F("C", c, rng)});
      }
}

TEST(GraphOpsGradient, MatMulSharedAndBatched) {
  Rng rng(8);
  CheckGradients(Node{"", "MatMul", {"A", "B"}, {}, {}}, {F("A", {2, 3, 4}, rng), F("B", {4, 5}, rng)});
  CheckGradients(Node{"", "MatMul", {"A", "B"}, {}, {}}, {F("A", {2, 3, 4}, rng), F("B", {2, 4, 5}, rng)});
  CheckGradients(Node{"", "MatMul", {"A", "B"}, {}, {}}, {F("A", {4}, rng), F("B", {4, 5}, rng)});
}

TEST(GraphOpsGradient, Reductions) {
  for (const char* op : {"ReduceMean", "ReduceSum"})
    for (int keep : {0, 1}) {
      SCOPED_TRACE(std::string(op) + " keepdims " + std::to_string(keep));
      Rng rng(9);
      Node n{"", op, {"x"}, {}, {}};
      n.attrs["keepdims"] = Int(keep);
      if (std::string(op) == "ReduceMean") {
        n.attrs["axes"] = Ints({-1, 0});
        CheckGradients(n, {F("x", {2, 3, 4}, rng)});
      } else {
        n.inputs.push_back("axes");
        CheckGradients(n, {F("x", {2, 3, 4}, rng), I("axes", {1}, {1})});
      }
    }
}

TEST(GraphOpsGradient, ShapeOps) {
  Rng rng(10);
  Node flat{"", "Flatten", {"x"}, {}, {}};
  flat.attrs["axis"] = Int(2);
  CheckGradients(flat, {F("x", {2, 3, 4}, rng)});
  CheckGradients(Node{"", "Reshape", {"x", "s"}, {}, {}}, {F("x", {2, 3, 4}, rng), I("s", {3}, {0, -1, 2})});
  Node tr{"", "Transpose", {"x"}, {}, {}};
  tr.attrs["perm"] = Ints({2, 0, 1});
  CheckGradients(tr, {F("x", {2, 3, 4}, rng)});
  Node cat{"", "Concat", {"a", "b", "a"}, {}, {}};
  cat.attrs["axis"] = Int(1);
  CheckGradients(cat, {F("a", {2, 3, 2}, rng), F("b", {2, 1, 2}, rng)});
  CheckGradients(Node{"", "Unsqueeze", {"x", "ax"}, {}, {}}, {F("x", {2, 3}, rng), I("ax", {2}, {0, -1})});
  CheckGradients(Node{"", "Squeeze", {"x", "ax"}, {}, {}}, {F("x", {2, 1, 3}, rng), I("ax", {1}, {1})});
  CheckGradients(Node{"", "Gather", {"w", "i"}, {}, {}},
                 {F("w", {5, 3}, rng), I("i", {2, 2}, {4, 0, 4, -1})});
  Node g1{"", "Gather", {"w", "i"}, {}, {}};
  g1.attrs["axis"] = Int(1);
  CheckGradients(g1, {F("w", {2, 5, 3}, rng), I("i", {3}, {1, 1, 3})});
  Node pad{"", "Pad", {"x", "p"}, {}, {}};
  CheckGradients(pad, {F("x", {2, 3}, rng), I("p", {4}, {0, 1, 2, 0})});
}

TEST(GraphOpsForward, ValuesMatchHandComputedOnes) {
  auto be = MakeCpuBackend(1);
  Rng rng(11);
  {  // bias [3] over [2,3]: y[r][c] = a[r][c] + b[c]
    auto m = OneNode(Node{"", "Add", {"a", "b"}, {}, {}},
                     {Tensor{"a", DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}, {}},
                      Tensor{"b", DType::kFloat32, {3}, {10, 20, 30}, {}}}, be.get());
    ASSERT_TRUE(m->Forward(1, false, 0).ok());
    EXPECT_EQ(std::vector<float>(m->output(0), m->output(0) + 6),
              (std::vector<float>{11, 22, 33, 14, 25, 36}));
  }
  {  // transpose [2,3] -> [3,2]
    Node tr{"", "Transpose", {"x"}, {}, {}};
    auto m = OneNode(tr, {Tensor{"x", DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}, {}}}, be.get());
    ASSERT_TRUE(m->Forward(1, false, 0).ok());
    EXPECT_EQ(m->output_dims(0), (Dims{3, 2}));
    EXPECT_EQ(std::vector<float>(m->output(0), m->output(0) + 6),
              (std::vector<float>{1, 4, 2, 5, 3, 6}));
  }
  {  // softmax of [0, ln 3] = [0.25, 0.75]
    auto m = OneNode(Node{"", "Softmax", {"x"}, {}, {}},
                     {Tensor{"x", DType::kFloat32, {1, 2}, {0.0f, std::log(3.0f)}, {}}}, be.get());
    ASSERT_TRUE(m->Forward(1, false, 0).ok());
    EXPECT_NEAR(m->output(0)[0], 0.25f, 1e-6);
    EXPECT_NEAR(m->output(0)[1], 0.75f, 1e-6);
  }
  {  // Where with a condition [3] over [2, 3]; IsNaN of finite values is all 0
    auto m = OneNode(Node{"", "Where", {"c", "a", "b"}, {}, {}},
                     {I("c", {3}, {1, 0, 1}), Tensor{"a", DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}, {}},
                      Tensor{"b", DType::kFloat32, {1}, {-1}, {}}},
                     be.get());
    ASSERT_TRUE(m->Forward(1, false, 0).ok());
    EXPECT_EQ(std::vector<float>(m->output(0), m->output(0) + 6), (std::vector<float>{1, -1, 3, 4, -1, 6}));
    auto isnan = OneNode(Node{"", "IsNaN", {"x"}, {}, {}},
                         {Tensor{"x", DType::kFloat32, {3}, {0.0f, -2.5f, 1e30f}, {}}}, be.get());
    ASSERT_TRUE(isnan->Forward(1, false, 0).ok());
    EXPECT_EQ(std::vector<float>(isnan->output(0), isnan->output(0) + 3), (std::vector<float>{0, 0, 0}));
  }
  {  // dropout is the identity outside training and keeps about 1-p of the values in it
    Node d{"", "Dropout", {"x"}, {}, {}};
    d.attrs["ratio"] = Flt(0.25f);
    Tensor x{"x", DType::kFloat32, {10000}, std::vector<float>(10000, 1.0f), {}};
    auto m = OneNode(d, {x}, be.get());
    ASSERT_TRUE(m->Forward(1, false, 0).ok());
    EXPECT_EQ(m->output(0)[17], 1.0f);
    ASSERT_TRUE(m->Forward(1, true, 3).ok());
    int kept = 0;
    for (int i = 0; i < 10000; ++i) {
      kept += m->output(0)[i] != 0.0f;
      if (m->output(0)[i] != 0.0f) {
        ASSERT_NEAR(m->output(0)[i], 1.0f / 0.75f, 1e-6);
      }
    }
    EXPECT_NEAR(kept, 7500, 150);
  }
}

TEST(GraphOpsShapes, BadShapesAreRefusedWithBothShapesNamed) {
  auto be = MakeCpuBackend(1);
  Graph g;
  g.initializers = {Tensor{"a", DType::kFloat32, {2, 3}, std::vector<float>(6, 1.0f), {}},
                    Tensor{"b", DType::kFloat32, {4}, std::vector<float>(4, 1.0f), {}}};
  g.nodes = {Node{"add", "Add", {"a", "b"}, {"y"}, {}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  auto m = GraphModel::Create(g, be.get());
  ASSERT_TRUE(m.ok());
  const Status s = (*m)->Plan(1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("[2,3] and [4] do not broadcast"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("node 'add' (Add)"), std::string::npos) << s.message();
}

// Where takes exactly condition, X and Y: with two inputs, or an empty one (ONNX's way of
// leaving an optional input out), the model is refused naming the node; a condition that
// does not broadcast against X and Y is refused at planning naming the shapes.
TEST(GraphOpsShapes, WhereNeedsThreeInputsThatBroadcast) {
  auto be = MakeCpuBackend(1);
  for (const std::vector<std::string>& inputs :
       {std::vector<std::string>{"c", "a"}, std::vector<std::string>{"c", "", "b"}}) {
    Graph g;
    g.initializers = {Tensor{"a", DType::kFloat32, {2, 3}, std::vector<float>(6, 1.0f), {}},
                      Tensor{"b", DType::kFloat32, {2, 3}, std::vector<float>(6, 2.0f), {}},
                      Tensor{"c", DType::kInt64, {2, 3}, {}, std::vector<int64_t>(6, 1)}};
    g.nodes = {Node{"pick", "Where", inputs, {"y"}, {}}};
    g.outputs = {{"y", DType::kFloat32, {}}};
    auto m = GraphModel::Create(g, be.get());
    const Status s = m.ok() ? (*m)->Plan(1) : m.status();
    ASSERT_FALSE(s.ok()) << inputs.size() << " inputs";
    EXPECT_NE(s.message().find("needs three inputs: condition, X and Y"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("'pick'"), std::string::npos) << s.message();
  }
  Graph g;
  g.initializers = {Tensor{"a", DType::kFloat32, {2, 3}, std::vector<float>(6, 1.0f), {}},
                    Tensor{"b", DType::kFloat32, {2, 3}, std::vector<float>(6, 2.0f), {}},
                    Tensor{"c", DType::kInt64, {4}, {}, std::vector<int64_t>(4, 1)}};
  g.nodes = {Node{"pick", "Where", {"c", "a", "b"}, {"y"}, {}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  auto m = GraphModel::Create(g, be.get());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Status s = (*m)->Plan(1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("[4]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'pick'"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fedmesh::graph
