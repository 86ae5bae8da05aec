// Trainer: the local training loop a site runs on its own data: shuffled mini-batches,
// forward/backward, one SGD step each, and evaluation. It never sends a sample anywhere;
// the federated client (node/) wraps it and ships only parameter updates.
// Time (for samples/s) and shuffling randomness come from the injected Env.
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/data/dataset.h"
#include "core/env.h"
#include "core/loss.h"
#include "core/model.h"
#include "core/sgd.h"
#include "core/status.h"

namespace fedmesh {

struct TrainerOptions {
  int batch_size = 32;       // samples per SGD step; the last partial batch is used too
  int eval_batch_size = 500; // samples per forward pass when evaluating
  SgdOptions sgd;            // lr 0.01, no momentum, no weight decay, no FedProx by default
  LossOptions loss;          // softmax cross-entropy by default (core/loss.h)
};

Status ValidateTrainerOptions(const TrainerOptions& o);

struct EpochStats {
  double mean_loss = 0.0;       // mean training loss over the epoch's samples
  double train_accuracy = 0.0;  // fraction of training samples classified right (pre-step)
  int64_t samples = 0;
  int64_t steps = 0;
  double seconds = 0.0;
  double samples_per_s = 0.0;
};

struct EvalStats {
  double loss = 0.0;      // mean of the configured loss
  double accuracy = 0.0;  // top-1 (0 for regression)
  // Every metric of the loss's task by name (core/metrics.h): accuracy, log_loss,
  // macro_f1, auc, precision, recall, f1, mse, rmse, mae, r2.
  std::map<std::string, double> metrics;
  int64_t samples = 0;
};

class Trainer {
 public:
  // REQUIRES: ValidateTrainerOptions(options).ok(). The model must outlive the trainer.
  Trainer(Model* model, const TrainerOptions& options, Env* env);

  // One pass over `data` in a fresh random order. Fails if data does not fit the model.
  Result<EpochStats> TrainEpoch(const Dataset& data);
  // At most `max_steps` SGD steps (a federated round's local work may be step-bounded).
  Result<EpochStats> TrainSteps(const Dataset& data, int64_t max_steps);
  Result<EvalStats> Evaluate(const Dataset& data);

  Sgd& optimizer() { return sgd_; }
  Model& model() { return *model_; }

 private:
  // Sets options_.loss on the model when it differs (a model may be shared by trainers).
  Status ApplyLoss();

  Model* model_;
  TrainerOptions options_;
  Env* env_;
  Sgd sgd_;
  uint64_t step_ = 0;  // global step counter: seeds dropout masks
};

}  // namespace fedmesh
