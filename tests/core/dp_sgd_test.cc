// DP-SGD in core: Model::ForwardBackwardClipped against a loop over single examples, the
// models it refuses, and Trainer's DP loop (Poisson batches, noise, the q = 1 case).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/env.h"
#include "core/graph/graph_model.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/trainer.h"

namespace fedmesh {
namespace {

Dataset RandomData(size_t n, std::vector<int> shape, int classes, uint64_t seed) {
  Dataset d;
  d.sample_shape = shape;
  d.num_classes = classes;
  int features = 1;
  for (int v : shape) features *= v;
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(i % classes);
    d.labels.push_back(label);
    for (int f = 0; f < features; ++f) {
      // Class-dependent means, so training can learn something.
      d.features.push_back(static_cast<float>(rng.Normal(f % classes == label ? 1.0 : 0.0, 1.0)));
    }
  }
  return d;
}

Dataset RandomData(size_t n, int features, int classes, uint64_t seed) {
  return RandomData(n, std::vector<int>{features}, classes, seed);
}

std::unique_ptr<Model> Build(const std::string& name, Backend* be, std::vector<int> input,
                             int classes, std::vector<int> hidden = {16}) {
  ModelSpec spec;
  spec.name = name;
  spec.input_shape = std::move(input);
  spec.num_classes = classes;
  spec.hidden = std::move(hidden);
  auto m = BuildModel(spec, be);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  (*m)->InitParams(3);
  (*m)->Reserve(64);
  return std::move(*m);
}

std::unique_ptr<Model> Build(const std::string& name, Backend* be, int features, int classes,
                             std::vector<int> hidden = {16}) {
  return Build(name, be, std::vector<int>{features}, classes, std::move(hidden));
}

double Norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

// The reference: each example alone (batch 1, so its mean loss is its own), its gradient
// clipped and summed in double.
void LoopReference(Model& m, const Dataset& d, const std::vector<uint32_t>& idx, double clip,
                   std::vector<double>* norms, std::vector<double>* sum) {
  sum->assign(m.num_params(), 0.0);
  norms->clear();
  for (uint32_t i : idx) {
    m.LoadBatch(d, &i, 1);
    m.ForwardBackward(1, 0);
    const std::vector<float> g = m.GetGrads();
    const double n = Norm(g);
    norms->push_back(n);
    const double c = std::min(1.0, clip / (n + 1e-6));
    for (size_t k = 0; k < g.size(); ++k) (*sum)[k] += c * g[k];
  }
}

// A model to clip: a built-in one (its efficient per-layer rules) or an ONNX graph (one
// example at a time), with the input its data has.
struct ClipCase {
  std::string label;
  std::string model;  // built-in name, or a path under tests/fixtures/onnx
  std::vector<int> input;
  int classes = 4;
  // Graph models: every parameterised node has a per-example norm rule (one batched pass,
  // GraphModel::ClippedBackward); false: the examples run one at a time.
  bool rules = true;
  int ids = 0;  // > 0: the features are integer ids in [0, ids) (an embedding's input)
};

std::ostream& operator<<(std::ostream& os, const ClipCase& c) { return os << c.label; }

class PerExampleClipping : public ::testing::TestWithParam<ClipCase> {};

TEST_P(PerExampleClipping, NormsAndClippedSumEqualALoopOverSingleExamples) {
  const ClipCase& c = GetParam();
  auto be = MakeCpuBackend(1);
  const int batch = 10;
  Dataset d = RandomData(40, c.input, c.classes, 11);
  if (c.ids > 0) {
    Rng rng(12);
    for (float& v : d.features) v = static_cast<float>(rng.NextU64() % c.ids);
  }
  const bool onnx = c.model.find(".onnx") != std::string::npos;
  auto m = Build(onnx ? std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/" + c.model : c.model,
                 be.get(), c.input, c.classes, {16, 8});
  ASSERT_TRUE(m->SupportsPerExampleClipping().ok()) << m->SupportsPerExampleClipping().ToString();
  if (onnx) {
    EXPECT_EQ(m->graph_model()->PerExampleRulesCover().ok(), c.rules)
        << m->graph_model()->PerExampleRulesCover().ToString();
  }
  std::vector<uint32_t> idx(batch);
  std::iota(idx.begin(), idx.end(), 5u);
  for (double clip : {1e9, 0.0 /* the median norm, set below */}) {
    std::vector<double> ref_norms, ref_sum;
    LoopReference(*m, d, idx, 1e9, &ref_norms, &ref_sum);
    if (clip == 0.0) {
      std::vector<double> sorted = ref_norms;
      std::sort(sorted.begin(), sorted.end());
      clip = sorted[batch / 2];  // about half the examples are clipped
      LoopReference(*m, d, idx, clip, &ref_norms, &ref_sum);
    }
    m->LoadBatch(d, idx.data(), batch);
    const double loaded_loss = m->Evaluate(batch).loss_sum;
    std::vector<float> norms(batch);
    auto r = m->ForwardBackwardClipped(batch, 0, clip, norms.data());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int j = 0; j < batch; ++j) EXPECT_NEAR(norms[j], ref_norms[j], 1e-4 * ref_norms[j]) << j;
    const std::vector<float> g = m->GetGrads();
    double err = 0, ref = 0;
    for (size_t k = 0; k < g.size(); ++k) {
      err += (g[k] - ref_sum[k]) * (g[k] - ref_sum[k]);
      ref += ref_sum[k] * ref_sum[k];
    }
    EXPECT_GT(ref, 0.0);
    EXPECT_LT(std::sqrt(err / ref), 1e-5) << "clip " << clip;
    // The loaded batch is intact: the same loss as before clipping.
    EXPECT_DOUBLE_EQ(m->Evaluate(batch).loss_sum, loaded_loss);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, PerExampleClipping,
    ::testing::Values(ClipCase{"logreg", "logreg", {12}}, ClipCase{"mlp", "mlp", {12}},
                      // Conv2d (5x5, 32 and 64 channels), MaxPool, Dense, on 8x8 images.
                      ClipCase{"cnn", "cnn", {8, 8, 1}},
                      // Graph models: Gemm, LayerNormalization, Gelu (Erf and tanh forms) ...
                      ClipCase{"onnx_tabular_mlp", "tabular_mlp/model_eval.onnx", {20}, 3},
                      // ... Gemm under Softmax, Concat, Reshape, Transpose, ReduceMean ...
                      ClipCase{"onnx_opzoo", "opzoo/model_eval.onnx", {6}, 5},
                      // ... Conv (grouped, strided, dilated), pooling, Gemm ...
                      ClipCase{"onnx_conv", "resnet_bn/model_eval.onnx", {28, 28, 1}, 10},
                      // ... and Gather with a trained embedding (no rule: one example at a time).
                      ClipCase{"onnx_embedding", "embedding/model_eval.onnx", {4}, 2, false, 50}),
    [](const ::testing::TestParamInfo<ClipCase>& i) { return i.param.label; });

TEST(PerExampleClippingRefusals, ClassWeightsAndBadClipAreRefused) {
  auto be = MakeCpuBackend(1);
  auto mlp = Build("mlp", be.get(), 6, 3);
  LossOptions weighted;
  weighted.class_weights = {1, 2, 3};
  ASSERT_TRUE(mlp->SetLoss(weighted).ok());
  EXPECT_NE(mlp->SupportsPerExampleClipping().message().find("class weights"), std::string::npos);
  ASSERT_TRUE(mlp->SetLoss(LossOptions{}).ok());
  EXPECT_TRUE(mlp->SupportsPerExampleClipping().ok());
  EXPECT_FALSE(mlp->ForwardBackwardClipped(1, 0, -1.0, nullptr).ok());
  EXPECT_FALSE(mlp->ForwardBackwardClipped(1, 0, NAN, nullptr).ok());
}

TEST(PerExampleClippingRefusals, BatchNormGraphIsRefusedNamingBatchNorm) {
  auto be = MakeCpuBackend(1);
  ModelSpec spec;
  spec.name = std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/resnet_bn/model_train.onnx";
  auto m = BuildModel(spec, be.get());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Status s = (*m)->SupportsPerExampleClipping();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("BatchNormalization"), std::string::npos) << s.message();
}

