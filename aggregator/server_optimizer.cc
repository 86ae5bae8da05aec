#include "aggregator/server_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace fedmesh {
namespace {

std::string Num(double v) { return FormatNumber(v); }

Status CheckRate(double v, const char* field) {
  if (!(v >= 0.0 && v < 1.0)) {
    return Status::InvalidArgument(std::string(field) + " must be in [0, 1) (got " + Num(v) + ")");
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<ServerOptimizer>> ServerOptimizer::Create(ServerOptimizerKind kind,
                                                                 const StrategyOptions& o) {
  if (!std::isfinite(o.server_lr) || o.server_lr < 0) {
    return Status::InvalidArgument("server_lr must be finite and >= 0, 0 meaning the "
                                   "strategy's default (got " + Num(o.server_lr) + ")");
  }
  FM_RETURN_IF_ERROR(CheckRate(o.server_momentum, "server_momentum"));
  FM_RETURN_IF_ERROR(CheckRate(o.beta1, "beta1"));
  FM_RETURN_IF_ERROR(CheckRate(o.beta2, "beta2"));
  if (!std::isfinite(o.tau) || o.tau <= 0) {
    return Status::InvalidArgument("tau must be finite and > 0 (got " + Num(o.tau) + ")");
  }
  // fedavgm's default keeps the steady-state step eta / (1 - beta) at FedAvg's 1.
  const double eta = o.server_lr > 0 ? o.server_lr
                     : kind == ServerOptimizerKind::kMomentum ? 1.0 - o.server_momentum
                                                              : 0.01;
  return std::unique_ptr<ServerOptimizer>(new ServerOptimizer(kind, o, eta));
}

ServerOptimizer::ServerOptimizer(ServerOptimizerKind kind, const StrategyOptions& o, double eta)
    : kind_(kind), eta_(eta), momentum_(o.server_momentum), beta1_(o.beta1), beta2_(o.beta2),
      tau_(o.tau) {}

std::string_view ServerOptimizer::name() const {
  switch (kind_) {
    case ServerOptimizerKind::kMomentum: return "fedavgm";
    case ServerOptimizerKind::kAdam: return "fedadam";
    case ServerOptimizerKind::kYogi: return "fedyogi";
    case ServerOptimizerKind::kAdagrad: return "fedadagrad";
  }
  return "unknown";
}

Status ServerOptimizer::Aggregate(std::span<const float> global,
                                  const std::vector<ClientUpdate>& updates,
                                  std::span<float> new_global) {
  const std::string ctx(name());
  const size_t d = global.size();
  FM_RETURN_IF_ERROR(CheckRoundUpdates(global, updates, new_global).WithContext(ctx));
  std::vector<float> mean(d);
  FM_RETURN_IF_ERROR(ExampleWeightedMean(global, updates, mean).WithContext(ctx));
  if (!v_.empty() && v_.size() != d) {
    return Status::InvalidArgument(ctx + ": the optimiser state is for a model of " +
                                   std::to_string(v_.size()) + " values, not " + std::to_string(d));
  }
  // Everything into fresh buffers first: a step that overflows must change nothing.
  std::vector<float> m = m_, v = v_, next(d);
  if (v.empty()) {
    v.assign(d, adaptive() ? static_cast<float>(tau_ * tau_) : 0.0f);
    if (adaptive()) m.assign(d, 0.0f);
  }
  for (size_t i = 0; i < d; ++i) {
    const double delta = static_cast<double>(mean[i]) - global[i];
    double step;
    if (kind_ == ServerOptimizerKind::kMomentum) {
      const double vi = momentum_ * v[i] + delta;
      v[i] = static_cast<float>(vi);
      step = eta_ * vi;
    } else {
      const double mi = beta1_ * m[i] + (1 - beta1_) * delta;
      const double d2 = delta * delta;
      double vi = v[i];
      switch (kind_) {
        case ServerOptimizerKind::kAdam: vi = beta2_ * vi + (1 - beta2_) * d2; break;
        case ServerOptimizerKind::kYogi:
          vi -= (1 - beta2_) * d2 * (vi > d2 ? 1.0 : (vi < d2 ? -1.0 : 0.0));
          break;
        default: vi += d2; break;  // adagrad
      }
      m[i] = static_cast<float>(mi);
      v[i] = static_cast<float>(vi);
      step = eta_ * mi / (std::sqrt(vi) + tau_);
    }
    next[i] = static_cast<float>(global[i] + step);
    if (!std::isfinite(next[i]) || !std::isfinite(v[i])) {
      return Status::InvalidArgument(ctx + ": the server step at index " + std::to_string(i) +
                                     " is not finite (delta " + Num(delta) +
                                     "); lower server_lr");
    }
  }
  std::copy(next.begin(), next.end(), new_global.begin());
  m_ = std::move(m);
  v_ = std::move(v);
  return Status::OK();
}

std::vector<float> ServerOptimizer::SaveState() const {
  std::vector<float> state = m_;
  state.insert(state.end(), v_.begin(), v_.end());
  return state;
}

Status ServerOptimizer::RestoreState(std::span<const float> state, size_t model_size) {
  const std::string ctx(name());
  if (state.empty()) {
    m_.clear();
    v_.clear();
    return Status::OK();
  }
  const size_t want = (adaptive() ? 2 : 1) * model_size;
  if (state.size() != want) {
    return Status::InvalidArgument(ctx + ": a saved state of " + std::to_string(state.size()) +
                                   " values does not fit a model of " +
                                   std::to_string(model_size) + " (expected " +
                                   std::to_string(want) + ")");
  }
  for (size_t i = 0; i < state.size(); ++i) {
    const bool second_moment = adaptive() && i >= model_size;
    if (!std::isfinite(state[i]) || (second_moment && state[i] < 0)) {
      return Status::InvalidArgument(ctx + ": saved state value " + std::to_string(i) + " is " +
                                     Num(state[i]) +
                                     (second_moment ? "; second moments must be finite and >= 0"
                                                    : "; values must be finite"));
    }
  }
  if (adaptive()) {
    m_.assign(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(model_size));
    v_.assign(state.begin() + static_cast<std::ptrdiff_t>(model_size), state.end());
  } else {
    m_.clear();
    v_.assign(state.begin(), state.end());
  }
  return Status::OK();
}

}  // namespace fedmesh
