// Strategy: how the aggregator turns the clients' updates of one round into the next global
// model. The round engine (aggregator/round_engine.h) sees only this interface; each
// strategy (FedAvg, FedProx, later FedAvgM, FedAdam, robust ones) implements it and
// MakeStrategy builds one by its configured name. A strategy also says what it needs the
// nodes to do differently (FedProx: the proximal term, sent as FitTask::prox_mu).
// Updates reach a strategy already validated by the engine (selected node, right round,
// right size, finite), but Aggregate still returns a Status rather than trusting that.
// Thread-safety: a Strategy is used by one thread of control (the engine's owner); the
// stateless ones below may be shared, stateful future ones (server momentum) may not.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fedmesh {

// One client's contribution to a round.
struct ClientUpdate {
  std::string node_id;
  uint64_t num_examples = 0;  // examples the client trained on this round: its FedAvg weight
  std::vector<float> params;  // the client's new local weights, dense float32, model-sized

  friend bool operator==(const ClientUpdate&, const ClientUpdate&) = default;
};

// Settings every strategy factory understands; a strategy ignores those it does not use.
struct StrategyOptions {
  // FedProx's proximal coefficient mu: each node minimises f(w) + mu/2 ||w - w_global||^2.
  // Default: 0.01 (the middle of the range the FedProx paper sweeps, {0.001 .. 1}).
  // Must be finite and > 0 for "fedprox"; ignored by "fedavg".
  double prox_mu = 0.01;
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  // Writes the new global model into `new_global` from the current `global` and the
  // round's `updates`. REQUIRES: new_global.size() == global.size(). `new_global` may be
  // the very buffer of `global`. On error, `new_global` is left untouched.
  virtual Status Aggregate(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                           std::span<float> new_global) = 0;

  // The name MakeStrategy knows this strategy by ("fedavg", "fedprox").
  virtual std::string_view name() const = 0;

  // The proximal coefficient nodes must apply (FitTask::prox_mu); 0 = plain local SGD.
  virtual double prox_mu() const { return 0.0; }
};

// FedAvg (McMahan et al. 2017): the new global model is the average of the clients' local
// weights, each weighted by its num_examples. `global` is only used for its size.
// InvalidArgument when there are no updates, a size differs from the model's, a value is not
// finite, or every update has num_examples == 0 (the message names the update).
class FedAvg : public Strategy {
 public:
  Status Aggregate(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                   std::span<float> new_global) override;
  std::string_view name() const override { return "fedavg"; }
};

// FedProx (Li et al. 2020): FedAvg aggregation; the difference is on the nodes, which add
// the proximal term mu/2 ||w - w_global||^2 to their local loss. The engine sends prox_mu()
// in every FitTask. REQUIRES: prox_mu finite and > 0 (MakeStrategy checks it).
class FedProx final : public FedAvg {
 public:
  explicit FedProx(double prox_mu) : prox_mu_(prox_mu) {}
  std::string_view name() const override { return "fedprox"; }
  double prox_mu() const override { return prox_mu_; }

 private:
  double prox_mu_;
};

// The names MakeStrategy accepts, in the order its error message lists them.
std::vector<std::string_view> KnownStrategyNames();

// Builds the strategy called `name` (case-insensitive: "fedavg", "fedprox").
// InvalidArgument naming the known strategies for an unknown name, or naming the option for
// a bad option value.
Result<std::unique_ptr<Strategy>> MakeStrategy(std::string_view name,
                                               const StrategyOptions& options = {});

}  // namespace fedmesh
