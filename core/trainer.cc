#include "core/trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/metrics.h"

namespace fedmesh {

Status ValidateTrainerOptions(const TrainerOptions& o) {
  if (o.batch_size <= 0) {
    return Status::InvalidArgument("batch size must be positive, got " + std::to_string(o.batch_size));
  }
  if (o.eval_batch_size <= 0) {
    return Status::InvalidArgument("eval batch size must be positive, got " +
                                   std::to_string(o.eval_batch_size));
  }
  FM_RETURN_IF_ERROR(ValidateLossOptions(o.loss));
  if (o.dp.enabled) {
    if (!(o.dp.clip > 0) || !std::isfinite(o.dp.clip)) {
      return Status::InvalidArgument("dp-sgd: clip must be a positive finite number");
    }
    if (!(o.dp.noise_multiplier >= 0) || !std::isfinite(o.dp.noise_multiplier)) {
      return Status::InvalidArgument("dp-sgd: noise_multiplier must be a finite number >= 0");
    }
    if (!o.dp.add_noise) return Status::InvalidArgument("dp-sgd: no noise source was given");
  }
  return ValidateSgdOptions(o.sgd);
}

Trainer::Trainer(Model* model, const TrainerOptions& options, Env* env)
    : model_(model), options_(options), env_(env), sgd_(model, options.sgd) {
  FM_CHECK(ValidateTrainerOptions(options).ok());
  model_->Reserve(std::max(options.batch_size, options.eval_batch_size));
}

Result<EpochStats> Trainer::TrainEpoch(const Dataset& data) {
  return TrainSteps(data, -1);
}

Status Trainer::ApplyLoss() {
  const LossOptions& want = options_.loss;
  const LossOptions& have = model_->loss();
  if (want.kind == have.kind && want.class_weights == have.class_weights &&
      want.pos_weight == have.pos_weight && want.huber_delta == have.huber_delta)
    return Status::OK();
  return model_->SetLoss(want);
}

Result<EpochStats> Trainer::TrainSteps(const Dataset& data, int64_t max_steps) {
  FM_RETURN_IF_ERROR(ApplyLoss());
  FM_RETURN_IF_ERROR(model_->CheckCompatible(data));
  if (data.size() == 0) return Status::InvalidArgument("cannot train on an empty dataset");
  if (options_.dp.enabled) return TrainStepsDp(data, max_steps);
  std::vector<uint32_t> order(data.size());
  std::iota(order.begin(), order.end(), 0u);
  env_->rng().Shuffle(order);

  EpochStats stats;
  double loss_sum = 0.0;
  int64_t correct = 0;
  const double start = env_->NowSeconds();
  // BatchNormalization cannot train on one example (no variance): a last batch of one is
  // left out of the pass, as PyTorch's drop_last would (it is in the next pass's shuffle).
  const bool skip_single = order.size() > 1 && model_->BatchStatisticsNode() != nullptr;
  for (size_t first = 0; first < order.size(); first += options_.batch_size) {
    if (max_steps >= 0 && stats.steps >= max_steps) break;
    const int batch = static_cast<int>(std::min<size_t>(options_.batch_size, order.size() - first));
    if (batch == 1 && skip_single) break;
    model_->LoadBatch(data, order.data() + first, batch);
    const uint64_t seed = SplitMix64(step_++);
    Backend::LossResult r;
    if (sgd_.plain() && !options_.gradient_hook) {
      r = model_->ForwardBackwardSgd(batch, seed, sgd_.options().lr);
    } else {
      r = model_->ForwardBackward(batch, seed);
      if (options_.gradient_hook) FM_RETURN_IF_ERROR(RunGradientHook());
      sgd_.Step();
    }
    loss_sum += r.loss_sum;
    correct += r.correct;
    stats.samples += batch;
    ++stats.steps;
    if (options_.step_hook) FM_RETURN_IF_ERROR(options_.step_hook(stats.steps));
  }
  // A device backend queues its kernels: a failure surfaces here, not as a wrong model.
  FM_RETURN_IF_ERROR(model_->backend().Synchronize());
  FinishEpoch(&stats, start, loss_sum, correct);
  FM_RETURN_IF_ERROR(model_->status());
  return stats;
}

Status Trainer::RunGradientHook() {
  float* grads = model_->grads();
  const size_t n = model_->num_params();
  Backend& be = model_->backend();
  if (be.host_memory()) return options_.gradient_hook(std::span<float>(grads, n));
  // A device's gradients go through host memory, where the hook (a CPU ring) works.
  hook_grads_.resize(n);
  be.CopyToHost(hook_grads_.data(), grads, n * sizeof(float));
  FM_RETURN_IF_ERROR(options_.gradient_hook(std::span<float>(hook_grads_)));
  be.CopyFromHost(grads, hook_grads_.data(), n * sizeof(float));
  return Status::OK();
}

void Trainer::FinishEpoch(EpochStats* stats, double start, double loss_sum, int64_t correct) const {
  stats->seconds = env_->NowSeconds() - start;
  stats->mean_loss = stats->samples ? loss_sum / stats->samples : 0.0;
  stats->train_accuracy = stats->samples ? double(correct) / stats->samples : 0.0;
  stats->samples_per_s = stats->seconds > 0 ? stats->samples / stats->seconds : 0.0;
}

Result<EvalStats> Trainer::Evaluate(const Dataset& data) {
  FM_RETURN_IF_ERROR(ApplyLoss());
  FM_RETURN_IF_ERROR(model_->CheckCompatible(data));
  const int cols = model_->num_classes();
  MetricAccumulator metrics(TaskOf(options_.loss.kind), cols);
  std::vector<float> host_out;
  if (data.size() == 0) return Status::InvalidArgument("cannot evaluate on an empty dataset");
  EvalStats stats;
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (size_t first = 0; first < data.size(); first += options_.eval_batch_size) {
    const int batch = static_cast<int>(std::min<size_t>(options_.eval_batch_size, data.size() - first));
    model_->LoadContiguousBatch(data, first, batch);
    const auto r = model_->Evaluate(batch);
    loss_sum += r.loss_sum;
    correct += r.correct;
    const float* out = model_->logits();
    if (!model_->backend().host_memory()) {
      host_out.resize(static_cast<size_t>(batch) * cols);
      model_->backend().CopyToHost(host_out.data(), out, host_out.size() * sizeof(float));
      out = host_out.data();
    }
    metrics.Add(out, batch, data.labels.data() + first,
                data.target_dim > 0 ? data.target(first) : nullptr);
  }
  FM_RETURN_IF_ERROR(model_->backend().Synchronize());
  stats.samples = static_cast<int64_t>(data.size());
  stats.loss = loss_sum / stats.samples;
  stats.accuracy = IsRegression(options_.loss.kind) ? 0.0 : double(correct) / stats.samples;
  stats.metrics = metrics.Finish();
  FM_RETURN_IF_ERROR(model_->status());
  return stats;
}

}  // namespace fedmesh
