// The GPU paths of the model, the trainer and the graph executor (staged batches, losses on
// host copies of the outputs, gradients copied out for a gradient hook, constants in device
// memory), run in CI on StagedCpuBackend: the CPU's kernels behind host_memory() == false.
// Same kernels in the same order, so every result must equal the plain CPU run bit for bit;
// the copy counters show the staging paths were taken.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/builtin_graph.h"
#include "core/env.h"
#include "core/loss.h"
#include "core/model.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/trainer.h"
#include "tests/core/random_dataset.h"
#include "tests/core/same_epoch_check.h"
#include "tests/core/staged_cpu_backend.h"

namespace fedmesh {
namespace {

TrainerOptions Options() {
  TrainerOptions opt;
  opt.batch_size = 32;
  opt.eval_batch_size = 100;
  opt.sgd.lr = 0.05f;
  opt.sgd.momentum = 0.9f;
  return opt;
}

// Same kernels in the same order: the same model, bit for bit.
void ExpectBitEqualEpoch(Model& a, Model& b, const Dataset& data, const TrainerOptions& opt) {
  ExpectSameEpoch(a, b, data, opt, {.rel = 0, .accuracy_points = 0});
}

TEST(StagedBackend, BuiltinAndGraphModelsTrainAsOnTheCpu) {
  const Dataset data = RandomImages(256, 3);
  auto cpu = MakeCpuBackend(1);
  for (const char* name : {"mlp", "cnn"}) {
    SCOPED_TRACE(name);
    ModelSpec spec;
    spec.name = name;
    spec.hidden = {64};
    spec.dropout = 0.25f;
    StagedCpuBackend staged(1);
    auto a = BuildModel(spec, cpu.get(), {BuiltinEngine::kLayers});  // the staged backend runs layers
    auto b = BuildModel(spec, &staged);
    ASSERT_TRUE(a.ok() && b.ok());
    (*a)->InitParams(7);
    (*b)->InitParams(7);
    ExpectSameEpoch(**a, **b, data, Options());
    // The same model as a graph (Dropout included).
    BuiltinGraphOptions go;
    go.training_dropout = true;
    auto g = BuiltinModelGraph(spec, (*a)->GetParams(), go);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    StagedCpuBackend staged_graph(1);
    auto ga = Model::CreateFromGraph(name, cpu.get(), *g);
    auto gb = Model::CreateFromGraph(name, &staged_graph, *g);
    ASSERT_TRUE(ga.ok() && gb.ok()) << gb.status().ToString();
    EXPECT_EQ((*ga)->GetParams(), (*gb)->GetParams());
    const int before = staged_graph.copies_in;
    ExpectBitEqualEpoch(**ga, **gb, data, Options());
    // Batches and labels went in by copies (8 steps: at least 16), not by host writes.
    EXPECT_GE(staged_graph.copies_in - before, 16);
  }
}

// bce_with_logits (pos_weight), mse, huber and weighted cross-entropy: the loss reads a host
// copy of the outputs and writes the gradient back.
TEST(StagedBackend, HostLossesTrainAsOnTheCpu) {
  auto cpu = MakeCpuBackend(1);
  for (const HostLossCase& c : HostLossCases()) {
    SCOPED_TRACE(LossKindName(c.loss.kind));
    const Dataset data = RandomTable(200, 12, c, 21);
    ModelSpec spec;
    spec.name = "mlp";
    spec.input_shape = {12};
    spec.num_classes = c.outputs;
    spec.hidden = {16};
    StagedCpuBackend staged(1);
    auto a = BuildModel(spec, cpu.get(), {BuiltinEngine::kLayers});  // the staged backend runs layers
    auto b = BuildModel(spec, &staged);
    ASSERT_TRUE(a.ok() && b.ok());
    (*a)->InitParams(3);
    (*b)->InitParams(3);
    TrainerOptions opt = Options();
    opt.loss = c.loss;
    const int before = staged.copies_out;
    ExpectBitEqualEpoch(**a, **b, data, opt);
    EXPECT_GT(staged.copies_out - before, 7);  // the outputs of every step came out
  }
}

// A gradient hook (an all-reduce's place) sees the step's gradients in host memory and its
// changes reach the optimizer: halving them gives the CPU's halved run, not the plain one.
TEST(StagedBackend, GradientHookSeesAndChangesHostCopies) {
  const Dataset data = RandomImages(128, 4);
  auto cpu = MakeCpuBackend(1);
  ModelSpec spec;
  spec.name = "mlp";
  spec.hidden = {32};
  auto run = [&](Backend* be, bool hook, std::vector<float>* first_grads) {
    auto m = BuildModel(spec, be, {BuiltinEngine::kLayers});
    EXPECT_TRUE(m.ok());
    (*m)->InitParams(5);
    TrainerOptions opt = Options();
    if (hook) {
      opt.gradient_hook = [first_grads](std::span<float> g) {
        if (first_grads->empty()) first_grads->assign(g.begin(), g.end());
        for (float& v : g) v *= 0.5f;
        return Status::OK();
      };
    }
    SeededEnv env(nullptr, 9);
    Trainer t(m->get(), opt, &env);
    EXPECT_TRUE(t.TrainEpoch(data).ok());
    return (*m)->GetParams();
  };
  std::vector<float> seen_cpu, seen_staged, unused;
  StagedCpuBackend staged(1);
  const std::vector<float> on_cpu = run(cpu.get(), true, &seen_cpu);
  const std::vector<float> on_staged = run(&staged, true, &seen_staged);
  EXPECT_EQ(seen_staged, seen_cpu);
  ASSERT_FALSE(seen_cpu.empty());
  EXPECT_EQ(on_staged, on_cpu);
  EXPECT_NE(on_staged, run(cpu.get(), false, &unused));
}

}  // namespace
}  // namespace fedmesh
