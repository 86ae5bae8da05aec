// The CUDA kernels of the broadcasting binary ops, Where, Softmax / LogSoftmax, the
// reductions, Transpose, Concat, Gather and Pad against their CPU kernels
// (cuda_graph_check.h: outputs, parameter and input gradients within 1e-4 relative, and
// a second Backward bit for bit equal). The cases mirror graph_ops_test.cc's, plus one
// larger shape per op ([64, 129, 33]: many blocks, grid-stride loops, and every
// fixed-order sum kernel of cuda_shape.h), plus Gather's index errors on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/cuda_backend.h"
#include "core/graph/graph_model.h"
#include "core/rng.h"
#include "tests/core/cuda_graph_check.h"
#include "tests/core/graph_test_util.h"

namespace fedmesh::graph {
namespace {

// `n` indices in [-len, len): negative ones and repeats included.
std::vector<int64_t> RandomIndices(size_t n, int64_t len, Rng& rng) {
  std::vector<int64_t> v(n);
  for (auto& k : v) k = static_cast<int64_t>(rng.UniformInt(2 * len)) - len;
  return v;
}

const Dims kBig{64, 129, 33};

TEST(CudaGraphOps, BroadcastingBinaryOps) {
  FM_SKIP_WITHOUT_CUDA();
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    for (const Dims& b : {Dims{2, 3, 4}, Dims{3, 1}, Dims{4}, Dims{1}, Dims{1, 3, 1}}) {
      SCOPED_TRACE(std::string(op) + " with b " + DimsToString(b));
      Rng rng(1);
      EXPECT_TRUE(CudaMatchesCpu(
          OneNodeGraph(Node{"", op, {"a", "b"}, {}, {}}, {F("a", {2, 3, 4}, rng), F("b", b, rng, 0.5f, 1.5f)})));
      // The broadcast operand first (the divisor away from 0 again).
      EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", op, {"b", "a"}, {}, {}},
                                              {F("a", {2, 3, 4}, rng, 0.5f, 1.5f), F("b", b, rng)})));
    }
}

TEST(CudaGraphOps, BothOperandsBroadcastAndOneOperandTwice) {
  FM_SKIP_WITHOUT_CUDA();
  Rng rng(11);
  EXPECT_TRUE(CudaMatchesCpu(
      OneNodeGraph(Node{"", "Mul", {"a", "b"}, {}, {}}, {F("a", {3, 1, 5}, rng), F("b", {4, 1}, rng)})));
  // din[0] and din[1] are one buffer: both gradients must land, in a fixed order.
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Mul", {"a", "a"}, {}, {}}, {F("a", {3, 4}, rng)})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Add", {"a", "a"}, {}, {}}, {F("a", {3, 4}, rng)})));
}

TEST(CudaGraphOps, BroadcastingBinaryOpsLarge) {
  FM_SKIP_WITHOUT_CUDA();
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    for (const Dims& b : {kBig, Dims{33}, Dims{129, 1}, Dims{64, 1, 33}, Dims{1}}) {
      SCOPED_TRACE(std::string(op) + " with b " + DimsToString(b));
      Rng rng(2);
      CudaCheckOptions o;
      // b [1] sums 272k terms: the CPU reference's serial float sum alone drifts ~3e-5.
      if (b == Dims{1}) o.rel = 3e-4;
      EXPECT_TRUE(CudaMatchesCpu(
          OneNodeGraph(Node{"", op, {"a", "b"}, {}, {}}, {F("a", kBig, rng), F("b", b, rng, 0.5f, 1.5f)}), o));
    }
}

TEST(CudaGraphOps, PowWithScalarAndTensorExponent) {
  FM_SKIP_WITHOUT_CUDA();
  Rng rng(3);
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Pow", {"a", "e"}, {}, {}},
                                          {F("a", {3, 4}, rng, 0.5f, 2.0f), F("e", {4}, rng, 0.5f, 3.0f)})));
  // Exponent exactly 2: the CPU's a * a path.
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Pow", {"a", "e"}, {}, {}},
                                          {F("a", {3, 4}, rng, -2.0f, 2.0f), Tensor{"e", DType::kFloat32, {1}, {2.0f}, {}}})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Pow", {"a", "e"}, {}, {}},
                                          {F("a", kBig, rng, 0.5f, 2.0f), F("e", {33}, rng, 0.5f, 3.0f)})));
}

