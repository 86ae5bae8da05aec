// Reshapes share their input's buffer (OpKernel::IsView, GraphModel::Plan on the CPU): a
// Flatten / Unsqueeze / Squeeze chain over an activation, and a Flatten of the graph input,
// point at the same floats as what they reshape (no copy per step), and the outputs and
// gradients through them are still exact (checked against sums written out here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/backend.h"
#include "core/graph/graph.h"
#include "core/graph/graph_model.h"

namespace fedmesh::graph {
namespace {

// x [N, 2, 3] -> Relu -> Flatten -> Unsqueeze(1) -> Squeeze(1) -> Gemm(W [6, 2], B [2]).
Graph Chain() {
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, {-1, 2, 3}}};
  Tensor w{"W", DType::kFloat32, {6, 2}, {0.5f, -1.0f, 0.25f, 0.75f, -0.5f, 1.5f, 2.0f, 0.1f, -0.3f, 0.2f, 1.1f, -0.7f}, {}};
  Tensor b{"B", DType::kFloat32, {2}, {0.1f, -0.2f}, {}};
  Tensor axes{"axes", DType::kInt64, {1}, {}, {1}};
  g.initializers = {w, b, axes};
  g.nodes = {Node{"relu", "Relu", {"x"}, {"r"}, {}},
             Node{"flat", "Flatten", {"r"}, {"f"}, {{"axis", Attribute::OfInt(1)}}},
             Node{"unsq", "Unsqueeze", {"f", "axes"}, {"u"}, {}},
             Node{"sq", "Squeeze", {"u", "axes"}, {"s"}, {}},
             Node{"gemm", "Gemm", {"s", "W", "B"}, {"y"}, {}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  return g;
}

TEST(GraphViews, ReshapesShareTheirInputsBufferAndStayExact) {
  auto be = MakeCpuBackend(1);
  GraphModelOptions o;
  o.input_gradients = true;
  o.poison_plans = true;  // a view left pointing at its own (NaN) slot would show
  auto m = GraphModel::Create(Chain(), be.get(), o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  GraphModel& model = **m;
  const int64_t n = 2;
  ASSERT_TRUE(model.Plan(n).ok());
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, 0.5f, -0.5f, 2.0f, -1.0f, 4.0f, 0.0f, 1.5f, 2.5f, -3.0f};
  std::copy(x.begin(), x.end(), model.input(0, n));
  ASSERT_TRUE(model.Forward(n, true, 1).ok());
  const float* r = model.value("r");
  EXPECT_EQ(model.value("f"), r);
  EXPECT_EQ(model.value("u"), r);
  EXPECT_EQ(model.value("s"), r);
  const float* w = model.value("W");
  std::vector<float> relu(x.size());
  for (size_t i = 0; i < x.size(); ++i) relu[i] = x[i] > 0.0f ? x[i] : 0.0f;
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < 2; ++j) {
      float want = j == 0 ? 0.1f : -0.2f;
      for (int k = 0; k < 6; ++k) want += relu[i * 6 + k] * w[k * 2 + j];
      EXPECT_NEAR(model.output(0)[i * 2 + j], want, 1e-5) << i << "," << j;
    }
  // dy = [[1, 2], [3, 4]]: dW[k, j] = sum_i s[i, k] dy[i, j]; dx = (dy W^T) where x > 0.
  const std::vector<float> dy = {1.0f, 2.0f, 3.0f, 4.0f};
  std::copy(dy.begin(), dy.end(), model.output_grad(0));
  model.Backward();
  const TensorSlot& ws = model.param_slots()[0];
  ASSERT_EQ(ws.name, "W");
  for (int k = 0; k < 6; ++k)
    for (int j = 0; j < 2; ++j) {
      const float want = relu[k] * dy[j] + relu[6 + k] * dy[2 + j];
      EXPECT_NEAR(model.grads()[ws.offset + k * 2 + j], want, 1e-5) << k << "," << j;
    }
  for (int64_t i = 0; i < n; ++i)
    for (int k = 0; k < 6; ++k) {
      const float back = dy[i * 2] * w[k * 2] + dy[i * 2 + 1] * w[k * 2 + 1];
      EXPECT_NEAR(model.input_grad(0)[i * 6 + k], x[i * 6 + k] > 0.0f ? back : 0.0f, 1e-5);
    }
}

// The mlp's case: Flatten of the graph input itself.
TEST(GraphViews, AFlattenOfTheGraphInputReadsTheInputBuffer) {
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, {-1, 1, 2, 2}}};
  g.initializers = {Tensor{"W", DType::kFloat32, {1, 4}, {1.0f, 2.0f, 3.0f, 4.0f}, {}}};
  g.nodes = {Node{"flat", "Flatten", {"x"}, {"f"}, {}},
             Node{"gemm", "Gemm", {"f", "W"}, {"y"}, {{"transB", Attribute::OfInt(1)}}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  auto be = MakeCpuBackend(1);
  auto m = GraphModel::Create(g, be.get());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->Plan(3).ok());
  float* in = (*m)->input(0, 3);
  for (int i = 0; i < 12; ++i) in[i] = float(i);
  ASSERT_TRUE((*m)->Forward(3, false, 0).ok());
  EXPECT_EQ((*m)->value("f"), in);
  EXPECT_FLOAT_EQ((*m)->output(0)[0], 0 * 1 + 1 * 2 + 2 * 3 + 3 * 4);
  EXPECT_FLOAT_EQ((*m)->output(0)[2], 8 * 1 + 9 * 2 + 10 * 3 + 11 * 4);
}

