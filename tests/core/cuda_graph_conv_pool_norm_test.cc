// The CUDA Conv, pooling and normalization kernels (core/cuda/graph/cuda_{conv,pool,
// normalization}.cu) against the CPU ones through CudaMatchesCpu (cuda_graph_check.h):
// every geometry the CPU tests (graph_conv_pool_norm_test.cc) cover, then sizes large
// enough for grid-stride loops, several convolution chunks and multi-block reductions.
// The image is a graph input with a dynamic batch dim, so its gradient is compared too.
// Every test skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "tests/core/cuda_graph_check.h"
#include "tests/core/graph_test_util.h"
#include "tests/core/random_vector.h"

namespace fedmesh::graph {
namespace {


// A float initializer of standard-normal values times `scale`, plus `shift`.
Tensor Init(const std::string& name, const Dims& dims, uint64_t seed, float scale = 1.0f, float shift = 0.0f) {
  Tensor t{name, DType::kFloat32, dims, RandomVector(NumElements(dims), seed), {}};
  for (float& v : t.f) v = v * scale + shift;
  return t;
}

// The graph input "x": `dims` with a dynamic batch dim.
std::vector<ValueInfo> BatchInput(Dims dims) {
  dims[0] = -1;
  return {{"x", DType::kFloat32, std::move(dims)}};
}

CudaCheckOptions Batch(int64_t n, bool training = true) {
  CudaCheckOptions o;
  o.batch = n;
  o.training = training;
  return o;
}

// ---- Conv ---------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  int64_t n, c, h, w, m, kh, kw;
  int64_t sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;
  int64_t group = 1;
  bool bias = true;
  bool one_d = false;         // X [N,C,W], attributes 1-D (h, kh, sh, dh, pt, pb unused)
  std::string auto_pad = "";  // when set, pads are not passed as an attribute
};

void PrintTo(const ConvCase& k, std::ostream* os) { *os << k.name; }

Graph ConvGraph(const ConvCase& k) {
  Node node{"", "Conv", {"x", "w"}, {}, {}};
  if (k.one_d) {
    node.attrs["strides"] = Ints({k.sw});
    node.attrs["dilations"] = Ints({k.dw});
    node.attrs["kernel_shape"] = Ints({k.kw});
    if (k.auto_pad.empty()) node.attrs["pads"] = Ints({k.pl, k.pr});
  } else {
    node.attrs["strides"] = Ints({k.sh, k.sw});
    node.attrs["dilations"] = Ints({k.dh, k.dw});
    node.attrs["kernel_shape"] = Ints({k.kh, k.kw});
    if (k.auto_pad.empty()) node.attrs["pads"] = Ints({k.pt, k.pl, k.pb, k.pr});
  }
  if (!k.auto_pad.empty()) node.attrs["auto_pad"] = Attribute::OfString(k.auto_pad);
  if (k.group != 1) node.attrs["group"] = Int(k.group);
  const Dims xd = k.one_d ? Dims{k.n, k.c, k.w} : Dims{k.n, k.c, k.h, k.w};
  const Dims wd = k.one_d ? Dims{k.m, k.c / k.group, k.kw} : Dims{k.m, k.c / k.group, k.kh, k.kw};
  // Weights scaled like a fan-in initialisation, so outputs stay O(1) at every size.
  const float ws = 1.0f / std::sqrt(static_cast<float>(NumElements(wd) / k.m));
  std::vector<Tensor> inits = {Init("w", wd, 2, ws)};
  if (k.bias) {
    node.inputs.push_back("b");
    inits.push_back(Init("b", {k.m}, 3));
  }
  return OneNodeGraph(node, inits, BatchInput(xd));
}

class CudaConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CudaConvTest, MatchesCpu) {
  FM_SKIP_WITHOUT_CUDA();
  const ConvCase& k = GetParam();
  EXPECT_TRUE(CudaMatchesCpu(ConvGraph(k), Batch(k.n)));
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    CudaGraphConvPoolNorm, CudaConvTest,
    ::testing::Values(
        //        name            n  c  h  w  m kh kw sh sw dh dw pt pl pb pr
        ConvCase{"Pad1", 2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        ConvCase{"SameWidthOneSidedPadsDilatedRows", 1, 2, 7, 6, 2, 3, 3, 1, 1, 2, 1, 2, 0, 2, 2},
        ConvCase{"ValidStride1NonSquareKernel", 2, 3, 6, 7, 2, 3, 2, 1, 1, 1, 1, 0, 0, 0, 0},
        ConvCase{"Stride2AsymPads", 2, 2, 7, 5, 3, 3, 2, 2, 2, 1, 1, 1, 0, 0, 1},
        ConvCase{"Dilation2", 1, 2, 7, 8, 3, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},
        ConvCase{"Groups2NoBias", 2, 4, 5, 5, 6, 3, 3, 1, 2, 1, 1, 1, 1, 1, 1, 2, false},
        ConvCase{"Depthwise", 1, 3, 6, 5, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 3},
        ConvCase{"OneByOne", 2, 3, 4, 5, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
        ConvCase{"OneByOneStride2", 1, 3, 5, 5, 2, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0},
        ConvCase{"OddKernelOddSizes", 3, 1, 9, 7, 2, 5, 3, 3, 2, 1, 1, 2, 0, 1, 1},
        ConvCase{"SameUpper", 1, 2, 6, 6, 2, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1, true, false, "SAME_UPPER"},
        ConvCase{"SameLower", 1, 2, 6, 6, 2, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1, true, false, "SAME_LOWER"},
        ConvCase{"Valid", 1, 2, 6, 7, 2, 3, 2, 2, 1, 1, 1, 0, 0, 0, 0, 1, true, false, "VALID"},
        ConvCase{"OneD", 2, 3, 1, 11, 4, 1, 3, 1, 2, 1, 2, 0, 1, 0, 2, 1, true, true},
        ConvCase{"OneDGroupsSameUpper", 3, 4, 1, 10, 6, 1, 4, 1, 3, 1, 1, 0, 0, 0, 0, 2, false, true,
                 "SAME_UPPER"},
        // Real sizes: many blocks per kernel, one GEMM over the whole batch.
        ConvCase{"Batch32Rgb32x32To16", 32, 3, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        ConvCase{"Batch8Stride2Groups4", 8, 16, 28, 28, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 4},
        ConvCase{"Batch16OneByOne", 16, 32, 14, 14, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
        // Columns of 13 images fill the chunk budget: two chunks (13 + 3 images).
        ConvCase{"TwoChunks", 16, 64, 32, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });
// clang-format on

// ---- Pooling ------------------------------------------------------------------------------

struct PoolCase {
  std::string name;
  int64_t n, c, h, w, kh, kw, sh, sw, pt, pl, pb, pr;
  bool ceil_mode;
  bool one_d = false;
  std::string auto_pad = "";  // when set, pads are not passed
};

void PrintTo(const PoolCase& k, std::ostream* os) { *os << k.name; }

Graph PoolGraph(const PoolCase& k, const std::string& op, int include_pad = -1) {
  Node node{"", op, {"x"}, {}, {}};
  if (k.one_d) {
    node.attrs["kernel_shape"] = Ints({k.kw});
    node.attrs["strides"] = Ints({k.sw});
    if (k.auto_pad.empty()) node.attrs["pads"] = Ints({k.pl, k.pr});
  } else {
    node.attrs["kernel_shape"] = Ints({k.kh, k.kw});
    node.attrs["strides"] = Ints({k.sh, k.sw});
    if (k.auto_pad.empty()) node.attrs["pads"] = Ints({k.pt, k.pl, k.pb, k.pr});
  }
  if (!k.auto_pad.empty()) node.attrs["auto_pad"] = Attribute::OfString(k.auto_pad);
  node.attrs["ceil_mode"] = Int(k.ceil_mode ? 1 : 0);
  if (include_pad >= 0) node.attrs["count_include_pad"] = Int(include_pad);
  const Dims xd = k.one_d ? Dims{k.n, k.c, k.w} : Dims{k.n, k.c, k.h, k.w};
  return OneNodeGraph(node, {}, BatchInput(xd));
}

class CudaPoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(CudaPoolTest, MaxPoolMatchesCpu) {
  FM_SKIP_WITHOUT_CUDA();
  const PoolCase& k = GetParam();
  EXPECT_TRUE(CudaMatchesCpu(PoolGraph(k, "MaxPool"), Batch(k.n)));
}

// Values on a coarse grid: most windows hold ties, which must go to the same input as on
// the CPU (the first in scan order), or the input gradients differ.
TEST_P(CudaPoolTest, MaxPoolBreaksTiesAsCpu) {
  FM_SKIP_WITHOUT_CUDA();
  const PoolCase& k = GetParam();
  CudaCheckOptions o = Batch(k.n);
  std::vector<float> x = RandomVector(k.n * k.c * (k.one_d ? 1 : k.h) * k.w, 17);
  for (float& v : x) v = std::round(v);
  o.inputs = {x};
  EXPECT_TRUE(CudaMatchesCpu(PoolGraph(k, "MaxPool"), o));
}

TEST_P(CudaPoolTest, AveragePoolMatchesCpu) {
  FM_SKIP_WITHOUT_CUDA();
  const PoolCase& k = GetParam();
  for (int include_pad : {0, 1}) {
    SCOPED_TRACE("count_include_pad " + std::to_string(include_pad));
    EXPECT_TRUE(CudaMatchesCpu(PoolGraph(k, "AveragePool", include_pad), Batch(k.n)));
  }
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    CudaGraphConvPoolNorm, CudaPoolTest,
    ::testing::Values(
        //        name        n  c  h  w kh kw sh sw pt pl pb pr ceil
        PoolCase{"K2S2", 2, 3, 6, 5, 2, 2, 2, 2, 0, 0, 0, 0, false},
        PoolCase{"K3S2Pad1", 1, 2, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, false},
        PoolCase{"CeilMode", 1, 2, 6, 8, 3, 3, 2, 2, 0, 0, 0, 0, true},
        PoolCase{"CeilModeDropsWindowInPadding", 1, 1, 5, 5, 2, 2, 2, 2, 1, 1, 1, 1, true},
        PoolCase{"CeilModeWithPads", 1, 2, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, true},
        PoolCase{"AsymmetricPads", 2, 1, 5, 6, 3, 2, 1, 2, 1, 0, 0, 1, false},
        PoolCase{"OneD", 2, 3, 1, 9, 1, 3, 1, 2, 0, 1, 0, 1, true, true},
        PoolCase{"OneDCeilK2", 1, 1, 1, 5, 1, 2, 1, 2, 0, 0, 0, 0, true, true},
        PoolCase{"SameUpper", 2, 2, 7, 6, 3, 2, 2, 2, 0, 0, 0, 0, false, false, "SAME_UPPER"},
        PoolCase{"SameLower", 2, 2, 7, 6, 3, 3, 2, 1, 0, 0, 0, 0, false, false, "SAME_LOWER"},
        // Real sizes: overlapping windows (stride 1 < kernel 3) and many blocks.
        PoolCase{"Batch32K2S2", 32, 16, 32, 32, 2, 2, 2, 2, 0, 0, 0, 0, false},
        PoolCase{"Batch32K3S1Pad1", 32, 16, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, false},
        PoolCase{"Batch16K3S2CeilPads", 16, 8, 31, 31, 3, 3, 2, 2, 1, 1, 1, 1, true}),
    [](const ::testing::TestParamInfo<PoolCase>& info) { return info.param.name; });
// clang-format on

// MaxPool with its Indices output present but unnamed (what return_indices=False exports).
TEST(CudaGraphConvPoolNorm, MaxPoolWithUnnamedIndicesOutput) {
  FM_SKIP_WITHOUT_CUDA();
  Node node{"", "MaxPool", {"x"}, {}, {}};
  node.attrs["kernel_shape"] = Ints({2});
  node.attrs["strides"] = Ints({2});
  node.attrs["ceil_mode"] = Int(1);
  Graph g = OneNodeGraph(node, {}, BatchInput({1, 1, 5}));
  g.nodes[0].outputs.push_back("");
  CudaCheckOptions o = Batch(3);
  EXPECT_TRUE(CudaMatchesCpu(g, o));
}

TEST(CudaGraphConvPoolNorm, GlobalAveragePool) {
  FM_SKIP_WITHOUT_CUDA();
  for (const Dims& xd : {Dims{2, 3, 4, 5}, Dims{3, 4, 7}, Dims{32, 64, 8, 8}, Dims{4, 8, 64, 64}}) {
    SCOPED_TRACE(DimsToString(xd));
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "GlobalAveragePool", {"x"}, {}, {}}, {}, BatchInput(xd)),
                               Batch(xd[0])));
  }
}

// ---- BatchNormalization ---------------------------------------------------------------------

// BatchNorm over x [N, C, ...] (a graph input) with `outputs` outputs; running variance
// positive.
Graph BatchNormGraph(const Dims& xd, int outputs, float momentum, uint64_t seed) {
  Node node{"", "BatchNormalization", {"x", "scale", "b", "mean", "var"}, {}, {}};
  node.attrs["momentum"] = Attribute::OfFloat(momentum);
  const Dims c = {xd[1]};
  Tensor var = Init("var", c, seed + 4, 0.2f, 1.0f);
  for (float& v : var.f) v = std::fabs(v);
  return OneNodeGraph(node,
                      {Init("scale", c, seed + 1, 0.5f, 1.0f), Init("b", c, seed + 2), Init("mean", c, seed + 3, 0.3f),
                       var},
                      BatchInput(xd), outputs);
}

TEST(CudaGraphConvPoolNorm, BatchNormTrainingMatchesCpu) {
  FM_SKIP_WITHOUT_CUDA();
  struct Case {
    Dims x;
    int outputs;
    float momentum;
  };
  for (const Case& k : {Case{{2, 2, 2}, 5, 0.8f}, Case{{4, 3, 3, 2}, 3, 0.9f}, Case{{5, 3}, 3, 0.9f},
                        Case{{2, 2, 2}, 1, 0.9f}, Case{{32, 16, 32, 32}, 5, 0.9f}, Case{{256, 64}, 3, 0.1f},
                        Case{{3, 5, 1000}, 1, 0.9f}}) {
    SCOPED_TRACE(DimsToString(k.x) + " outputs " + std::to_string(k.outputs));
    EXPECT_TRUE(CudaMatchesCpu(BatchNormGraph(k.x, k.outputs, k.momentum, 30), Batch(k.x[0])));
  }
}

TEST(CudaGraphConvPoolNorm, BatchNormEvaluationMatchesCpu) {
  FM_SKIP_WITHOUT_CUDA();
  for (const Dims& xd : {Dims{2, 2, 2}, Dims{1, 2}, Dims{32, 16, 32, 32}}) {
    SCOPED_TRACE(DimsToString(xd));
    EXPECT_TRUE(CudaMatchesCpu(BatchNormGraph(xd, 5, 0.8f, 40), Batch(xd[0], false)));
  }
}

// Activations far from zero: the two-pass variance keeps them accurate on both sides.
TEST(CudaGraphConvPoolNorm, BatchNormLargeOffsetActivations) {
  FM_SKIP_WITHOUT_CUDA();
  CudaCheckOptions o = Batch(16);
  std::vector<float> x = RandomVector(16 * 8 * 12 * 12, 50);
  for (float& v : x) v = 100.0f + 3.0f * v;
  o.inputs = {x};
  EXPECT_TRUE(CudaMatchesCpu(BatchNormGraph({16, 8, 12, 12}, 3, 0.9f, 50), o));
}

// ---- LayerNormalization ---------------------------------------------------------------------

Graph LayerNormGraph(const Dims& xd, int64_t axis, bool bias, int outputs, float epsilon = 1e-5f) {
  Node node{"", "LayerNormalization", {"x", "s"}, {}, {}};
  node.attrs["axis"] = Int(axis);
  node.attrs["epsilon"] = Attribute::OfFloat(epsilon);
  const int64_t ax = axis < 0 ? axis + static_cast<int64_t>(xd.size()) : axis;
  const Dims norm(xd.begin() + ax, xd.end());
  std::vector<Tensor> inits = {Init("s", norm, 62, 0.5f, 1.0f)};
  if (bias) {
    node.inputs.push_back("b");
    inits.push_back(Init("b", norm, 63));
  }
  return OneNodeGraph(node, inits, BatchInput(xd), outputs);
}

TEST(CudaGraphConvPoolNorm, LayerNormMatchesCpu) {
  FM_SKIP_WITHOUT_CUDA();
  struct Case {
    Dims x;
    int64_t axis;
    bool bias;
    int outputs;
  };
  for (const Case& k : {Case{{2, 3, 4}, 1, true, 3}, Case{{2, 3, 4}, -1, true, 3}, Case{{3, 2, 5}, -1, true, 3},
                        Case{{2, 3, 3}, 1, false, 1}, Case{{5, 2, 3}, -2, true, 3}, Case{{32, 64, 384}, -1, true, 1},
                        Case{{16, 32, 64}, 1, false, 3}, Case{{4096, 8}, -1, true, 3}}) {
    SCOPED_TRACE(DimsToString(k.x) + " axis " + std::to_string(k.axis));
    EXPECT_TRUE(CudaMatchesCpu(LayerNormGraph(k.x, k.axis, k.bias, k.outputs, 1e-3f), Batch(k.x[0])));
  }
}

// The CPU test's "no B, axis 1, Mean output unnamed" case.
TEST(CudaGraphConvPoolNorm, LayerNormWithUnnamedMeanOutput) {
  FM_SKIP_WITHOUT_CUDA();
  Graph g = LayerNormGraph({2, 3, 3}, 1, false, 1);
  g.nodes[0].outputs.push_back("");
  EXPECT_TRUE(CudaMatchesCpu(g, Batch(2)));
}

}  // namespace
}  // namespace fedmesh::graph
