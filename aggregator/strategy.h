// Strategy: how the aggregator turns the clients' updates of one round into the next global
// model. The round engine (aggregator/round_engine.h) sees only this interface; each
// strategy (FedAvg, FedProx; the server optimisers in aggregator/server_optimizer.h; the
// robust aggregators in aggregator/robust_aggregation.h) implements it and
// MakeStrategy builds one by its configured name. A strategy also says what it needs the
// nodes to do differently (FedProx: the proximal term, sent as FitTask::prox_mu).
// Updates reach a strategy already validated by the engine (selected node, right round,
// right size, finite), but Aggregate still returns a Status rather than trusting that.
// Thread-safety: a Strategy is used by one thread of control (the engine's owner); the
// stateless ones may be shared, the server optimisers (which keep moments) may not.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

// Central differential privacy (DP-FedAvg, McMahan et al. 2018; aggregator/dp_aggregation.h):
// the aggregator clips each client's update (its change to the global model) to L2 norm
// `clip`, sums them, adds Gaussian noise of standard deviation noise_multiplier * clip to
// the sum and divides by expected_clients; the configured strategy then applies that noised
// mean (fedavg: as the new model; a server optimiser: as its delta). An RDP accountant
// reports epsilon at `delta` after every round and stops the federation before a round
// that would exceed epsilon_budget. Config: the [dp] table.
struct DpOptions {
  // Off by default: no clipping, no noise, no accounting.
  bool central = false;
  // Distributed DP under secure aggregation ([dp] mode = "distributed"): every node clips
  // its change to `clip` and adds its share of the noise before masking
  // (SecAggSettings::noise_stddev, sized so that the sum's noise is at least
  // noise_multiplier * clip), and the strategy only accounts: it applies the round's
  // update unchanged and composes the same mechanism as central DP. Not with `central`.
  bool distributed = false;
  // Initial L2 bound of each update (the whole bound when adaptive_clip is off). > 0.
  // Default: 1.0.
  double clip = 1.0;
  // z: the sum's noise standard deviation is z * clip. >= 0 (0: clipping only, and an
  // infinite epsilon). Default: 1.0.
  double noise_multiplier = 1.0;
  // Adaptive clipping (Andrew et al. 2021): after each round the bound moves geometrically
  // towards the target_quantile of the update norms, clip <- clip * exp(-clip_lr * (b - q))
  // where b is the noised fraction of updates that were not clipped. Its count noise
  // (sigma_b = expected_clients / 20) is paid for out of the same budget, so the update
  // noise multiplier becomes (z^-2 - (2 sigma_b)^-2)^(-1/2): z must be < expected_clients
  // / 10. Defaults: off, 0.5, 0.2.
  bool adaptive_clip = false;
  double target_quantile = 0.5;
  double clip_lr = 0.2;
  // The delta epsilon is reported for, in (0, 1). Default: 1e-5.
  double delta = 1e-5;
  // Stop before a round that would take epsilon above this; 0 = no budget. Default: 0.
  double epsilon_budget = 0;
  // m: the clients expected per round; the noised sum is divided by it whatever number
  // answered (a data-independent denominator). Required > 0 when central; the aggregator
  // and the simulator set it from clients_per_round.
  uint32_t expected_clients = 0;
  // Clients the round samples from: the accountant's sampling rate is q = expected_clients
  // / population (the engine samples without replacement; the accountant assumes Poisson
  // sampling at that rate, the usual approximation). 0 = expected_clients (q = 1, every
  // site in every round, the cross-silo case). Default: 0.
  uint64_t population = 0;
  // The noise's ChaCha20 key: nullopt = the OS CSPRNG (always, on a real aggregator); a
  // seed only in simulations, for reproducible runs.
  std::optional<uint64_t> noise_seed;
};

// Why central DP refuses [rounds] mode = "buffered" (the aggregator's config and the
// simulator's options say so with this sentence).
inline constexpr char kDpNeedsSynchronousRounds[] =
    "central DP accounts synchronous rounds (each a uniform sample of clients_per_round nodes "
    "of [dp] population, all trained from the same model); buffered rounds aggregate the first "
    "buffer_size updates to arrive, trained from older models too, which that accounting does "
    "not cover: set [rounds] mode = \"sync\"";

// What a differentially private strategy has spent after the rounds it aggregated.
struct PrivacyReport {
  uint64_t rounds = 0;           // rounds aggregated (composed by the accountant)
  double epsilon = 0;            // at `delta`; +inf with noise_multiplier 0
  double delta = 0;
  double clip_norm = 0;          // the bound the next round will use
  double noise_multiplier = 0;   // z of the whole mechanism
  double sampling_rate = 0;      // q
};

