// Model construction, flat parameter buffer, determinism, and learning on small data.
#include "core/model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/env.h"
#include "core/layers/activations.h"
#include "core/layers/dense.h"
#include "core/model_zoo.h"
#include "core/trainer.h"

namespace fedmesh {
namespace {

class ModelTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = MakeCpuBackend(1);
};

TEST_F(ModelTest, ZooParameterCountsMatchArchitectures) {
  struct Case {
    std::string name;
    size_t params;
  };
  for (const Case& c : {Case{"logreg", 784 * 10 + 10},
                        Case{"mlp", 784 * 256 + 256 + 256 * 10 + 10},
                        Case{"cnn", (25 * 32 + 32) + (800 * 64 + 64) + (3136 * 512 + 512) + (512 * 10 + 10)}}) {
    ModelSpec spec;
    spec.name = c.name;
    auto m = BuildModel(spec, be_.get());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)->num_params(), c.params) << c.name;
  }
}

TEST_F(ModelTest, MlpHiddenSizesAreConfigurable) {
  ModelSpec spec;
  spec.hidden = {128, 64};
  auto m = BuildModel(spec, be_.get());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->num_params(), size_t(784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10));
}

TEST_F(ModelTest, UnknownModelAndBadShapesAreRejectedWithReason) {
  ModelSpec spec;
  spec.name = "resnet";
  auto m = BuildModel(spec, be_.get());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("known models: logreg, mlp, cnn"), std::string::npos);

  spec.name = "cnn";
  spec.input_shape = {12};  // tabular data
  m = BuildModel(spec, be_.get());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("tabular"), std::string::npos);

  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Dense>(5));  // no Flatten before Dense on an image
  auto bad = Model::Create("bad", be_.get(), {4, 4, 1}, 5, std::move(layers));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layer 0"), std::string::npos);
}

TEST_F(ModelTest, InitIsDeterministicBySeedAndParamsAreOneBuffer) {
  ModelSpec spec;
  auto a = BuildModel(spec, be_.get());
  auto b = BuildModel(spec, be_.get());
  ASSERT_TRUE(a.ok() && b.ok());
  (*a)->InitParams(7);
  (*b)->InitParams(7);
  EXPECT_EQ((*a)->GetParams(), (*b)->GetParams());
  (*b)->InitParams(8);
  EXPECT_NE((*a)->GetParams(), (*b)->GetParams());
  // He-uniform: first Dense has fan_in 784; its biases start at zero.
  const auto p = (*a)->GetParams();
  const float bound = std::sqrt(6.0f / 784.0f);
  double sq = 0;
  for (size_t i = 0; i < 784 * 256; ++i) {
    ASSERT_LE(std::abs(p[i]), bound);
    sq += double(p[i]) * p[i];
  }
  EXPECT_NEAR(sq / (784 * 256), bound * bound / 3, 0.02 * bound * bound / 3);  // Var of U(-b,b)
  for (size_t i = 784 * 256; i < 784 * 256 + 256; ++i) ASSERT_EQ(p[i], 0.0f);
}

TEST_F(ModelTest, SetParamsRejectsWrongSizeAndNonFiniteWithoutChangingAnything) {
  ModelSpec spec;
  spec.name = "logreg";
  auto m = BuildModel(spec, be_.get());
  ASSERT_TRUE(m.ok());
  (*m)->InitParams(1);
  const auto before = (*m)->GetParams();
  std::vector<float> wrong(before.size() - 1, 0.0f);
  EXPECT_EQ((*m)->SetParams(wrong).code(), StatusCode::kInvalidArgument);
  std::vector<float> nan = before;
  nan[5] = std::nanf("");
  auto s = (*m)->SetParams(nan);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("parameter 5"), std::string::npos);
  EXPECT_EQ((*m)->GetParams(), before);
}

// Two Gaussian blobs per class in 8-D: logreg and mlp must both separate them.
Dataset Blobs(int n, uint64_t seed) {
  Dataset d;
  d.sample_shape = {8};
  d.num_classes = 3;
  Rng rng(seed);
  for (int i = 0; i < n; ++i) {
    const int y = static_cast<int>(rng.UniformInt(3));
    for (int f = 0; f < 8; ++f) d.features.push_back(static_cast<float>(rng.Normal((f % 3 == y) ? 2.0 : 0.0, 0.7)));
    d.labels.push_back(y);
  }
  return d;
}

