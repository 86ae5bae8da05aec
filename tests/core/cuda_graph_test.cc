// Graph models on the GPU: the CUDA graph kernels of core/cuda/graph/ written here (unary
// ops, Dropout, Gemm, MatMul, the relabelling ops) against the CPU kernels through
// CudaMatchesCpu (cuda_graph_check.h), the op table's coverage, and whole built-in models
// trained as graphs for an epoch on both backends. GPU-only tests skip without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/builtin_graph.h"
#include "core/env.h"
#include "core/graph/op_kernel.h"
#include "core/loss.h"
#include "core/model.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/trainer.h"
#include "tests/core/cuda_graph_check.h"
#include "tests/core/same_epoch_check.h"
#include "tests/core/graph_test_util.h"
#include "tests/core/random_dataset.h"

namespace fedmesh::graph {
namespace {


// Every op the CPU runs has a CUDA kernel, so any model fedmesh imports trains on a GPU
// (a build without CUDA has none). Needs no device.
TEST(CudaGraph, EveryCpuOpHasACudaKernel) {
#ifdef FEDMESH_HAVE_CUDA
  EXPECT_EQ(CudaSupportedOps(), SupportedOps());
#else
  EXPECT_TRUE(CudaSupportedOps().empty());
#endif
}

TEST(CudaGraph, UnaryOpsMatchCpu) {
  FM_SKIP_WITHOUT_CUDA();
  for (const Dims& dims : {Dims{3, 5}, Dims{64, 129, 33}}) {
    for (const char* op : {"Relu", "Sigmoid", "Tanh", "Gelu", "Erf", "Neg", "Exp", "Identity", "IsNaN"}) {
      SCOPED_TRACE(std::string(op) + " " + DimsToString(dims));
      Rng rng(3);
      EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", op, {"x"}, {}, {}}, {F("x", dims, rng, -2.0f, 2.0f)})));
    }
    Rng rng(4);
    for (const char* op : {"Sqrt", "Log"}) {
      SCOPED_TRACE(op);
      EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", op, {"x"}, {}, {}}, {F("x", dims, rng, 0.5f, 3.0f)})));
    }
    Node leaky{"", "LeakyRelu", {"x"}, {}, {}};
    leaky.attrs["alpha"] = Attribute::OfFloat(0.1f);
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(leaky, {F("x", dims, rng)})));
    Node gelu_tanh{"", "Gelu", {"x"}, {}, {}};
    gelu_tanh.attrs["approximate"] = Attribute::OfString("tanh");
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(gelu_tanh, {F("x", dims, rng, -3.0f, 3.0f)})));
  }
}

// The same mask as the CPU from the same seed (CounterUniform), both outputs, and the
// identity in evaluation.
TEST(CudaGraph, DropoutMatchesCpuInTrainingAndEvaluation) {
  FM_SKIP_WITHOUT_CUDA();
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "evaluation");
    Rng rng(5);
    Node d{"", "Dropout", {"x"}, {}, {}};
    d.attrs["ratio"] = Attribute::OfFloat(0.3f);
    CudaCheckOptions o;
    o.training = training;
    EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(d, {F("x", {37, 211}, rng)}, {}, 2), o));
  }
}

TEST(CudaGraph, GemmEveryTransposeAndBiasBroadcast) {
  FM_SKIP_WITHOUT_CUDA();
  for (int ta : {0, 1})
    for (int tb : {0, 1})
      for (const Dims& c : {Dims{5}, Dims{3, 5}, Dims{3, 1}, Dims{1}, Dims{1, 5}}) {
        SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb) + " C " + DimsToString(c));
        Rng rng(7);
        Node n{"", "Gemm", {"A", "B", "C"}, {}, {}};
        n.attrs["transA"] = Attribute::OfInt(ta);
        n.attrs["transB"] = Attribute::OfInt(tb);
        n.attrs["alpha"] = Attribute::OfFloat(0.7f);
        n.attrs["beta"] = Attribute::OfFloat(1.3f);
        EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("A", ta ? Dims{4, 3} : Dims{3, 4}, rng),
                                                    F("B", tb ? Dims{5, 4} : Dims{4, 5}, rng), F("C", c, rng)})));
      }
  // nn.Linear at a real size, the input a graph input (so its gradient is compared too).
  Rng rng(8);
  Node n{"", "Gemm", {"x", "W", "b"}, {}, {}};
  n.attrs["transB"] = Attribute::OfInt(1);
  CudaCheckOptions o;
  o.batch = 256;
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(n, {F("W", {128, 784}, rng, -0.05f, 0.05f), F("b", {128}, rng)},
                                          {{"x", DType::kFloat32, {-1, 784}}}),
                             o));
}

TEST(CudaGraph, MatMulSharedAndBatched) {
  FM_SKIP_WITHOUT_CUDA();
  Rng rng(8);
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "MatMul", {"A", "B"}, {}, {}}, {F("A", {2, 3, 4}, rng), F("B", {4, 5}, rng)})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "MatMul", {"A", "B"}, {}, {}}, {F("A", {2, 3, 4}, rng), F("B", {2, 4, 5}, rng)})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "MatMul", {"A", "B"}, {}, {}}, {F("A", {4}, rng), F("B", {4, 5}, rng)})));
}