// x (input dims, batch first) -> Transpose(perm) -> y, planned for a batch of 2 with x
// holding 0, 1, 2, ... and run forward.
std::unique_ptr<GraphModel> PlannedTranspose(Dims x, std::vector<int64_t> perm, Backend* be,
                                             const GraphModelOptions& o) {
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, std::move(x)}};
  g.nodes = {Node{"t", "Transpose", {"x"}, {"y"}, {{"perm", Attribute::OfInts(std::move(perm))}}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  auto m = GraphModel::Create(g, be, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok() || !(*m)->Plan(2).ok()) return nullptr;
  float* in = (*m)->input(0, 2);
  std::iota(in, in + NumElements((*m)->input_dims(0, 2)), 0.0f);
  EXPECT_TRUE((*m)->Forward(2, true, 0).ok());
  return std::move(*m);
}

// x [N, A, B, C] -> Transpose(perm) -> y, every one of the 24 perms: y and dx against an
// index map written out here. Exercises the block-swap loop (e.g. [0, 3, 1, 2], [0, 2, 1, 3],
// [2, 3, 0, 1]) and the general walk ([0, 3, 2, 1]) alike.
TEST(GraphViews, TransposeEveryPermMatchesTheIndexMap) {
  const std::vector<int64_t> dims = {2, 3, 4, 5};
  std::vector<int64_t> perm = {0, 1, 2, 3};
  auto be = MakeCpuBackend(1);
  int perms = 0;
  do {
    SCOPED_TRACE(std::to_string(perm[0]) + std::to_string(perm[1]) + std::to_string(perm[2]) +
                 std::to_string(perm[3]));
    GraphModelOptions o;
    o.input_gradients = true;
    auto m = PlannedTranspose({-1, 3, 4, 5}, perm, be.get(), o);
    ASSERT_NE(m, nullptr);
    std::vector<int64_t> ydims(4), xstride = {60, 20, 5, 1};
    for (int k = 0; k < 4; ++k) ydims[k] = dims[perm[k]];
    float* dy = m->output_grad(0);
    for (int o = 0; o < 120; ++o) dy[o] = 1000.0f + float(o);
    m->Backward();
    int bad = 0;
    for (int o = 0; o < 120; ++o) {
      // Output index o -> its coordinates -> the input element they name.
      int64_t rest = o, src = 0;
      for (int k = 3; k >= 0; --k) {
        src += (rest % ydims[k]) * xstride[perm[k]];
        rest /= ydims[k];
      }
      bad += m->output(0)[o] != float(src);
      bad += m->input_grad(0)[src] != 1000.0f + float(o);
    }
    EXPECT_EQ(bad, 0);
    ++perms;
  } while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_EQ(perms, 24);
}

// A Transpose that moves only axes of size 1 (NHWC -> NCHW of one-channel images, as the
// built-in cnn's graph starts) is a view of its input; one that moves a larger axis is not.
TEST(GraphViews, TransposeOfSizeOneAxesReadsTheInputBuffer) {
  for (const int64_t channels : {1, 2}) {
    auto be = MakeCpuBackend(1);
    GraphModelOptions o;
    o.poison_plans = true;
    auto m = PlannedTranspose({-1, 2, 3, channels}, {0, 3, 1, 2}, be.get(), o);
    ASSERT_NE(m, nullptr);
    const float* in = m->input(0, 2);
    EXPECT_EQ(m->output(0) == in, channels == 1);
    // [n, h, w, c] -> [n, c, h, w]: element (b, c, p) of the output is input (b, p, c).
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t p = 0; p < 6; ++p)
          EXPECT_EQ(m->output(0)[(b * channels + c) * 6 + p], in[(b * 6 + p) * channels + c]);
  }
}

