// GraphModel slots (pipelined micro-batches, vertical/split_part.h): forwards in different
// slots keep their own activations, so a slot's backward after other slots' forwards gives
// exactly the gradients of its own forward, as a model that ran only that forward does;
// Select finds a slot's values again; a slot keeps one size; unknown plans are NotFound.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/graph/graph.h"
#include "core/graph/graph_model.h"

namespace fedmesh::graph {
namespace {

using Floats = std::vector<float>;

// y = Relu(x W + B), x [N, 3], W [3, 2].
Graph Net() {
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, {-1, 3}}};
  g.initializers = {Tensor{"W", DType::kFloat32, {3, 2}, {0.5f, -1.0f, 0.25f, 0.75f, -0.5f, 1.5f}, {}},
                    Tensor{"B", DType::kFloat32, {2}, {0.1f, -0.2f}, {}}};
  g.nodes = {Node{"gemm", "Gemm", {"x", "W", "B"}, {"h"}, {}}, Node{"relu", "Relu", {"h"}, {"y"}, {}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  return g;
}

Floats Rows(int n, float base) {
  Floats x(static_cast<size_t>(n) * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = base + 0.37f * static_cast<float>(i % 7) - 0.9f * static_cast<float>(i % 3);
  return x;
}

// Output and parameter gradients (dout = 1 everywhere) of one forward of `x` on a fresh model.
std::pair<Floats, Floats> Alone(Backend* be, const Floats& x) {
  auto m = GraphModel::Create(Net(), be);
  EXPECT_TRUE(m.ok());
  const int64_t n = static_cast<int64_t>(x.size() / 3);
  EXPECT_TRUE((*m)->Plan(n).ok());
  std::copy(x.begin(), x.end(), (*m)->input(0, n));
  EXPECT_TRUE((*m)->Forward(n, true, 1).ok());
  Floats y((*m)->output(0), (*m)->output(0) + n * 2);
  std::fill((*m)->output_grad(0), (*m)->output_grad(0) + n * 2, 1.0f);
  (*m)->Backward();
  return {y, Floats((*m)->grads(), (*m)->grads() + (*m)->num_trainable())};
}

TEST(GraphModelSlots, EachSlotGoesBackThroughItsOwnForward) {
  auto be = MakeCpuBackend(1);
  auto m = GraphModel::Create(Net(), be.get());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  GraphModel& model = **m;
  const Floats x0 = Rows(4, 0.3f), x1 = Rows(4, -1.1f), x2 = Rows(2, 2.0f);
  const Floats* xs[] = {&x0, &x1, &x2};
  for (uint32_t slot = 0; slot < 3; ++slot) {
    const Floats& x = *xs[slot];
    const auto n = static_cast<int64_t>(x.size() / 3);
    ASSERT_TRUE(model.Plan(n, slot).ok());
    std::copy(x.begin(), x.end(), model.input(0, n, slot));
    ASSERT_TRUE(model.Forward(n, true, 1, slot).ok());
  }
  // Back to slot 0 and slot 1 after the later forwards: their own outputs and gradients.
  for (uint32_t slot : {0u, 1u}) {
    SCOPED_TRACE("slot " + std::to_string(slot));
    const auto [y, grads] = Alone(be.get(), *xs[slot]);
    ASSERT_TRUE(model.Select(4, slot).ok());
    EXPECT_EQ(Floats(model.output(0), model.output(0) + 8), y);
    std::fill(model.output_grad(0), model.output_grad(0) + 8, 1.0f);
    model.Backward();
    EXPECT_EQ(Floats(model.grads(), model.grads() + model.num_trainable()), grads);
  }
  EXPECT_NE(Alone(be.get(), x0).second, Alone(be.get(), x1).second) << "the inputs must tell the slots apart";
  // A slot keeps one size: slot 1 planned for 2 rows drops its plan for 4.
  ASSERT_TRUE(model.Plan(2, 1).ok());
  EXPECT_EQ(model.Select(4, 1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(model.Select(2, 1).ok());
  EXPECT_EQ(model.Select(3, 0).code(), StatusCode::kNotFound);
  EXPECT_TRUE(model.Select(4, 0).ok());  // slot 0 caches every size
}

}  // namespace
}  // namespace fedmesh::graph
