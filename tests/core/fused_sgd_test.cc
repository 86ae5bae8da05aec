// Plain SGD fused into the backward pass (Model::ForwardBackwardSgd, Layer::BackwardSgd) and
// the velocity-free SGD step. The fused step is ForwardBackward then SgdStep up to rounding:
// the GEMM rounds lr * dW before adding it to W, SgdStep's FMA does not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/env.h"
#include "core/model.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/sgd.h"
#include "core/trainer.h"

namespace fedmesh {
namespace {

Dataset RandomData(const SampleShape& shape, int classes, int n, uint64_t seed) {
  Dataset d;
  d.sample_shape = shape;
  d.num_classes = classes;
  Rng rng(seed);
  d.features.resize(static_cast<size_t>(n) * d.sample_size());
  for (float& v : d.features) v = static_cast<float>(rng.Uniform(0.0, 1.0));
  for (int i = 0; i < n; ++i) d.labels.push_back(static_cast<int32_t>(rng.Uniform(0.0, classes)));
  return d;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  const char* name;
  ModelSpec spec;
};

// Fashion-MNIST-sized mlp (OpenBLAS's large kernels), a small logreg (its small-matrix
// kernels), a two-hidden mlp with dropout, and the cnn, whose Conv2d has no fused form
// (the model's Backward-then-step fallback).
std::vector<Case> Cases() {
  std::vector<Case> cases;
  ModelSpec mlp;
  mlp.input_shape = {784};
  mlp.num_classes = 10;
  cases.push_back({"mlp", mlp});
  ModelSpec logreg;
  logreg.name = "logreg";
  logreg.input_shape = {12};
  logreg.num_classes = 3;
  cases.push_back({"logreg", logreg});
  ModelSpec deep = mlp;
  deep.hidden = {64, 32};
  deep.dropout = 0.25f;
  cases.push_back({"mlp_dropout", deep});
  ModelSpec cnn;
  cnn.name = "cnn";
  cnn.input_shape = {28, 28, 1};
  cnn.num_classes = 10;
  cases.push_back({"cnn", cnn});
  return cases;
}

TEST(FusedSgd, ForwardBackwardSgdEqualsForwardBackwardThenStepUpToRounding) {
  auto be = MakeCpuBackend(1);
  for (const Case& c : Cases())
  for (const BuiltinEngine engine : {BuiltinEngine::kLayers, BuiltinEngine::kGraph}) {
    SCOPED_TRACE(std::string(c.name) + (engine == BuiltinEngine::kGraph ? " on the graph" : " on layers"));
    auto fused = BuildModel(c.spec, be.get(), {engine});
    auto split = BuildModel(c.spec, be.get(), {engine});
    ASSERT_TRUE(fused.ok() && split.ok());
    (*fused)->InitParams(7);
    (*split)->InitParams(7);
    const Dataset data = RandomData(c.spec.input_shape, c.spec.num_classes, 64, 11);
    (*fused)->Reserve(32);
    (*split)->Reserve(32);
    Sgd sgd(split->get(), SgdOptions{.lr = 0.05f});
    const auto before = (*fused)->GetParams();
    std::vector<uint32_t> idx(32);
    for (int step = 0; step < 4; ++step) {
      // Batches of 32 and a partial 17.
      const int batch = step == 3 ? 17 : 32;
      std::iota(idx.begin(), idx.end(), static_cast<uint32_t>(step * 8));
      (*fused)->LoadBatch(data, idx.data(), batch);
      (*split)->LoadBatch(data, idx.data(), batch);
      const auto a = (*fused)->ForwardBackwardSgd(batch, 100 + step, 0.05f);
      const auto b = (*split)->ForwardBackward(batch, 100 + step);
      sgd.Step();
      EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-5 * b.loss_sum);
      EXPECT_EQ(a.correct, b.correct);
    }
    const auto got = (*fused)->GetParams(), want = (*split)->GetParams();
    double moved = 0, diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      moved = std::max(moved, std::abs(double(want[i]) - before[i]));
      diff = std::max(diff, std::abs(double(got[i]) - want[i]));
    }
    // Seen: moved 0.02-0.22, differences 4e-9 to 3e-8 (a few ulps of the weights).
    EXPECT_GT(moved, 1e-3);  // the weights moved
    EXPECT_LT(diff, 1e-6);
  }
}

