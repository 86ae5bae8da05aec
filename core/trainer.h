// Trainer: the local training loop a site runs on its own data: shuffled mini-batches,
// forward/backward, one SGD step each, and evaluation. It never sends a sample anywhere;
// the federated client (node/) wraps it and ships only parameter updates.
// Time (for samples/s) and shuffling randomness come from the injected Env.
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/env.h"
#include "core/loss.h"
#include "core/model.h"
#include "core/sgd.h"
#include "core/status.h"

namespace fedmesh {

// DP-SGD (Abadi et al. 2016) in the training loop. Each step samples a batch by Poisson
// sampling (every example joins independently with probability q = batch_size / n, so the
// batch size varies), clips each example's gradient to L2 norm `clip`
// (Model::ForwardBackwardClipped), sums, adds N(0, (noise_multiplier * clip)^2) to every
// coordinate and divides by the expected batch size q * n before the optimizer step. An
// epoch is ceil(n / batch_size) such steps (one pass in expectation). Each step is one
// application of the sampled Gaussian mechanism (q, noise_multiplier): what the caller's
// RDP accountant composes (EpochStats::dp_steps and dp_sampling_rate say how many, at which q).
struct DpSgdOptions {
  bool enabled = false;           // off: the ordinary loop
  double clip = 1.0;              // L2 bound on one example's gradient, > 0
  double noise_multiplier = 1.0;  // noise standard deviation over clip, >= 0
  // Adds N(0, stddev^2) to each element. Required when enabled; production callers pass a
  // CSPRNG-keyed source (crypto/dp/gaussian_noise.h), which core cannot depend on.
  std::function<void(std::span<float>, double stddev)> add_noise;
};

// One DP-SGD epoch over n examples at `batch_size`: the Poisson sampling rate
// q = min(1, batch_size / n) and the ceil(n / batch_size) steps the Trainer takes. What the
// caller's accountant composes, and what a site checks its budget against before training.
struct DpSgdEpoch {
  double sampling_rate = 0.0;
  int64_t steps = 0;
};
DpSgdEpoch DpSgdEpochOf(size_t n, int batch_size);

struct TrainerOptions {
  int batch_size = 32;       // samples per SGD step; the last partial batch is used too
  int eval_batch_size = 100; // samples per forward pass when evaluating
  SgdOptions sgd;            // lr 0.01, no momentum, no weight decay, no FedProx by default
  LossOptions loss;          // softmax cross-entropy by default (core/loss.h)
  DpSgdOptions dp;           // off by default
  // Data-parallel training (node/allreduce_service.h). gradient_hook gets each step's
  // gradients in host memory (on a device backend a copy, written back after the hook)
  // after backward and before the optimizer reads them, and may change them in place (an
  // all-reduce); step_hook runs after each
  // optimizer step with the steps taken in this call. An error from either ends the call
  // with it. Default: none (the fused SGD path when the optimizer allows it).
  std::function<Status(std::span<float> grads)> gradient_hook;
  std::function<Status(int64_t steps)> step_hook;
};

Status ValidateTrainerOptions(const TrainerOptions& o);

struct EpochStats {
  double mean_loss = 0.0;       // mean training loss over the epoch's samples
  double train_accuracy = 0.0;  // fraction of training samples classified right (pre-step)
  int64_t samples = 0;
  int64_t steps = 0;
  double seconds = 0.0;
  double samples_per_s = 0.0;
  int64_t dp_steps = 0;           // DP-SGD steps taken (0 when DP-SGD is off)
  double dp_sampling_rate = 0.0;  // their Poisson sampling rate q
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
  // TrainSteps with options_.dp (core/trainer_dp.cc).
  Result<EpochStats> TrainStepsDp(const Dataset& data, int64_t max_steps);
  // Fills in the time, means and rate of `stats` from the sums of a training loop.
  void FinishEpoch(EpochStats* stats, double start, double loss_sum, int64_t correct) const;
  // options_.gradient_hook on this step's gradients, staged through hook_grads_ on a device.
  Status RunGradientHook();

  Model* model_;
  TrainerOptions options_;
  Env* env_;
  Sgd sgd_;
  uint64_t step_ = 0;  // global step counter: seeds dropout masks
  std::vector<float> hook_grads_;     // a device's gradients for the gradient hook
  std::vector<float> dp_sum_;         // DP-SGD: the step's clipped, noised gradient sum
  std::vector<uint32_t> dp_picked_;   // DP-SGD: the step's Poisson-sampled example indices
};

}  // namespace fedmesh
