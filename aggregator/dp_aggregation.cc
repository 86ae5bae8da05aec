#include "aggregator/dp_aggregation.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

namespace fedmesh {
namespace {

std::string Num(double v) { return FormatNumber(v); }

Status Bad(const std::string& m) { return Status::InvalidArgument("dp: " + m); }

// sigma_b of the clipped-count query (Andrew et al. 2021 suggest m / 20).
double CountNoise(const DpOptions& o) { return static_cast<double>(o.expected_clients) / 20.0; }

}  // namespace

Result<std::unique_ptr<Strategy>> CentralDpAggregation::Wrap(std::unique_ptr<Strategy> inner,
                                                             const DpOptions& o) {
  if (!inner) return Bad("no strategy to wrap");
  for (std::string_view robust : {"median", "trimmed_mean", "krum", "multikrum"}) {
    if (inner->name() == robust) {
      return Bad("central DP hands the strategy one noised mean per round, so " +
                 std::string(robust) + " would have nothing to choose from; use fedavg or a "
                 "server optimiser");
    }
  }
  if (o.central && o.distributed) return Bad("central and distributed are exclusive: pick one");
  if (o.distributed && o.adaptive_clip) {
    return Bad("adaptive_clip needs each update's norm, which distributed DP (under secure "
               "aggregation) hides");
  }
  if (!std::isfinite(o.clip) || o.clip <= 0) return Bad("clip must be finite and > 0 (got " + Num(o.clip) + ")");
  if (!std::isfinite(o.noise_multiplier) || o.noise_multiplier < 0) {
    return Bad("noise_multiplier must be finite and >= 0 (got " + Num(o.noise_multiplier) + ")");
  }
  if (!(o.delta > 0 && o.delta < 1)) return Bad("delta must be in (0, 1) (got " + Num(o.delta) + ")");
  if (!std::isfinite(o.epsilon_budget) || o.epsilon_budget < 0) {
    return Bad("epsilon_budget must be finite and >= 0, 0 meaning none (got " +
               Num(o.epsilon_budget) + ")");
  }
  if (o.expected_clients == 0) return Bad("expected_clients must be > 0 (clients_per_round)");
  const uint64_t population = o.population > 0 ? o.population : o.expected_clients;
  if (population < o.expected_clients) {
    return Bad("population (" + std::to_string(o.population) +
               ") is smaller than the clients expected per round (" +
               std::to_string(o.expected_clients) + ")");
  }
  double z_update = o.noise_multiplier;
  if (o.adaptive_clip) {
    if (!(o.target_quantile > 0 && o.target_quantile < 1)) {
      return Bad("target_quantile must be in (0, 1) (got " + Num(o.target_quantile) + ")");
    }
    if (!std::isfinite(o.clip_lr) || o.clip_lr <= 0) {
      return Bad("clip_lr must be finite and > 0 (got " + Num(o.clip_lr) + ")");
    }
    const double two_sigma_b = 2 * CountNoise(o);
    if (!(o.noise_multiplier < two_sigma_b) || o.noise_multiplier == 0) {
      return Bad("adaptive_clip needs 0 < noise_multiplier < expected_clients / 10 = " +
                 Num(two_sigma_b) + " (got " + Num(o.noise_multiplier) +
                 "): the clipped-count query takes its share of the noise");
    }
    z_update = 1.0 / std::sqrt(1.0 / (o.noise_multiplier * o.noise_multiplier) -
                               1.0 / (two_sigma_b * two_sigma_b));
  }
  FM_ASSIGN_OR_RETURN(RdpAccountant accountant, RdpAccountant::Create());
  FM_ASSIGN_OR_RETURN(GaussianNoise noise, GaussianNoise::Create(o.noise_seed));
  const double q = static_cast<double>(o.expected_clients) / static_cast<double>(population);
  return std::unique_ptr<Strategy>(new CentralDpAggregation(
      std::move(inner), o, std::move(accountant), std::move(noise), q, z_update));
}

CentralDpAggregation::CentralDpAggregation(std::unique_ptr<Strategy> inner, const DpOptions& o,
                                           RdpAccountant accountant, GaussianNoise noise,
                                           double q, double z_update)
    : inner_(std::move(inner)), options_(o), accountant_(std::move(accountant)),
      noise_(std::move(noise)), name_("dp+" + std::string(inner_->name())), q_(q),
      z_update_(z_update), clip_(o.clip) {}

Status CentralDpAggregation::Aggregate(std::span<const float> global,
                                       const std::vector<ClientUpdate>& updates,
                                       std::span<float> new_global) {
  FM_RETURN_IF_ERROR(CheckRoundUpdates(global, updates, new_global).WithContext(name_));
  // Nothing is committed until the wrapped strategy accepted the round: a refusal must
  // neither spend privacy nor move the bound.
  FM_RETURN_IF_ERROR(
      accountant_.EpsilonIfComposed(q_, options_.noise_multiplier, 1, options_.delta).status());
  if (options_.distributed) {  // the nodes clipped and noised under secure aggregation
    FM_RETURN_IF_ERROR(inner_->Aggregate(global, updates, new_global).WithContext(name_));
    FM_RETURN_IF_ERROR(accountant_.Compose(q_, options_.noise_multiplier, 1));
    ++rounds_;
    return Status::OK();
  }
  const size_t d = global.size();
  std::vector<double> sum(d, 0.0);
  double unclipped = 0;
  for (const ClientUpdate& u : updates) {
    double norm_sq = 0;
    for (size_t i = 0; i < d; ++i) {
      const double t = static_cast<double>(u.params[i]) - global[i];
      norm_sq += t * t;
    }
    const double norm = std::sqrt(norm_sq);
    const double scale = norm > clip_ ? clip_ / norm : 1.0;
    if (norm <= clip_) unclipped += 1;
    for (size_t i = 0; i < d; ++i) sum[i] += scale * (static_cast<double>(u.params[i]) - global[i]);
  }
  GaussianNoise noise = noise_;  // advanced for real only when the round is accepted
  const double m = static_cast<double>(options_.expected_clients);
  const double stddev = z_update_ * clip_;
  ClientUpdate mean{"dp-noised-mean", 1, std::vector<float>(d)};
  for (size_t i = 0; i < d; ++i) {
    const double noised = sum[i] + (stddev > 0 ? stddev * noise.Standard() : 0.0);
    mean.params[i] = static_cast<float>(global[i] + noised / m);
  }
  double next_clip = clip_;
  if (options_.adaptive_clip) {
    const double b = (unclipped + CountNoise(options_) * noise.Standard()) / m;
    next_clip = clip_ * std::exp(-options_.clip_lr * (b - options_.target_quantile));
  }
  FM_RETURN_IF_ERROR(inner_->Aggregate(global, {std::move(mean)}, new_global).WithContext(name_));
  FM_RETURN_IF_ERROR(accountant_.Compose(q_, options_.noise_multiplier, 1));
  noise_ = std::move(noise);
  clip_ = next_clip;
  ++rounds_;
  return Status::OK();
}

std::optional<PrivacyReport> CentralDpAggregation::privacy() const {
  PrivacyReport r;
  r.rounds = rounds_;
  r.delta = options_.delta;
  r.clip_norm = clip_;
  r.noise_multiplier = options_.noise_multiplier;
  r.sampling_rate = q_;
  auto spent = accountant_.Epsilon(options_.delta);
  r.epsilon = spent.ok() ? spent->epsilon : 0.0;
  return r;
}

Status CentralDpAggregation::CanRunAnotherRound() const {
  if (options_.epsilon_budget <= 0) return Status::OK();
  FM_ASSIGN_OR_RETURN(PrivacySpent next, accountant_.EpsilonIfComposed(
                                             q_, options_.noise_multiplier, 1, options_.delta));
  if (next.epsilon <= options_.epsilon_budget) return Status::OK();
  return Status::FailedPrecondition(
      "privacy budget: another round would spend epsilon " + Num(next.epsilon) + " at delta " +
      Num(options_.delta) + ", above the budget " + Num(options_.epsilon_budget) + " (after " +
      std::to_string(rounds_) + " round(s))");
}

std::vector<float> CentralDpAggregation::SaveState() const {
  std::vector<float> state = {static_cast<float>(rounds_), static_cast<float>(clip_)};
  const std::vector<float> inner = inner_->SaveState();
  state.insert(state.end(), inner.begin(), inner.end());
  return state;
}

Status CentralDpAggregation::RestoreState(std::span<const float> state, size_t model_size) {
  if (state.empty()) {  // no round closed yet (model version 0): nothing spent
    FM_RETURN_IF_ERROR(inner_->RestoreState(state, model_size).WithContext(name_));
    FM_ASSIGN_OR_RETURN(accountant_, RdpAccountant::Create());
    rounds_ = 0;
    clip_ = options_.clip;
    return Status::OK();
  }
  if (state.size() < 2) return Bad("a saved state of " + std::to_string(state.size()) +
                                   " value(s) lacks the rounds and the clip bound");
  const double rounds = state[0], clip = state[1];
  if (!(rounds >= 0) || rounds != std::floor(rounds) || rounds > 16777216.0) {
    return Bad("saved rounds " + Num(rounds) + " is not a count");
  }
  if (!std::isfinite(clip) || clip <= 0) return Bad("saved clip bound " + Num(clip) + " is not > 0");
  FM_ASSIGN_OR_RETURN(RdpAccountant accountant, RdpAccountant::Create());
  FM_RETURN_IF_ERROR(accountant.Compose(q_, options_.noise_multiplier, static_cast<uint64_t>(rounds)));
  FM_RETURN_IF_ERROR(inner_->RestoreState(state.subspan(2), model_size).WithContext(name_));
  accountant_ = std::move(accountant);
  rounds_ = static_cast<uint64_t>(rounds);
  clip_ = options_.adaptive_clip ? clip : options_.clip;
  return Status::OK();
}

}  // namespace fedmesh