TEST(FusedSgd, TrainerTakesTheFusedPathOnlyForPlainSgdAndLeavesNoVelocity) {
  auto be = MakeCpuBackend(1);
  ModelSpec spec;
  spec.input_shape = {784};
  spec.num_classes = 10;
  const Dataset data = RandomData(spec.input_shape, spec.num_classes, 100, 3);
  for (float momentum : {0.0f, 0.5f}) {
    SCOPED_TRACE(momentum);
    auto m = BuildModel(spec, be.get());
    ASSERT_TRUE(m.ok());
    (*m)->InitParams(1);
    SystemEnv env(5);
    TrainerOptions o;
    o.batch_size = 32;
    o.sgd.lr = 0.1f;
    o.sgd.momentum = momentum;
    Trainer t(m->get(), o, &env);
    EXPECT_EQ(t.optimizer().plain(), momentum == 0.0f);
    ASSERT_TRUE(t.TrainEpoch(data).ok());
    const auto v = t.optimizer().GetVelocity();
    const bool all_zero = std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
    // Momentum 0 keeps no velocity; momentum 0.5 does.
    EXPECT_EQ(all_zero, momentum == 0.0f);
  }
  // A FedProx anchor or weight decay makes the step more than plain.
  auto m = BuildModel(spec, be.get());
  ASSERT_TRUE(m.ok());
  Sgd prox(m->get(), SgdOptions{.lr = 0.1f, .prox_mu = 0.1f});
  EXPECT_TRUE(prox.plain());  // mu without an anchor does nothing
  ASSERT_TRUE(prox.SetProxAnchor(std::vector<float>((*m)->num_params(), 0.0f)).ok());
  EXPECT_FALSE(prox.plain());
  EXPECT_FALSE(Sgd(m->get(), SgdOptions{.lr = 0.1f, .weight_decay = 1e-4f}).plain());
}

TEST(FusedSgd, SgdStepWithoutVelocityIsTheMomentumZeroStep) {
  auto be = MakeCpuBackend(1);
  constexpr size_t n = 100'000;  // above the OpenMP threshold of the CPU kernels
  Rng rng(9);
  std::vector<float> w(n), g(n), anchor(n);
  for (size_t i = 0; i < n; ++i) {
    w[i] = static_cast<float>(rng.Normal(0, 1));
    g[i] = static_cast<float>(rng.Normal(0, 1));
    anchor[i] = static_cast<float>(rng.Normal(0, 1));
  }
  for (const SgdStepParams& p : {SgdStepParams{.lr = 0.1f},
                                 SgdStepParams{.lr = 0.1f, .weight_decay = 0.01f, .prox_mu = 0.3f}}) {
    std::vector<float> with = w, without = w, velocity(n, 0.0f);
    be->SgdStep(with.data(), g.data(), velocity.data(), anchor.data(), n, p);
    be->SgdStep(without.data(), g.data(), nullptr, anchor.data(), n, p);
    EXPECT_TRUE(SameBits(with, without));
    EXPECT_FALSE(SameBits(with, w));
  }
}

TEST(FusedSgdDeathTest, SgdStepRefusesAMissingVelocityWithMomentum) {
  auto be = MakeCpuBackend(1);
  std::vector<float> w(8, 1.0f), g(8, 1.0f);
  EXPECT_DEATH(be->SgdStep(w.data(), g.data(), nullptr, nullptr, w.size(),
                           SgdStepParams{.lr = 0.1f, .momentum = 0.9f}),
               "momentum");
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// TrainerOptions hooks (data-parallel training, node/allreduce_service.h): the gradient hook
// sees every step's gradients before the optimizer and may change them; the step hook runs
// after every step; an error from either ends the call with it.
TEST(TrainerHooks, GradientHookChangesWhatTheOptimizerAppliesAndStepHookCounts) {
  ModelSpec spec;
  spec.name = "logreg";
  spec.input_shape = {12};
  spec.num_classes = 3;
  auto backend = MakeCpuBackend(1);
  auto model = BuildModel(spec, backend.get());
  ASSERT_TRUE(model.ok());
  (*model)->InitParams(3);
  const std::vector<float> before = (*model)->GetParams();
  Dataset data = RandomData({12}, 3, 64, 5);
  TrainerOptions o;
  o.batch_size = 16;
  std::vector<int64_t> steps_seen;
  size_t grads_seen = 0;
  o.gradient_hook = [&](std::span<float> g) {
    grads_seen += g.size();
    std::fill(g.begin(), g.end(), 0.0f);  // nothing to apply
    return Status::OK();
  };
  o.step_hook = [&](int64_t steps) {
    steps_seen.push_back(steps);
    return Status::OK();
  };
  SystemEnv env(1);
  Trainer trainer(model->get(), o, &env);
  auto stats = trainer.TrainEpoch(data);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->steps, 4);
  EXPECT_EQ(steps_seen, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(grads_seen, 4 * (*model)->num_params());
  EXPECT_TRUE(SameBits((*model)->GetParams(), before)) << "zeroed gradients still moved the model";

  o.gradient_hook = [](std::span<float>) { return Status::DeadlineExceeded("neighbour gone"); };
  Trainer failing(model->get(), o, &env);
  auto failed = failing.TrainEpoch(data);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace fedmesh