TEST_F(ModelTest, TrainerLearnsAndIsDeterministic) {
  const Dataset train = Blobs(600, 1), test = Blobs(300, 2);
  std::vector<float> final_params[2];
  for (int run = 0; run < 2; ++run) {
    ModelSpec spec;
    spec.input_shape = {8};
    spec.num_classes = 3;
    spec.hidden = {16};
    auto m = BuildModel(spec, be_.get());
    ASSERT_TRUE(m.ok());
    (*m)->InitParams(3);
    SystemEnv env(4);
    TrainerOptions o;
    o.batch_size = 16;
    o.sgd.lr = 0.05f;
    o.sgd.momentum = 0.9f;
    Trainer t(m->get(), o, &env);
    auto before = t.Evaluate(test);
    ASSERT_TRUE(before.ok());
    for (int e = 0; e < 5; ++e) ASSERT_TRUE(t.TrainEpoch(train).ok());
    auto after = t.Evaluate(test);
    ASSERT_TRUE(after.ok());
    EXPECT_GT(after->accuracy, 0.95);
    EXPECT_LT(after->loss, before->loss);
    final_params[run] = (*m)->GetParams();
  }
  EXPECT_EQ(final_params[0], final_params[1]);  // same seeds, same bits
}

TEST_F(ModelTest, TrainerRejectsIncompatibleData) {
  ModelSpec spec;
  spec.input_shape = {8};
  spec.num_classes = 3;
  auto m = BuildModel(spec, be_.get());
  ASSERT_TRUE(m.ok());
  SystemEnv env(0);
  Trainer t(m->get(), TrainerOptions{}, &env);
  Dataset d = Blobs(10, 1);
  d.labels[3] = 7;
  auto r = t.TrainEpoch(d);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("label 7"), std::string::npos);
  Dataset wrong = Blobs(10, 1);
  wrong.sample_shape = {4, 2, 1};
  wrong.features.resize(10 * 8);
  EXPECT_TRUE(t.Evaluate(wrong).ok());  // same size, flat model: accepted as flattened
  wrong.sample_shape = {5};
  EXPECT_EQ(t.Evaluate(wrong).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.TrainEpoch(Dataset{{8}, 3, {}, {}, {}, 0, {}}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ModelTest, FedProxPullsTowardsTheAnchor) {
  // With zero data gradient, the prox term alone moves w toward w_global geometrically.
  ModelSpec spec;
  spec.name = "logreg";
  spec.input_shape = {4};
  spec.num_classes = 2;
  auto m = BuildModel(spec, be_.get());
  ASSERT_TRUE(m.ok());
  (*m)->InitParams(1);
  std::vector<float> anchor((*m)->num_params(), 0.5f);
  Sgd sgd(m->get(), {0.1f, 0.0f, 0.0f, 1.0f});
  ASSERT_TRUE(sgd.SetProxAnchor(anchor).ok());
  be_->Fill((*m)->grads(), (*m)->num_params(), 0.0f);
  const auto w0 = (*m)->GetParams();
  sgd.Step();
  const auto w1 = (*m)->GetParams();
  for (size_t i = 0; i < w0.size(); ++i) ASSERT_NEAR(w1[i], w0[i] - 0.1f * (w0[i] - 0.5f), 1e-6);
  EXPECT_EQ(sgd.SetProxAnchor(std::vector<float>(3)).code(), StatusCode::kInvalidArgument);
}

TEST(SgdOptions, RejectsBadHyperparameters) {
  EXPECT_EQ(ValidateSgdOptions({-0.1f, 0, 0, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSgdOptions({0.0f, 0, 0, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSgdOptions({0.1f, 1.0f, 0, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSgdOptions({0.1f, 0, -1, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSgdOptions({std::nanf(""), 0, 0, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateSgdOptions({0.1f, 0.9f, 1e-4f, 0.01f}).ok());
}

}  // namespace
}  // namespace fedmesh
