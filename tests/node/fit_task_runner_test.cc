// RunFitTask's phases (node/fit_task_runner.h): Prepare + Train + Finish is RunFitTask, and
// a BatchedTrainer in place of TrainFitTask (what fedmesh-sim does with batched_clients)
// produces the very same FitResult bytes, carry and codec seed. Refusals come from Prepare.
#include "node/fit_task_runner.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/backend.h"
#include "core/batched/batched_trainer.h"
#include "core/codec/payload.h"
#include "core/codec/update_prediction.h"
#include "core/graph/graph_model.h"
#include "core/wire/wire_codec.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/trainer.h"

namespace fedmesh {
namespace {

Dataset Tabular(size_t n, uint64_t seed) {
  Dataset d;
  d.sample_shape = {12};
  d.num_classes = 3;
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) {
    const int y = static_cast<int>(rng.UniformInt(3));
    for (int f = 0; f < 12; ++f)
      d.features.push_back(static_cast<float>(rng.Normal(f % 3 == y, 0.5)));
    d.labels.push_back(y);
  }
  return d;
}

class FitTaskRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.name = "mlp";
    spec_.input_shape = {12};
    spec_.num_classes = 3;
    spec_.hidden = {8};
    spec_.dropout = 0.25f;
    // The layer code, as fedmesh-sim's workspaces run it beside the batched trainer.
    model_ = std::move(BuildModel(spec_, backend_.get(), {BuiltinEngine::kLayers}).value());
    model_->InitParams(3);
    chain_ = codec::Chain::Parse("randk:0.3").value();  // the codec seed picks the coordinates
    ctx_.model = model_.get();
    ctx_.train = &data_;
    ctx_.trainer.sgd.weight_decay = 1e-3f;
    ctx_.default_chain = &chain_;
    ctx_.node_id = "site-7";
    ctx_.seed = 99;
    task_.round = 4;
    task_.global_model = codec::EncodePayload(codec::Chain(), model_->GetParams(), 0).value();
    task_.local_epochs = 2;
    task_.batch_size = 16;
    task_.learning_rate = 0.1;
    task_.momentum = 0.5;
    task_.prox_mu = 0.1;
  }

  // A carry as a node holds it after an earlier round: a momentum buffer.
  FitCarry Carry() const {
    FitCarry c;
    Rng rng(5);
    c.velocity.resize(model_->num_params());
    for (float& v : c.velocity) v = static_cast<float>(rng.Normal(0, 0.01));
    return c;
  }

  ModelSpec spec_;
  std::unique_ptr<Backend> backend_ = MakeCpuBackend(1);
  std::unique_ptr<Model> model_;
  Dataset data_ = Tabular(45, 1);  // two full batches of 16 and one of 13
  codec::Chain chain_;
  FitContext ctx_;
  wire::FitTask task_;
};

TEST_F(FitTaskRunnerTest, BatchedTrainingBetweenPrepareAndFinishIsRunFitTask) {
  FitCarry carry_a = Carry();
  auto a = RunFitTask(ctx_, task_, carry_a);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(a->refused.empty()) << a->refused;

  FitCarry carry_b = Carry();
  PreparedFitTask p = PrepareFitTask(ctx_, task_);
  ASSERT_TRUE(p.refused.empty()) << p.refused;
  EXPECT_EQ(p.epochs, 2u);
  EXPECT_EQ(p.trainer.batch_size, 16);
  EXPECT_FLOAT_EQ(p.trainer.sgd.weight_decay, 1e-3f);  // the node's own setting stays
  auto trainer = BatchedTrainer::Create(spec_, MakeCpuBatchedOps(1), 1);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  BatchedClient client;
  client.params = p.global;
  client.velocity = StartVelocity(p, carry_b);
  client.prox_anchor = p.global;
  client.data = &data_;
  client.rng = &p.env.rng();
  auto trained = (*trainer)->Train(std::span<const BatchedClient>(&client, 1), p.trainer,
                                   static_cast<int>(p.epochs));
  ASSERT_TRUE(trained.ok()) << trained.status().ToString();
  TrainedFit fit;
  fit.params = std::move((*trained)[0].params);
  fit.velocity = std::move((*trained)[0].velocity);
  fit.last_epoch = (*trained)[0].epochs.back();
  auto b = FinishFitTask(ctx_, p, std::move(fit), carry_b);
  ASSERT_TRUE(b.ok()) << b.status().ToString();

  EXPECT_EQ(b->result, a->result);  // same update bytes: same weights and same codec seed
  EXPECT_EQ(b->result.train_loss, a->last_epoch.mean_loss);
  EXPECT_EQ(b->last_epoch.steps, 3);
  EXPECT_EQ(b->global, a->global);
  EXPECT_EQ(b->chain_name, "randk:0.3");
  EXPECT_EQ(carry_b.velocity, carry_a.velocity);
  ASSERT_TRUE(carry_a.feedback && carry_b.feedback);
  EXPECT_EQ(carry_b.feedback->residual(), carry_a.feedback->residual());
  EXPECT_NE(carry_a.velocity, Carry().velocity);  // momentum was carried and moved

  // Another codec seed (an Rng that skipped the shuffles) would be another update.
  PreparedFitTask q = PrepareFitTask(ctx_, task_);
  TrainedFit same;
  same.params = model_->GetParams();  // RunFitTask left the trained weights in the model
  same.last_epoch = a->last_epoch;
  FitCarry carry_c = Carry();
  auto c = FinishFitTask(ctx_, q, std::move(same), carry_c);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->result.update.bytes, a->result.update.bytes);
}