TrainerOptions DpOptions(int batch, double clip, double z, std::vector<double>* stddevs) {
  TrainerOptions o;
  o.batch_size = batch;
  o.sgd.lr = 0.1f;
  o.dp.enabled = true;
  o.dp.clip = clip;
  o.dp.noise_multiplier = z;
  o.dp.add_noise = [stddevs](std::span<float> x, double stddev) {
    stddevs->push_back(stddev);
    Rng rng(stddevs->size());
    for (float& v : x) v += static_cast<float>(rng.Normal(0.0, stddev));
  };
  return o;
}

TEST(DpSgdTrainer, FullBatchWithoutNoiseOrClippingIsPlainGradientDescent) {
  auto be = MakeCpuBackend(1);
  const Dataset d = RandomData(32, 8, 3, 5);
  auto dp_model = Build("mlp", be.get(), 8, 3);
  auto plain_model = Build("mlp", be.get(), 8, 3);
  std::vector<double> stddevs;
  SeededEnv env1(nullptr, 1), env2(nullptr, 1);
  Trainer dp(dp_model.get(), DpOptions(32, 1e9, 0.0, &stddevs), &env1);
  TrainerOptions plain_options;
  plain_options.batch_size = 32;
  plain_options.sgd.lr = 0.1f;
  Trainer plain(plain_model.get(), plain_options, &env2);
  for (int e = 0; e < 3; ++e) {
    auto a = dp.TrainEpoch(d);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->dp_steps, 1);  // q = 1: every example, one step
    EXPECT_EQ(a->samples, 32);
    EXPECT_DOUBLE_EQ(a->dp_sampling_rate, 1.0);
    ASSERT_TRUE(plain.TrainEpoch(d).ok());
  }
  const auto p = dp_model->GetParams(), r = plain_model->GetParams();
  for (size_t k = 0; k < p.size(); ++k) ASSERT_NEAR(p[k], r[k], 1e-5) << k;
  EXPECT_EQ(stddevs, std::vector<double>(3, 0.0));
}