// Settings every strategy factory understands; a strategy ignores those it does not use.
// Config: [rounds] prox_mu and the [strategy] table (aggregator/strategy_config.h).
struct StrategyOptions {
  // FedProx's proximal coefficient mu: each node minimises f(w) + mu/2 ||w - w_global||^2.
  // Default: 0.01 (the middle of the range the FedProx paper sweeps, {0.001 .. 1}).
  // Must be finite and > 0 for "fedprox"; ignored by "fedavg".
  double prox_mu = 0.01;

  // ---- Server optimisers (aggregator/server_optimizer.h) on the pseudo-gradient
  // delta = (example-weighted mean of the clients' models) - global.
  // Server step size eta. 0 = the strategy's default: 1 - server_momentum for fedavgm (a
  // steady-state step eta / (1 - beta) of 1, FedAvg's; with momentum 0 it is exactly
  // FedAvg), 0.01 for fedadam, fedyogi and fedadagrad (Reddi et al. 2021 find 10^-2 ..
  // 10^-1.5 best with tau = 1e-3). Must be finite and >= 0.
  double server_lr = 0.0;
  // fedavgm's server momentum beta (Hsu et al. 2019): v <- beta v + delta,
  // w <- w + eta v. In [0, 1). Default: 0.9.
  double server_momentum = 0.9;
  // Adaptive optimisers' first and second moment decay rates, in [0, 1). Defaults: 0.9,
  // 0.99 (Reddi et al.; beta2 is unused by fedadagrad).
  double beta1 = 0.9;
  double beta2 = 0.99;
  // Adaptivity tau: w <- w + eta m / (sqrt(v) + tau); v starts at tau^2. > 0. Default 1e-3.
  double tau = 1e-3;

  // ---- Robust aggregators (aggregator/robust_aggregation.h); they ignore num_examples.
  // trimmed_mean: the fraction of the updates dropped at EACH end of every coordinate,
  // in [0, 0.5). Default: 0.1.
  double trim_fraction = 0.1;
  // krum, multikrum: the fraction f/n of the round's updates assumed Byzantine, in
  // [0, 0.5). f = floor(fraction * n), lowered when needed so that n >= 2f + 3 (Krum's
  // condition) holds whenever n >= 3. Default: 0.2.
  double byzantine_fraction = 0.2;
  // multikrum: how many of the best-scored updates are averaged; 0 = n - f. Default: 0.
  uint32_t multikrum_select = 0;

  // Central differential privacy around the strategy (off by default).
  DpOptions dp = {};
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

  // Privacy spent so far when the strategy is differentially private; nullopt otherwise.
  virtual std::optional<PrivacyReport> privacy() const { return std::nullopt; }
  // OK when another round may run; otherwise why not (a privacy budget that the next round
  // would exceed). The engine then finishes the federation with that reason.
  virtual Status CanRunAnotherRound() const { return Status::OK(); }

  // State carried from round to round (a server optimiser's moments), flattened, for the
  // aggregator store to commit with each global model; empty for stateless strategies.
  virtual std::vector<float> SaveState() const { return {}; }
  // Restores what SaveState returned after a restart, for a model of `model_size` values.
  // InvalidArgument (state unchanged) when `state` does not fit this strategy and model; a
  // stateless strategy accepts only an empty state.
  virtual Status RestoreState(std::span<const float> state, size_t /*model_size*/) {
    if (state.empty()) return Status::OK();
    return Status::InvalidArgument("strategy " + std::string(name()) +
                                   " keeps no state, but " + std::to_string(state.size()) +
                                   " values were given to restore");
  }
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

// The checks every strategy makes before it aggregates: `new_global` has the model's size,
// there is at least one update, and every update has the model's size and only finite
// values. InvalidArgument naming the update (and the index of a bad value) otherwise.
Status CheckRoundUpdates(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                         std::span<const float> new_global);

// FedAvg's arithmetic: the num_examples-weighted mean of the updates' params into `out`
// (which may be `global`'s buffer). CheckRoundUpdates' errors, and InvalidArgument when
// every num_examples is 0; `out` is untouched on error.
Status ExampleWeightedMean(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                           std::span<float> out);

// The names MakeStrategy accepts, in the order its error message lists them.
std::vector<std::string_view> KnownStrategyNames();

// Builds the strategy called `name` (case-insensitive: "fedavg", "fedprox", "fedavgm",
// "fedadam", "fedyogi", "fedadagrad", "median", "trimmed_mean", "krum", "multikrum").
// InvalidArgument naming the known strategies for an unknown name, or naming the option for
// a bad option value.
Result<std::unique_ptr<Strategy>> MakeStrategy(std::string_view name,
                                               const StrategyOptions& options = {});

}  // namespace fedmesh
