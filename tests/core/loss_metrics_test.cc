// Losses (values against hand-computed PyTorch formulas, gradients against central
// differences) and metrics (against textbook examples), then training a graph model end to
// end with bce_with_logits and with mse through Model, Trainer and the metrics.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/backend.h"
#include "core/env.h"
#include "core/graph/graph.h"
#include "core/loss.h"
#include "core/metrics.h"
#include "core/model.h"
#include "core/rng.h"
#include "core/trainer.h"

namespace fedmesh {
namespace {

// Checks dout against central differences of the mean loss (loss_sum / rows, or / total
// weight for weighted cross-entropy, which ComputeLoss reports as the weighted mean * rows).
void CheckGradient(const LossOptions& o, std::vector<float> out, int rows, int cols,
                   const std::vector<int32_t>& labels, const std::vector<float>& targets) {
  std::vector<float> d(out.size());
  ComputeLoss(o, out.data(), rows, cols, labels.data(), targets.data(), d.data());
  for (size_t i = 0; i < out.size(); ++i) {
    const float keep = out[i];
    const float eps = 1e-2f;
    out[i] = keep + eps;
    const double up = ComputeLoss(o, out.data(), rows, cols, labels.data(), targets.data(), nullptr).loss_sum / rows;
    out[i] = keep - eps;
    const double down = ComputeLoss(o, out.data(), rows, cols, labels.data(), targets.data(), nullptr).loss_sum / rows;
    out[i] = keep;
    EXPECT_NEAR(d[i], (up - down) / (2 * eps), 1e-3) << LossKindName(o.kind) << " element " << i;
  }
}

TEST(Loss, CrossEntropyValueAndGradientWithAndWithoutClassWeights) {
  LossOptions o;
  // Two rows of logits; row 0: [0, ln 3] label 1 -> -log(0.75); row 1: [0, 0] label 0 -> ln 2.
  std::vector<float> out = {0.0f, std::log(3.0f), 0.0f, 0.0f};
  std::vector<int32_t> y = {1, 0};
  LossValue v = ComputeLoss(o, out.data(), 2, 2, y.data(), nullptr, nullptr);
  EXPECT_NEAR(v.loss_sum, -std::log(0.75) + std::log(2.0), 1e-6);
  EXPECT_EQ(v.correct, 2);  // row 1 ties: argmax 0 == label 0 counts too
  o.class_weights = {1.0f, 3.0f};
  v = ComputeLoss(o, out.data(), 2, 2, y.data(), nullptr, nullptr);
  // PyTorch: (3 * -log 0.75 + 1 * ln 2) / (3 + 1), reported * rows.
  EXPECT_NEAR(v.loss_sum / 2, (3 * -std::log(0.75) + std::log(2.0)) / 4, 1e-6);
  Rng rng(1);
  std::vector<float> z(15);
  for (float& x : z) x = static_cast<float>(rng.Uniform(-2, 2));
  o.class_weights = {1.0f, 2.0f, 0.5f};
  CheckGradient(o, z, 5, 3, {0, 2, 1, 1, 0}, {});
  o.class_weights.clear();
  CheckGradient(o, z, 5, 3, {0, 2, 1, 1, 0}, {});
}

TEST(Loss, BceWithLogitsAndPosWeight) {
  LossOptions o;
  o.kind = LossKind::kBceWithLogits;
  o.pos_weight = 4.0f;
  std::vector<float> z = {0.5f, -1.0f, 2.0f};
  std::vector<int32_t> y = {1, 0, 0};
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  const double want = -4 * std::log(sig(0.5)) - std::log(1 - sig(-1.0)) - std::log(1 - sig(2.0));
  LossValue v = ComputeLoss(o, z.data(), 3, 1, y.data(), nullptr, nullptr);
  EXPECT_NEAR(v.loss_sum, want, 1e-6);
  EXPECT_EQ(v.correct, 2);
  CheckGradient(o, z, 3, 1, y, {});
  // Extreme logits stay finite.
  std::vector<float> big = {80.0f, -80.0f};
  std::vector<int32_t> yb = {0, 1};
  v = ComputeLoss(o, big.data(), 2, 1, yb.data(), nullptr, nullptr);
  EXPECT_NEAR(v.loss_sum, 80 + 4 * 80, 1e-3);
}

TEST(Loss, MseAndHuber) {
  std::vector<float> out = {1.0f, 2.0f, -3.0f, 0.5f};
  std::vector<float> t = {0.0f, 2.5f, 0.0f, 0.5f};
  LossOptions o;
  o.kind = LossKind::kMse;
  LossValue v = ComputeLoss(o, out.data(), 2, 2, nullptr, t.data(), nullptr);
  EXPECT_NEAR(v.loss_sum / 2, (1 + 0.25 + 9 + 0) / 4.0, 1e-6);  // mean over 4 elements
  CheckGradient(o, out, 2, 2, {}, t);
  o.kind = LossKind::kHuber;
  v = ComputeLoss(o, out.data(), 2, 2, nullptr, t.data(), nullptr);
  EXPECT_NEAR(v.loss_sum / 2, (0.5 + 0.125 + (3 - 0.5) + 0) / 4.0, 1e-6);
  CheckGradient(o, out, 2, 2, {}, t);
}

TEST(Loss, OptionsAreValidated) {
  LossOptions o;
  o.class_weights = {1.0f, -1.0f};
  EXPECT_FALSE(ValidateLossOptions(o).ok());
  o = LossOptions{};
  o.pos_weight = 2.0f;  // cross_entropy has no pos_weight
  EXPECT_FALSE(ValidateLossOptions(o).ok());
  EXPECT_FALSE(ParseLossKind("hinge").ok());
  EXPECT_EQ(*ParseLossKind("huber"), LossKind::kHuber);
}

TEST(Metrics, BinaryAucPrecisionRecallF1) {
  // scikit-learn's roc_auc_score example: y = [0, 0, 1, 1], scores [0.1, 0.4, 0.35, 0.8] -> 0.75.
  MetricAccumulator m(Task::kBinary, 1);
  auto logit = [](double p) { return static_cast<float>(std::log(p / (1 - p))); };
  std::vector<float> z = {logit(0.1), logit(0.4), logit(0.35), logit(0.8)};
  std::vector<int32_t> y = {0, 0, 1, 1};
  m.Add(z.data(), 2, y.data(), nullptr);  // in two batches
  m.Add(z.data() + 2, 2, y.data() + 2, nullptr);
  auto r = m.Finish();
  EXPECT_NEAR(r["auc"], 0.75, 1e-9);
  // threshold 0.5: predictions 0 0 0 1 -> tp 1, fp 0, fn 1
  EXPECT_NEAR(r["precision"], 1.0, 1e-9);
  EXPECT_NEAR(r["recall"], 0.5, 1e-9);
  EXPECT_NEAR(r["f1"], 2.0 / 3.0, 1e-9);
  EXPECT_NEAR(r["accuracy"], 0.75, 1e-9);
  const double ll = -(std::log(0.9) + std::log(0.6) + std::log(0.35) + std::log(0.8)) / 4;
  EXPECT_NEAR(r["log_loss"], ll, 1e-6);
}

TEST(Metrics, MulticlassMacroF1AndTwoClassAuc) {
  // 3 classes; predictions (argmax) 0,1,1,2,2 for labels 0,1,2,2,1.
  std::vector<float> z = {5, 0, 0, 0, 5, 0, 0, 5, 0, 0, 0, 5, 0, 0, 5};
  std::vector<int32_t> y = {0, 1, 2, 2, 1};
  MetricAccumulator m(Task::kMulticlass, 3);
  m.Add(z.data(), 5, y.data(), nullptr);
  auto r = m.Finish();
  // F1: class 0 = 1; class 1: tp 1 fp 1 fn 1 -> 0.5; class 2: tp 1 fp 1 fn 1 -> 0.5.
  EXPECT_NEAR(r["macro_f1"], (1 + 0.5 + 0.5) / 3, 1e-9);
  EXPECT_NEAR(r["accuracy"], 0.6, 1e-9);
  EXPECT_EQ(r.count("auc"), 0u);
  MetricAccumulator two(Task::kMulticlass, 2);
  std::vector<float> z2 = {0, 1, 0, -1, 0, 2, 0, 0.5f};
  std::vector<int32_t> y2 = {1, 0, 1, 0};
  two.Add(z2.data(), 4, y2.data(), nullptr);
  EXPECT_NEAR(two.Finish()["auc"], 1.0, 1e-9);
}

// A diverged model's NaN outputs: the AUC is NaN (undefined), at once. Before, the tie loop
// never advanced past a NaN score and evaluation hung (found feeding lr = 3e38).
TEST(Metrics, NonFiniteScoresGiveANanAucWithoutHanging) {
  const float nan = std::nanf("");
  for (int cols : {1, 2}) {
    MetricAccumulator m(cols == 1 ? Task::kBinary : Task::kMulticlass, cols);
    std::vector<float> z(4 * cols, nan);
    std::vector<int32_t> y = {0, 1, 0, 1};
    m.Add(z.data(), 4, y.data(), nullptr);
    auto r = m.Finish();
    EXPECT_TRUE(std::isnan(r["auc"])) << cols;
  }
  MetricAccumulator inf(Task::kBinary, 1);
  std::vector<float> z = {0.5f, std::numeric_limits<float>::infinity(), -1.0f, 2.0f};
  std::vector<int32_t> y = {0, 1, 0, 1};
  inf.Add(z.data(), 4, y.data(), nullptr);
  EXPECT_NEAR(inf.Finish()["auc"], 1.0, 1e-9) << "an infinite score still has a rank";
}

TEST(Metrics, Regression) {
  std::vector<float> out = {1, 2, 3, 5};
  std::vector<float> t = {1, 2, 3, 4};
  MetricAccumulator m(Task::kRegression, 1);
  m.Add(out.data(), 4, nullptr, t.data());
  auto r = m.Finish();
  EXPECT_NEAR(r["mse"], 0.25, 1e-9);
  EXPECT_NEAR(r["rmse"], 0.5, 1e-9);
  EXPECT_NEAR(r["mae"], 0.25, 1e-9);
  EXPECT_NEAR(r["r2"], 1 - 1.0 / 5.0, 1e-9);  // SST = 5 around mean 2.5
}

// x [N,d] -> Gemm(W [k,d], b [k]) -> y [N,k]
graph::Graph Linear(int d, int k) {
  graph::Graph g;
  g.inputs = {{"x", graph::DType::kFloat32, {-1, d}}};
  g.outputs = {{"y", graph::DType::kFloat32, {-1, k}}};
  g.initializers = {graph::Tensor{"W", graph::DType::kFloat32, {k, d}, std::vector<float>(k * d, 0.0f), {}},
                    graph::Tensor{"b", graph::DType::kFloat32, {k}, std::vector<float>(k, 0.0f), {}}};
  graph::Node n{"fc", "Gemm", {"x", "W", "b"}, {"y"}, {}};
  n.attrs["transB"].i = 1;
  g.nodes = {n};
  return g;
}

TEST(LossTraining, LogisticRegressionWithBceLearnsAnImbalancedTask) {
  auto be = MakeCpuBackend(1);
  auto m = Model::CreateFromGraph("logit", be.get(), Linear(4, 1));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Dataset d;
  d.sample_shape = {4};
  d.num_classes = 2;
  Rng rng(3);
  for (int i = 0; i < 2000; ++i) {
    float x[4];
    for (float& v : x) v = static_cast<float>(rng.Normal());
    const bool pos = x[0] + 0.5 * x[1] > 1.3;  // about 1 in 10 positive
    d.features.insert(d.features.end(), x, x + 4);
    d.labels.push_back(pos);
  }
  TrainerOptions o;
  o.loss.kind = LossKind::kBceWithLogits;
  o.loss.pos_weight = 5.0f;
  o.sgd.lr = 0.1f;
  SystemEnv env(1);
  Trainer t(m->get(), o, &env);
  for (int e = 0; e < 5; ++e) ASSERT_TRUE(t.TrainEpoch(d).ok());
  auto ev = t.Evaluate(d);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_GT(ev->metrics.at("auc"), 0.97);
  EXPECT_GT(ev->metrics.at("recall"), 0.8);  // pos_weight pulls the threshold down
  EXPECT_EQ(ev->metrics.count("r2"), 0u);
  // cross_entropy on a one-output model is refused with a clear message.
  TrainerOptions ce;
  Trainer bad(m->get(), ce, &env);
  auto r = bad.TrainEpoch(d);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("use bce_with_logits"), std::string::npos);
}

TEST(LossTraining, LinearRegressionWithMseFitsAndDataWithoutTargetsIsRefused) {
  auto be = MakeCpuBackend(1);
  auto m = Model::CreateFromGraph("linear", be.get(), Linear(2, 1));
  ASSERT_TRUE(m.ok());
  Dataset d;
  d.sample_shape = {2};
  d.target_dim = 1;
  Rng rng(4);
  for (int i = 0; i < 1000; ++i) {
    const float a = static_cast<float>(rng.Uniform(-1, 1)), b = static_cast<float>(rng.Uniform(-1, 1));
    d.features.push_back(a);
    d.features.push_back(b);
    d.labels.push_back(0);
    d.targets.push_back(2 * a - 3 * b + 1 + static_cast<float>(0.01 * rng.Normal()));
  }
  TrainerOptions o;
  o.loss.kind = LossKind::kMse;
  o.sgd.lr = 0.1f;
  SystemEnv env(1);
  Trainer t(m->get(), o, &env);
  for (int e = 0; e < 10; ++e) ASSERT_TRUE(t.TrainEpoch(d).ok());
  auto ev = t.Evaluate(d);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_GT(ev->metrics.at("r2"), 0.999);
  EXPECT_LT(ev->metrics.at("rmse"), 0.05);
  const std::vector<float> w = (*m)->GetParams();
  EXPECT_NEAR(w[0], 2.0, 0.02);
  EXPECT_NEAR(w[1], -3.0, 0.02);
  EXPECT_NEAR(w[2], 1.0, 0.02);
  Dataset no_targets = d;
  no_targets.targets.clear();
  no_targets.target_dim = 0;
  auto r = t.TrainEpoch(no_targets);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("float target"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace fedmesh
