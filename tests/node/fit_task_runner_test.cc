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
#include "core/model_zoo.h"
#include "core/rng.h"

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
    model_ = std::move(BuildModel(spec_, backend_.get()).value());
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