TEST_F(FitTaskRunnerTest, PrepareRefusesWhatRunFitTaskRefuses) {
  struct Case {
    std::function<void(wire::FitTask&)> change;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[](wire::FitTask& t) { t.update_codec = "zip"; }, "update codec"},
      {[](wire::FitTask& t) { t.global_model.element_count += 1; }, "check that [model] matches"},
      {[](wire::FitTask& t) { t.local_epochs = 0; }, "local_epochs"},
      {[](wire::FitTask& t) { t.learning_rate = -1; }, "learning rate"},
      {[](wire::FitTask& t) { t.momentum = 1.5; }, "momentum"},
  };
  for (const Case& c : cases) {
    wire::FitTask task = task_;
    c.change(task);
    const PreparedFitTask p = PrepareFitTask(ctx_, task);
    EXPECT_NE(p.refused.find(c.needle), std::string::npos) << c.needle << ": " << p.refused;
    EXPECT_TRUE(p.global.empty());
    FitCarry carry = Carry();
    auto run = RunFitTask(ctx_, task, carry);
    ASSERT_TRUE(run.ok());
    EXPECT_EQ(run->refused, p.refused);
    EXPECT_EQ(carry.velocity, Carry().velocity);  // a refusal changes no carry
  }
}

TEST_F(FitTaskRunnerTest, AnUpdatePredictionIsSubtractedBeforeEncoding) {
  wire::FitTask plain = task_;
  plain.update_codec = "none";  // lossless: the update is exactly the change
  FitCarry c0 = Carry();
  auto base = RunFitTask(ctx_, plain, c0);
  ASSERT_TRUE(base.ok() && base->refused.empty()) << base->refused;
  EXPECT_FALSE(base->result.applied_prediction);
  const std::vector<float> change = codec::DecodePayload(base->result.update).value();

  std::vector<float> p(change.size());
  Rng rng(8);
  for (float& v : p) v = static_cast<float>(rng.Normal(0, 0.05));
  wire::FitTask predicted = plain;
  predicted.global_model =
      codec::PackWithPrediction(codec::Chain(), codec::DecodePayload(plain.global_model).value(),
                                p, 0)
          .value()
          .payload;
  predicted.with_prediction = true;
  FitCarry c1 = Carry();
  auto with = RunFitTask(ctx_, predicted, c1);
  ASSERT_TRUE(with.ok() && with->refused.empty()) << with->refused;
  EXPECT_TRUE(with->result.applied_prediction);
  EXPECT_EQ(with->global, base->global);  // trained from the same model
  const std::vector<float> sent = codec::DecodePayload(with->result.update).value();
  ASSERT_EQ(sent.size(), change.size());
  double moved = 0;
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_NEAR(sent[i] + p[i], change[i], 1e-6) << i;
    moved += std::fabs(sent[i] - change[i]);
  }
  EXPECT_GT(moved, 1.0);  // the prediction really was subtracted

  // A prediction of the wrong size, or with secure aggregation, is refused.
  wire::FitTask half = predicted;
  half.global_model = plain.global_model;
  EXPECT_NE(PrepareFitTask(ctx_, half).refused.find("x2 with its update prediction"),
            std::string::npos);
  wire::FitTask secure = predicted;
  secure.secagg = wire::SecAggParameters{};
  EXPECT_NE(PrepareFitTask(ctx_, secure).refused.find("under secure aggregation"),
            std::string::npos);
}

