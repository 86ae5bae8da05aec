// The whole model of a split job as one graph (vertical/assemble_model.h): on joined rows it
// computes exactly what the parts compute in turn (each bottom on its own columns, the top
// on the concatenation); a part with other than one input and output is refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/graph/inference_graph.h"
#include "core/rng.h"
#include "tests/vertical/split_test_util.h"
#include "vertical/assemble_model.h"

namespace fedmesh::vertical {
namespace {

using namespace fedmesh::vertical::testing;  // NOLINT

std::vector<float> Infer(graph::GraphModel& m, const std::vector<float>& x, int64_t rows) {
  EXPECT_TRUE(m.Plan(rows).ok());
  std::copy(x.begin(), x.end(), m.input(0, rows));
  EXPECT_TRUE(m.Forward(rows, false, 0).ok());
  const graph::Dims& d = m.output_dims(0);
  return std::vector<float>(m.output(0), m.output(0) + rows * d[1]);
}

TEST(AssembleSplitModelTest, TheWholeModelComputesWhatThePartsDoInTurn) {
  SplitPartOptions o;
  auto a = Part(3, 4, 2, 1, o), b = Part(5, 6, 3, 2, o), top = Part(5, 4, 2, 3, o);
  ASSERT_TRUE(a && b && top);
  auto whole = AssembleSplitModel({graph::InferenceGraph(a->model()), graph::InferenceGraph(b->model())},
                                  graph::InferenceGraph(top->model()));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto backend = MakeCpuBackend(1);
  auto wm = graph::GraphModel::Create(*whole, backend.get());
  ASSERT_TRUE(wm.ok()) << wm.status().ToString();
  const int64_t n = 7;
  Rng rng(5);
  std::vector<float> joined(n * 8), xa, xb;
  for (float& v : joined) v = static_cast<float>(rng.Normal());
  for (int64_t r = 0; r < n; ++r) {
    xa.insert(xa.end(), joined.begin() + r * 8, joined.begin() + r * 8 + 3);
    xb.insert(xb.end(), joined.begin() + r * 8 + 3, joined.begin() + r * 8 + 8);
  }
  const auto ha = Infer(a->model(), xa, n), hb = Infer(b->model(), xb, n);
  std::vector<float> cut;
  for (int64_t r = 0; r < n; ++r) {
    cut.insert(cut.end(), ha.begin() + r * 2, ha.begin() + r * 2 + 2);
    cut.insert(cut.end(), hb.begin() + r * 3, hb.begin() + r * 3 + 3);
  }
  const auto want = Infer(top->model(), cut, n);
  const auto got = Infer(**wm, joined, n);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

// combine sum: the top runs on the sum of the bottoms' outputs (each of the top's width).
TEST(AssembleSplitModelTest, SummedCutComputesTheTopOfTheSum) {
  SplitPartOptions o;
  auto a = Part(3, 4, 4, 1, o), b = Part(5, 6, 4, 2, o), c = Part(2, 3, 4, 4, o), top = Part(4, 5, 2, 3, o);
  ASSERT_TRUE(a && b && c && top);
  auto whole = AssembleSplitModel({graph::InferenceGraph(a->model()), graph::InferenceGraph(b->model()),
                                   graph::InferenceGraph(c->model())},
                                  graph::InferenceGraph(top->model()), CutCombine::kSum);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto backend = MakeCpuBackend(1);
  auto wm = graph::GraphModel::Create(*whole, backend.get());
  ASSERT_TRUE(wm.ok()) << wm.status().ToString();
  const int64_t n = 5;
  Rng rng(6);
  std::vector<float> joined(n * 10), xa, xb, xc;
  for (float& v : joined) v = static_cast<float>(rng.Normal());
  for (int64_t r = 0; r < n; ++r) {
    xa.insert(xa.end(), joined.begin() + r * 10, joined.begin() + r * 10 + 3);
    xb.insert(xb.end(), joined.begin() + r * 10 + 3, joined.begin() + r * 10 + 8);
    xc.insert(xc.end(), joined.begin() + r * 10 + 8, joined.begin() + r * 10 + 10);
  }
  const auto ha = Infer(a->model(), xa, n), hb = Infer(b->model(), xb, n), hc = Infer(c->model(), xc, n);
  std::vector<float> cut(ha.size());
  for (size_t i = 0; i < cut.size(); ++i) cut[i] = ha[i] + hb[i] + hc[i];
  const auto want = Infer(top->model(), cut, n);
  const auto got = Infer(**wm, joined, n);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  // The concatenating assembly of the same parts does not fit this top, nor sums of other
  // widths: refused at build, naming the widths.
  auto concat = AssembleSplitModel({graph::InferenceGraph(a->model()), graph::InferenceGraph(b->model())},
                                   graph::InferenceGraph(top->model()));
  EXPECT_THAT(concat.status().message(), ::testing::HasSubstr("the top model takes 4 inputs; the bottoms give 4 + 4 = 8"));
  auto narrow = Part(3, 4, 2, 7, o);
  auto summed = AssembleSplitModel({graph::InferenceGraph(a->model()), graph::InferenceGraph(narrow->model())},
                                   graph::InferenceGraph(top->model()), CutCombine::kSum);
  EXPECT_THAT(summed.status().message(), ::testing::HasSubstr("the bottoms give 4, 2 (summed"));
}

TEST(AssembleSplitModelTest, APartWithTwoInputsIsRefused) {
  SplitPartOptions o;
  auto a = Part(3, 4, 2, 1, o), top = Part(2, 0, 2, 3, o);
  graph::Graph two = graph::InferenceGraph(a->model());
  two.inputs.push_back(two.inputs[0]);
  two.inputs.back().name = "other";
  auto whole = AssembleSplitModel({two}, graph::InferenceGraph(top->model()));
  ASSERT_FALSE(whole.ok());
  EXPECT_THAT(whole.status().message(), ::testing::HasSubstr("a split part has one of each"));
}

}  // namespace
}  // namespace fedmesh::vertical