TEST(CudaGraphOps, WhereWithBroadcasting) {
  FM_SKIP_WITHOUT_CUDA();
  Rng rng(4);
  std::vector<int64_t> cond;
  for (int i = 0; i < 24; ++i) cond.push_back((i * 7) % 3 == 0);
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Where", {"c", "a", "b"}, {}, {}},
                                          {I("c", {2, 3, 4}, cond), F("a", {2, 3, 4}, rng), F("b", {3, 1}, rng)})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Where", {"c", "a", "b"}, {}, {}},
                                          {I("c", {4}, {1, 0, 0, 1}), F("a", {1}, rng), F("b", {3, 4}, rng)})));
  // a and b the same tensor: both gradients accumulate into one buffer.
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Where", {"c", "a", "a"}, {}, {}},
                                          {I("c", {4}, {1, 0, 0, 1}), F("a", {3, 4}, rng)})));
  std::vector<int64_t> big_cond;
  for (int64_t i = 0; i < NumElements(kBig); ++i) big_cond.push_back((i * 7) % 3 == 0);
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Where", {"c", "a", "b"}, {}, {}},
                                          {I("c", kBig, big_cond), F("a", kBig, rng), F("b", {129, 1}, rng)})));
}

TEST(CudaGraphOps, SoftmaxAndLogSoftmaxAlongEveryAxis) {
  FM_SKIP_WITHOUT_CUDA();
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (int64_t axis : {0, 1, -1}) {
      SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis));
      Node n{"", op, {"x"}, {}, {}};
      n.attrs["axis"] = Int(axis);
      Rng rng(5);
      EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("x", {2, 3, 4}, rng, -2.0f, 2.0f)})));
      EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("x", kBig, rng, -4.0f, 4.0f)})));
      // Opset 11: the input coerced to 2-D at the axis.
      EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("x", {2, 3, 4}, rng, -2.0f, 2.0f)}, {}, 1, 11)));
    }
}

TEST(CudaGraphOps, SoftmaxDefaultAxesAndARunTimeInput) {
  FM_SKIP_WITHOUT_CUDA();
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (int64_t opset : {11, 17}) {
      SCOPED_TRACE(std::string(op) + " opset " + std::to_string(opset));
      Rng rng(6);
      EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", op, {"x"}, {}, {}}, {F("x", {3, 4, 5}, rng)}, {}, 1, opset)));
      // x a graph input (its gradient compared too), a batch of 64.
      CudaCheckOptions o;
      o.batch = 64;
      EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", op, {"x"}, {}, {}}, {},
                                              {ValueInfo{"x", DType::kFloat32, {-1, 129, 33}}}, 1, opset),
                                 o));
    }
}

TEST(CudaGraphOps, Reductions) {
  FM_SKIP_WITHOUT_CUDA();
  for (const char* op : {"ReduceMean", "ReduceSum"})
    for (int keep : {0, 1}) {
      SCOPED_TRACE(std::string(op) + " keepdims " + std::to_string(keep));
      Rng rng(7);
      Node n{"", op, {"x"}, {}, {}};
      n.attrs["keepdims"] = Int(keep);
      if (std::string(op) == "ReduceMean") {
        n.attrs["axes"] = Ints({-1, 0});
        EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("x", {2, 3, 4}, rng)})));
        EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("x", kBig, rng)})));
      } else {
        n.inputs.push_back("axes");
        EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("x", {2, 3, 4}, rng), I("axes", {1}, {1})})));
        EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("x", kBig, rng), I("axes", {1}, {1})})));
      }
    }
}

TEST(CudaGraphOps, ReductionsOverEachAxisAllAxesAndNone) {
  FM_SKIP_WITHOUT_CUDA();
  for (const char* op : {"ReduceMean", "ReduceSum"}) {
    for (int64_t axis : {0, 1, 2, -1}) {
      SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis));
      Rng rng(8);
      Node n{"", op, {"x"}, {}, {}};
      n.attrs["axes"] = Ints({axis});
      EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("x", kBig, rng)})));
    }
    SCOPED_TRACE(op);
    Rng rng(9);
    // No axes: every axis, one sum of 272k terms (the CPU's serial float sum drifts ~3e-5).
    CudaCheckOptions o;
    o.rel = 3e-4;
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", op, {"x"}, {}, {}}, {F("x", kBig, rng)}), o));
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", op, {"x"}, {}, {}}, {F("x", {2, 3, 4}, rng)})));
    // noop_with_empty_axes: no axes reduce nothing.
    Node noop{"", op, {"x"}, {}, {}};
    noop.attrs["noop_with_empty_axes"] = Int(1);
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(noop, {F("x", {2, 3, 4}, rng)})));
  }
}

TEST(CudaGraphOps, Transpose) {
  FM_SKIP_WITHOUT_CUDA();
  Rng rng(10);
  for (const std::vector<int64_t>& perm : {std::vector<int64_t>{2, 0, 1}, std::vector<int64_t>{0, 2, 1},
                                           std::vector<int64_t>{1, 0, 2}, std::vector<int64_t>{}}) {
    SCOPED_TRACE("perm " + IntsToString(perm));
    Node tr{"", "Transpose", {"x"}, {}, {}};
    if (!perm.empty()) tr.attrs["perm"] = Ints(perm);  // empty: reversed dims
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(tr, {F("x", {2, 3, 4}, rng)})));
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(tr, {F("x", kBig, rng)})));
  }
  Node tr4{"", "Transpose", {"x"}, {}, {}};
  tr4.attrs["perm"] = Ints({1, 0, 3, 2});
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(tr4, {F("x", {2, 1, 4, 5}, rng)})));
}