TEST(CudaGraph, RelabellingOpsCopyAndPassGradients) {
  FM_SKIP_WITHOUT_CUDA();
  Rng rng(10);
  Node flat{"", "Flatten", {"x"}, {}, {}};
  flat.attrs["axis"] = Attribute::OfInt(2);
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(flat, {F("x", {2, 3, 4}, rng)})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Reshape", {"x", "s"}, {}, {}}, {F("x", {2, 3, 4}, rng), I("s", {3}, {0, -1, 2})})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Unsqueeze", {"x", "ax"}, {}, {}}, {F("x", {2, 3}, rng), I("ax", {2}, {0, -1})})));
  EXPECT_TRUE(CudaMatchesCpu(OneNodeGraph(Node{"", "Squeeze", {"x", "ax"}, {}, {}}, {F("x", {2, 1, 3}, rng), I("ax", {1}, {1})})));
  // Two nodes reading one value: their gradients add up (the executor's accumulation).
  Graph g = OneNodeGraph(Node{"", "Identity", {"x"}, {}, {}}, {F("x", {1000}, rng)});
  g.nodes.push_back(Node{"m", "Neg", {"x"}, {"z"}, {}});
  g.outputs.push_back({"z", DType::kFloat32, {}});
  EXPECT_TRUE(CudaMatchesCpu(g));
}

// The built-in models as graphs (Dropout included), one epoch on each backend from the same
// weights and the same batches and masks: the GPU trains the same model.
TEST(CudaGraph, BuiltinModelsAsGraphsTrainAnEpochAsOnTheCpu) {
  FM_SKIP_WITHOUT_CUDA();
  const Dataset data = RandomImages(512, 100);
  auto cpu_be = MakeCpuBackend(1);
  auto made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Backend> gpu_be = std::move(*made);
  for (const char* name : {"mlp", "cnn"}) {
    SCOPED_TRACE(name);
    ModelSpec spec;
    spec.name = name;
    spec.hidden = {128};
    spec.dropout = 0.25f;
    auto builtin = BuildModel(spec, cpu_be.get());
    ASSERT_TRUE(builtin.ok());
    (*builtin)->InitParams(7);
    BuiltinGraphOptions go;
    go.training_dropout = true;
    auto g = BuiltinModelGraph(spec, (*builtin)->GetParams(), go);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    auto cpu_model = Model::CreateFromGraph(name, cpu_be.get(), *g);
    auto gpu_model = Model::CreateFromGraph(name, gpu_be.get(), *g);
    ASSERT_TRUE(cpu_model.ok()) << cpu_model.status().ToString();
    ASSERT_TRUE(gpu_model.ok()) << gpu_model.status().ToString();
    ASSERT_EQ((*gpu_model)->GetParams(), (*cpu_model)->GetParams());
    ExpectSameEpoch(**cpu_model, **gpu_model, data, MomentumEpochOptions());
    const Status s = gpu_be->Synchronize();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// Losses computed on the host (bce_with_logits with pos_weight, mse, huber, weighted cross
// entropy): on a GPU the outputs come to the host and their gradient goes back; an epoch of
// a small tabular network trains as on the CPU.
TEST(CudaGraph, HostLossesTrainAsOnTheCpu) {
  FM_SKIP_WITHOUT_CUDA();
  auto cpu_be = MakeCpuBackend(1);
  auto made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Backend> gpu_be = std::move(*made);
  for (const HostLossCase& c : HostLossCases()) {
    SCOPED_TRACE(LossKindName(c.loss.kind));
    const Dataset data = RandomTable(300, 12, c, 21);
    Rng rng(22);
    Graph g;
    g.inputs = {{"x", DType::kFloat32, {-1, 12}}};
    g.outputs = {{"y", DType::kFloat32, {-1, c.outputs}}};
    g.initializers = {F("W1", {16, 12}, rng, -0.3f, 0.3f), F("b1", {16}, rng), F("W2", {c.outputs, 16}, rng, -0.3f, 0.3f),
                      F("b2", {c.outputs}, rng)};
    Node h{"h", "Gemm", {"x", "W1", "b1"}, {"h"}, {}};
    h.attrs["transB"] = Attribute::OfInt(1);
    Node y{"o", "Gemm", {"r", "W2", "b2"}, {"y"}, {}};
    y.attrs["transB"] = Attribute::OfInt(1);
    g.nodes = {h, Node{"t", "Tanh", {"h"}, {"r"}, {}}, y};
    auto cpu_model = Model::CreateFromGraph("tab", cpu_be.get(), g);
    auto gpu_model = Model::CreateFromGraph("tab", gpu_be.get(), g);
    ASSERT_TRUE(cpu_model.ok() && gpu_model.ok()) << gpu_model.status().ToString();
    TrainerOptions opt;
    opt.batch_size = 16;
    opt.sgd.lr = 0.05f;
    opt.sgd.momentum = 0.9f;
    opt.loss = c.loss;
    ExpectSameEpoch(**cpu_model, **gpu_model, data, opt, {.rel = 1e-4, .accuracy_points = -1, .env_seed = 5});
  }
}

}  // namespace
}  // namespace fedmesh::graph