// Slot 0 keeps at most max_plans plans: planning one more size drops the least recently
// used, never the current plan, and a dropped size is planned again on demand with the
// same results.
TEST(GraphPlans, LeastRecentlyUsedSizesAreDroppedBeyondTheBound) {
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, {-1, 2}}};
  g.initializers = {Tensor{"W", DType::kFloat32, {1, 2}, {1.0f, -2.0f}, {}}};
  g.nodes = {Node{"gemm", "Gemm", {"x", "W"}, {"y"}, {{"transB", Attribute::OfInt(1)}}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  auto be = MakeCpuBackend(1);
  GraphModelOptions o;
  o.max_plans = 2;
  auto m = GraphModel::Create(g, be.get(), o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  GraphModel& model = **m;
  auto run = [&](int64_t n) {
    EXPECT_TRUE(model.Plan(n).ok());
    float* x = model.input(0, n);
    for (int64_t i = 0; i < 2 * n; ++i) x[i] = float(i + 1);
    EXPECT_TRUE(model.Forward(n, false, 0).ok());
    return model.output(0)[n - 1];  // the last row: (2n - 1) - 2 (2n)
  };
  EXPECT_FLOAT_EQ(run(3), 5.0f - 12.0f);
  ASSERT_TRUE(model.Plan(1).ok());  // plans {3, 1}
  ASSERT_TRUE(model.Plan(2).ok());  // 3 is current: 1 goes
  EXPECT_TRUE(model.Select(3, 0).ok());
  EXPECT_TRUE(model.Select(2, 0).ok());
  EXPECT_EQ(model.Select(1, 0).code(), StatusCode::kNotFound);
  EXPECT_FLOAT_EQ(run(1), 1.0f - 4.0f);  // planned again: 3 (used least recently) goes
  EXPECT_EQ(model.Select(3, 0).code(), StatusCode::kNotFound);
  EXPECT_TRUE(model.Select(2, 0).ok());
  EXPECT_FLOAT_EQ(run(3), 5.0f - 12.0f);
}

// A plan's gradient buffer is allocated at its first training Forward (or when a gradient
// is asked for): a size that only evaluates (the test set's) holds its activations and
// nothing more, and gradients computed after an evaluation Forward equal a training one's.
TEST(GraphPlans, GradientsAreAllocatedOnlyForSizesThatTrain) {
  Graph g;
  g.opset = 17;
  g.inputs = {{"x", DType::kFloat32, {-1, 3}}};
  g.initializers = {Tensor{"W1", DType::kFloat32, {4, 3}, {1, -2, 3, -1, 2, 1, 0.5f, 1, -1, 2, 0, 1}, {}},
                    Tensor{"W2", DType::kFloat32, {2, 4}, {1, 2, -1, 0.5f, -2, 1, 1, 1}, {}}};
  g.nodes = {Node{"fc1", "Gemm", {"x", "W1"}, {"h"}, {{"transB", Attribute::OfInt(1)}}},
             Node{"relu", "Relu", {"h"}, {"r"}, {}},
             Node{"fc2", "Gemm", {"r", "W2"}, {"y"}, {{"transB", Attribute::OfInt(1)}}}};
  g.outputs = {{"y", DType::kFloat32, {}}};
  auto be = MakeCpuBackend(1);
  GraphModelOptions o;
  o.poison_plans = true;  // a gradient read before it is written shows as NaN
  auto m = GraphModel::Create(g, be.get(), o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  GraphModel& model = **m;
  const int64_t n = 100;
  auto load = [&] {
    float* x = model.input(0, n);
    for (int64_t i = 0; i < 3 * n; ++i) x[i] = float(i % 7) - 3.0f;
  };
  auto backward = [&] {
    float* dy = model.output_grad(0);
    for (int64_t i = 0; i < 2 * n; ++i) dy[i] = float(i % 5) - 2.0f;
    model.Backward();
    return std::vector<float>(model.grads(), model.grads() + model.num_flat());
  };
  ASSERT_TRUE(model.Plan(n).ok());
  load();
  ASSERT_TRUE(model.Forward(n, false, 0).ok());
  // Activations h, r, y and the input, 100 x (4 + 4 + 2 + 3) floats, and the Gemms'
  // small workspaces: no gradient.
  const size_t eval_bytes = model.planned_bytes();
  EXPECT_GE(eval_bytes, size_t{100 * 13 * 4});
  EXPECT_LT(eval_bytes, size_t{100 * 13 * 4 + 100 * 10 * 4});
  ASSERT_TRUE(model.Forward(n, false, 0).ok());
  EXPECT_EQ(model.planned_bytes(), eval_bytes);
  // Asked for after an evaluation Forward: bound then, zeroed, and right.
  const std::vector<float> after_eval = backward();
  // Then the gradients of y, r and h join: 100 x (2 + 4 + 4) floats.
  const size_t train_bytes = model.planned_bytes();
  EXPECT_EQ(train_bytes, eval_bytes + size_t{100 * 10 * 4});
  ASSERT_TRUE(model.Forward(n, true, 0).ok());
  EXPECT_EQ(model.planned_bytes(), train_bytes);  // once per plan
  EXPECT_EQ(backward(), after_eval);
  for (float v : after_eval) EXPECT_TRUE(std::isfinite(v));
  // A fresh model that trains first computes the same gradients.
  auto fresh = GraphModel::Create(g, be.get(), o);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE((*fresh)->Plan(n).ok());
  float* x = (*fresh)->input(0, n);
  for (int64_t i = 0; i < 3 * n; ++i) x[i] = float(i % 7) - 3.0f;
  ASSERT_TRUE((*fresh)->Forward(n, true, 0).ok());
  EXPECT_EQ((*fresh)->planned_bytes(), train_bytes);
  float* dy = (*fresh)->output_grad(0);
  for (int64_t i = 0; i < 2 * n; ++i) dy[i] = float(i % 5) - 2.0f;
  (*fresh)->Backward();
  EXPECT_EQ(std::vector<float>((*fresh)->grads(), (*fresh)->grads() + (*fresh)->num_flat()), after_eval);
}

}  // namespace
}  // namespace fedmesh::graph
