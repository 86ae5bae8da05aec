// Trainer::TrainStepsDp: the DP-SGD loop (core/trainer.h, DpSgdOptions).
#include <algorithm>
#include <cmath>

#include "core/trainer.h"

namespace fedmesh {

DpSgdEpoch DpSgdEpochOf(size_t n, int batch_size) {
  const size_t b = static_cast<size_t>(std::max(batch_size, 1));
  return {n == 0 ? 0.0 : std::min(1.0, double(b) / double(n)), static_cast<int64_t>((n + b - 1) / b)};
}

Result<EpochStats> Trainer::TrainStepsDp(const Dataset& data, int64_t max_steps) {
  FM_RETURN_IF_ERROR(model_->SupportsPerExampleClipping());
  // Batch sizes vary step to step: a built-in on the graph loads them into its layers.
  model_->set_clipped_passes(true);
  struct EndClippedPasses {
    Model* model;
    ~EndClippedPasses() { model->set_clipped_passes(false); }
  } end_clipped_passes{model_};
  const DpSgdOptions& dp = options_.dp;
  const size_t n = data.size();
  const DpSgdEpoch epoch = DpSgdEpochOf(n, options_.batch_size);
  const double q = epoch.sampling_rate;
  const int64_t epoch_steps = epoch.steps;
  const int64_t steps = max_steps >= 0 ? std::min(max_steps, epoch_steps) : epoch_steps;
  const size_t dim = model_->num_trainable();
  const int chunk = model_->max_batch();
  // Dividing by the expected batch size, not the drawn one, keeps the sensitivity of the
  // average at clip / (q n) whatever the draw (Abadi et al.; Opacus does the same).
  const float inv_expected = static_cast<float>(1.0 / (q * double(n)));
  Rng& rng = env_->rng();
  const double log_keep = std::log1p(-q);  // log(1 - q); -inf when q == 1

  EpochStats stats;
  stats.dp_sampling_rate = q;
  double loss_sum = 0.0;
  int64_t correct = 0;
  const double start = env_->NowSeconds();
  for (int64_t s = 0; s < steps; ++s) {
    // Poisson sampling by geometric gaps: the index after a gap of G ~ Geometric(q) misses.
    dp_picked_.clear();
    if (q >= 1.0) {
      for (size_t i = 0; i < n; ++i) dp_picked_.push_back(static_cast<uint32_t>(i));
    } else {
      double i = -1.0;
      for (;;) {
        const double u = 1.0 - rng.Uniform();  // in (0, 1]
        i += 1.0 + std::floor(std::log(u) / log_keep);
        if (!(i < double(n))) break;
        dp_picked_.push_back(static_cast<uint32_t>(i));
      }
    }
    dp_sum_.assign(dim, 0.0f);
    for (size_t first = 0; first < dp_picked_.size(); first += chunk) {
      const int batch = static_cast<int>(std::min<size_t>(chunk, dp_picked_.size() - first));
      model_->LoadBatch(data, dp_picked_.data() + first, batch);
      FM_ASSIGN_OR_RETURN(const Backend::LossResult r,
                          model_->ForwardBackwardClipped(batch, SplitMix64(step_++), dp.clip,
                                                         nullptr));
      const float* g = model_->grads();
      for (size_t k = 0; k < dim; ++k) dp_sum_[k] += g[k];
      loss_sum += r.loss_sum;
      correct += r.correct;
      stats.samples += batch;
    }
    dp.add_noise(dp_sum_, dp.noise_multiplier * dp.clip);
    float* g = model_->grads();
    for (size_t k = 0; k < dim; ++k) g[k] = dp_sum_[k] * inv_expected;
    sgd_.Step();
    ++stats.steps;
    ++stats.dp_steps;
  }
  FM_RETURN_IF_ERROR(model_->backend().Synchronize());
  FinishEpoch(&stats, start, loss_sum, correct);
  FM_RETURN_IF_ERROR(model_->status());
  return stats;
}

}  // namespace fedmesh