TEST(CudaGraphOps, Concat) {
  FM_SKIP_WITHOUT_CUDA();
  Rng rng(11);
  // "a" twice: its two gradient slices accumulate into one buffer.
  Node cat{"", "Concat", {"a", "b", "a"}, {}, {}};
  cat.attrs["axis"] = Int(1);
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(cat, {F("a", {2, 3, 2}, rng), F("b", {2, 1, 2}, rng)})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(cat, {F("a", kBig, rng), F("b", {64, 7, 33}, rng)})));
  for (int64_t axis : {0, -1}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    Node c2{"", "Concat", {"a", "b"}, {}, {}};
    c2.attrs["axis"] = Int(axis);
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(c2, {F("a", {2, 3, 4}, rng), F("b", {2, 3, 4}, rng)})));
  }
}

TEST(CudaGraphOps, Gather) {
  FM_SKIP_WITHOUT_CUDA();
  Rng rng(12);
  EXPECT_TRUE(CudaMatchesCpu(
      OneNodeGraph(Node{"", "Gather", {"w", "i"}, {}, {}}, {F("w", {5, 3}, rng), I("i", {2, 2}, {4, 0, 4, -1})})));
  Node g1{"", "Gather", {"w", "i"}, {}, {}};
  g1.attrs["axis"] = Int(1);
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(g1, {F("w", {2, 5, 3}, rng), I("i", {3}, {1, 1, 3})})));
  // An embedding with many repeated rows, and axis 1 of a large tensor.
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Gather", {"w", "i"}, {}, {}},
                                          {F("w", {1000, 64}, rng), I("i", {64, 64}, RandomIndices(4096, 1000, rng))})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(g1, {F("w", kBig, rng), I("i", {300}, RandomIndices(300, 129, rng))})));
  // Indices as a run-time input (exact float integers, as the executor passes them).
  CudaCheckOptions o;
  o.inputs = {{3, -1, 3, 0, -5, 2}};
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Gather", {"w", "i"}, {}, {}}, {F("w", {5, 7}, rng)},
                                          {ValueInfo{"i", DType::kInt64, {6}}}),
                             o));
}

TEST(CudaGraphOps, GatherIndexOutOfRangeFailsForward) {
  FM_SKIP_WITHOUT_CUDA();
  auto made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Backend> be = std::move(*made);
  Rng rng(13);
  auto m = GraphModel::Create(OneNodeGraph(Node{"", "Gather", {"w", "i"}, {}, {}}, {F("w", {5, 3}, rng)},
                                           {ValueInfo{"i", DType::kInt64, {4}}}),
                              be.get());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->Plan(1).ok());
  auto forward = [&](std::vector<float> idx) {
    be->CopyFromHost((*m)->input(0, 1), idx.data(), idx.size() * sizeof(float));
    return (*m)->Forward(1, false, 0);
  };
  EXPECT_TRUE(forward({0, 4, -5, 2}).ok());
  for (const std::vector<float>& bad : {std::vector<float>{0, 5, 1, 9}, std::vector<float>{0, -6, 1, 2},
                                        std::vector<float>{0, 2.5f, 1, 2}, std::vector<float>{0, NAN, 1, 2}}) {
    const Status s = forward(bad);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
    // The first bad position is named, as on the CPU.
    EXPECT_NE(s.message().find("at position 1"), std::string::npos) << s.ToString();
  }
  // The backend is still usable: the error was the data's, not a CUDA failure.
  EXPECT_TRUE(forward({4, 3, 2, -1}).ok());
  EXPECT_TRUE(be->Synchronize().ok());
}

TEST(CudaGraphOps, Pad) {
  FM_SKIP_WITHOUT_CUDA();
  Rng rng(14);
  Node pad{"", "Pad", {"x", "p"}, {}, {}};
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(pad, {F("x", {2, 3}, rng), I("p", {4}, {0, 1, 2, 0})})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(pad, {F("x", kBig, rng), I("p", {6}, {1, 0, 2, 0, 3, 1})})));
  // constant_value as a scalar constant input.
  Node valued{"", "Pad", {"x", "p", "v"}, {}, {}};
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(valued, {F("x", {2, 3, 4}, rng), I("p", {6}, {1, 0, 2, 1, 1, 0}),
                                                   Tensor{"v", DType::kFloat32, {}, {1.5f}, {}}})));
  // Opset 10: pads and value as attributes.
  Node old{"", "Pad", {"x"}, {}, {}};
  old.attrs["pads"] = Ints({0, 2, 1, 1});
  old.attrs["value"] = Flt(-0.5f);
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(old, {F("x", {3, 4}, rng)}, {}, 1, 10)));
}

}  // namespace
}  // namespace fedmesh::graph