TEST(DpSgdTrainer, PoissonBatchesNoiseScaleAndLearning) {
  auto be = MakeCpuBackend(1);
  const Dataset d = RandomData(2000, 10, 2, 9);
  auto m = Build("mlp", be.get(), 10, 2);
  std::vector<double> stddevs;
  SeededEnv env(nullptr, 7);
  Trainer t(m.get(), DpOptions(50, 1.0, 0.8, &stddevs), &env);
  int64_t steps = 0, samples = 0;
  for (int e = 0; e < 5; ++e) {
    auto s = t.TrainEpoch(d);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->dp_steps, 40);  // ceil(2000 / 50)
    EXPECT_DOUBLE_EQ(s->dp_sampling_rate, 0.025);
    steps += s->dp_steps;
    samples += s->samples;
  }
  // Poisson batches: 200 steps of Binomial(2000, 0.025), mean 50, sd of the mean 0.49.
  EXPECT_NEAR(double(samples) / steps, 50.0, 2.5);
  ASSERT_EQ(stddevs.size(), 200u);
  for (double s : stddevs) ASSERT_DOUBLE_EQ(s, 0.8);
  auto ev = t.Evaluate(d);
  ASSERT_TRUE(ev.ok());
  EXPECT_GT(ev->accuracy, 0.9);  // the two classes are a unit apart in 5 of 10 features
}

TEST(DpSgdTrainer, OptionsAreChecked) {
  std::vector<double> stddevs;
  TrainerOptions o = DpOptions(8, 1.0, 1.0, &stddevs);
  EXPECT_TRUE(ValidateTrainerOptions(o).ok());
  o.dp.clip = 0;
  EXPECT_FALSE(ValidateTrainerOptions(o).ok());
  o.dp.clip = 1;
  o.dp.noise_multiplier = -1;
  EXPECT_FALSE(ValidateTrainerOptions(o).ok());
  o.dp.noise_multiplier = 1;
  o.dp.add_noise = nullptr;
  EXPECT_NE(ValidateTrainerOptions(o).message().find("noise source"), std::string::npos);
}

}  // namespace
}  // namespace fedmesh