TEST_F(FitTaskRunnerTest, StopBeforeAnEpochAbandonsTheTask) {
  int checks = 0;
  ctx_.stop = [&checks] { return ++checks == 2; };  // after the first epoch
  FitCarry carry = Carry();
  auto r = RunFitTask(ctx_, task_, carry);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->last_epoch.samples, 45);  // the epoch that ran
  EXPECT_TRUE(r->result.update.bytes.empty());
  EXPECT_EQ(carry.velocity, Carry().velocity);
  EXPECT_FALSE(carry.feedback.has_value());
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// Issue 18, [model] local (FedBN): a graph model with a BatchNorm whose tensors stay on the
// site. The update carries zeros for them, the site keeps what it trained, and the next
// task starts them from the site's values, not from the global model's.
TEST(FitTaskRunnerLocal, LocalTensorsAreNeverSentAndNeverOverwritten) {
  // x [N,4] -> Gemm(W [3,4], b) -> BatchNormalization(scale, bias, mean, var) -> y [N,3]
  graph::Graph g;
  g.inputs = {{"x", graph::DType::kFloat32, {-1, 4}}};
  g.outputs = {{"y", graph::DType::kFloat32, {-1, 3}}};
  auto T = [](const std::string& n, graph::Dims d, float v) {
    return graph::Tensor{n, graph::DType::kFloat32, d, std::vector<float>(graph::NumElements(d), v), {}};
  };
  graph::Tensor w = T("fc.weight", {3, 4}, 0.0f);
  for (size_t i = 0; i < w.f.size(); ++i) w.f[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
  g.initializers = {w, T("fc.bias", {3}, 0.0f), T("bn.weight", {3}, 1.0f), T("bn.bias", {3}, 0.0f),
                    T("bn.running_mean", {3}, 0.0f), T("bn.running_var", {3}, 1.0f)};
  graph::Node fc{"fc", "Gemm", {"x", "fc.weight", "fc.bias"}, {"h"}, {}};
  fc.attrs["transB"].i = 1;
  g.nodes = {fc, graph::Node{"bn", "BatchNormalization",
                             {"h", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"},
                             {"y"}, {}}};
  auto backend = MakeCpuBackend(1);
  auto model = Model::CreateFromGraph("fedbn", backend.get(), g);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto ranges = graph::MatchTensors(*(*model)->graph_model(), {"bn.*"});
  ASSERT_TRUE(ranges.ok());
  // fc: 12 + 3 trainable, then bn.weight, bn.bias (trainable), then the state.
  ASSERT_EQ(*ranges, (std::vector<std::pair<size_t, size_t>>{{15, 3}, {18, 3}, {21, 3}, {24, 3}}));
  EXPECT_FALSE(graph::MatchTensors(*(*model)->graph_model(), {"bn.*", "bnx*"}).ok());

  Dataset data;
  data.sample_shape = {4};
  data.num_classes = 3;
  Rng rng(2);
  for (int i = 0; i < 64; ++i) {
    const int y = i % 3;
    for (int f = 0; f < 4; ++f) data.features.push_back(static_cast<float>(rng.Normal(f == y, 0.3)));
    data.labels.push_back(y);
  }
  codec::Chain none;
  FitContext ctx;
  ctx.model = model->get();
  ctx.train = &data;
  ctx.default_chain = &none;
  ctx.node_id = "site-1";
  ctx.local = *ranges;
  const std::vector<float> global = (*model)->GetParams();
  wire::FitTask task;
  task.round = 1;
  task.global_model = codec::EncodePayload(none, global, 0).value();
  task.local_epochs = 1;
  task.batch_size = 16;
  task.learning_rate = 0.1;
  FitCarry carry;
  auto out = RunFitTask(ctx, task, carry);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_TRUE(out->refused.empty()) << out->refused;
  const std::vector<float> delta = wire::PayloadFloats(out->result.update).value();
  for (size_t i = 15; i < 27; ++i) EXPECT_EQ(delta[i], 0.0f) << "local element " << i << " was sent";
  double shared = 0;
  for (size_t i = 0; i < 15; ++i) shared += std::fabs(delta[i]);
  EXPECT_GT(shared, 1e-3);
  ASSERT_EQ(carry.local_values.size(), 12u);
  // The site's BatchNorm moved (running statistics updated, scale trained).
  EXPECT_NE(carry.local_values[6], 0.0f);  // bn.running_mean[0]
  const std::vector<float> kept = carry.local_values;

  // Round 2: the global model's BatchNorm values are different again; training starts
  // from the site's own (checked through the start of the next local values' drift: with
  // lr 0 nothing trains, so the kept values come back unchanged, not the global ones).
  std::vector<float> global2 = global;
  for (size_t i = 15; i < 27; ++i) global2[i] = 7.0f;
  task.round = 2;
  task.global_model = codec::EncodePayload(none, global2, 0).value();
  task.learning_rate = 1e-30;
  out = RunFitTask(ctx, task, carry);
  ASSERT_TRUE(out.ok());
  for (size_t k = 0; k < 6; ++k) EXPECT_NEAR(carry.local_values[k], kept[k], 1e-6) << k;
  for (size_t k = 0; k < 12; ++k) EXPECT_NE(carry.local_values[k], 7.0f) << k;
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// The last federated evaluation's comparison (FitTask::finetune_epochs, local_only_epochs):
// the untrained global model is fine-tuned at the site and the first model trained alone,
// both scored on the same held-out rows, and both learn (they beat the global model the
// evaluation started from by far); the local-only figures are what training the first
// model alone with the task's settings gives; no first model, no local-only figures.
TEST_F(FitTaskRunnerTest, EvaluationAlsoScoresFineTunedAndLocalOnlyModels) {
  const Dataset held_out = Tabular(90, 2);
  std::vector<float> first = model_->GetParams();
  for (float& v : first) v *= 0.5f;  // another starting point than the global model
  wire::FitTask eval = task_;
  eval.evaluate_only = true;
  eval.prox_mu = 0;
  eval.finetune_epochs = 4;
  eval.local_only_epochs = 4;
  FitCarry carry;
  ctx_.first_global = &first;
  auto out = RunEvalTask(ctx_, eval, carry, held_out);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_TRUE(out->refused.empty()) << out->refused;
  const auto& m = out->result.metrics;
  ASSERT_TRUE(m.contains("accuracy") && m.contains("finetuned_accuracy") &&
              m.contains("local_only_accuracy") && m.contains("finetuned_loss"));
  EXPECT_GT(m.at("finetuned_accuracy"), m.at("accuracy") + 0.2);
  EXPECT_GT(m.at("local_only_accuracy"), m.at("accuracy") + 0.2);
  EXPECT_LT(m.at("finetuned_loss"), out->result.train_loss);

  // The local-only figures by hand: the first model, 4 epochs with the task's settings.
  ASSERT_TRUE(model_->SetParams(first).ok());
  TrainerOptions options = ctx_.trainer;
  options.batch_size = 16;
  options.sgd.lr = 0.1f;
  options.sgd.momentum = 0.5f;
  SeededEnv env(nullptr, FitSeed(99, "site-7", 4) ^ (2 * 0x9E3779B97F4A7C15ull));
  Trainer trainer(model_.get(), options, &env);
  for (int e = 0; e < 4; ++e) ASSERT_TRUE(trainer.TrainEpoch(data_).ok());
  auto by_hand = trainer.Evaluate(held_out);
  ASSERT_TRUE(by_hand.ok());
  EXPECT_EQ(m.at("local_only_loss"), by_hand->loss);

  ctx_.first_global = nullptr;
  auto without = RunEvalTask(ctx_, eval, carry, held_out);
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->result.metrics.contains("local_only_accuracy"));
  EXPECT_TRUE(without->result.metrics.contains("finetuned_accuracy"));
}

}  // namespace
}  // namespace fedmesh
