// Server optimisers: strategies that treat the round's example-weighted mean of the clients'
// models as a step proposal and apply it with an optimiser kept on the aggregator. With
// delta = mean - global (the negative pseudo-gradient):
//   fedavgm     v <- beta v + delta;                 w <- w + eta v      (Hsu et al. 2019)
//   fedadam     m <- b1 m + (1-b1) delta;  v <- b2 v + (1-b2) delta^2
//   fedyogi     m as Adam;  v <- v - (1-b2) delta^2 sign(v - delta^2)
//   fedadagrad  m as Adam;  v <- v + delta^2
//               w <- w + eta m / (sqrt(v) + tau),  v starting at tau^2  (Reddi et al. 2021)
// The moments are the strategy's state: SaveState/RestoreState carry them through the
// aggregator store, so a restarted aggregator continues with the same momentum. Moments and
// the new model are computed in full before anything is written, so a failed round (a bad
// update, a step that overflows) changes neither the state nor the output.
// Thread-safety: one thread of control; a ServerOptimizer keeps state between rounds.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "aggregator/strategy.h"
#include "core/status.h"

namespace fedmesh {

enum class ServerOptimizerKind { kMomentum, kAdam, kYogi, kAdagrad };

class ServerOptimizer final : public Strategy {
 public:
  // InvalidArgument naming the option: server_lr not finite or < 0, server_momentum, beta1 or
  // beta2 outside [0, 1), tau not finite or <= 0.
  static Result<std::unique_ptr<ServerOptimizer>> Create(ServerOptimizerKind kind,
                                                         const StrategyOptions& options);

  // InvalidArgument (see CheckRoundUpdates; also an example-weight error, or a step that
  // is not finite) with `new_global` and the moments untouched.
  Status Aggregate(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                   std::span<float> new_global) override;
  std::string_view name() const override;

  // fedavgm: v; the adaptive ones: m then v. Empty before the first round.
  std::vector<float> SaveState() const override;
  Status RestoreState(std::span<const float> state, size_t model_size) override;

  double server_lr() const { return eta_; }

 private:
  ServerOptimizer(ServerOptimizerKind kind, const StrategyOptions& options, double eta);
  bool adaptive() const { return kind_ != ServerOptimizerKind::kMomentum; }

  ServerOptimizerKind kind_;
  double eta_, momentum_, beta1_, beta2_, tau_;
  std::vector<float> m_;  // adaptive: first moment
  std::vector<float> v_;  // fedavgm: velocity; adaptive: second moment
};

}  // namespace fedmesh
