// Central differential privacy as a strategy decorator (DP-FedAvg, McMahan et al. 2018):
// each update's change to the global model is clipped to L2 norm C, the clipped changes are
// summed, Gaussian noise N(0, (z C)^2) is added to every coordinate of the sum, and the sum
// is divided by the expected number of clients m. The wrapped strategy (fedavg, fedprox or
// a server optimiser) then applies that noised mean as if it were the one update of the
// round. Every client weighs the same: a weight taken from num_examples would let one site
// move the mean by more than C / m and break the sensitivity bound.
// An RDP accountant (crypto/dp/rdp_accountant.h) composes one subsampled Gaussian mechanism
// per round; privacy() reports epsilon at delta and CanRunAnotherRound() refuses a round
// that would exceed the budget. With adaptive clipping C follows a quantile of the update
// norms (Andrew et al. 2021), its noised count paid for out of the same multiplier z.
// The state (rounds accounted, C, then the wrapped strategy's state) goes through
// SaveState/RestoreState, so a restarted aggregator neither forgets spent privacy nor
// resets the bound.
// Thread-safety: one thread of control (noise stream, accountant and C are state).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "aggregator/strategy.h"
#include "core/status.h"
#include "crypto/dp/gaussian_noise.h"
#include "crypto/dp/rdp_accountant.h"

namespace fedmesh {

// With DpOptions::distributed the nodes have clipped and noised under secure aggregation:
// Aggregate passes the round's update to the wrapped strategy unchanged and only accounts.
class CentralDpAggregation final : public Strategy {
 public:
  // InvalidArgument naming the option: clip not finite or <= 0, noise_multiplier < 0 or not
  // finite, delta outside (0, 1), epsilon_budget < 0, expected_clients 0, population below
  // expected_clients, target_quantile outside (0, 1), clip_lr <= 0, adaptive clipping with
  // z >= expected_clients / 10; a robust `inner` (median, krum...: with one noised mean to
  // combine they would be a no-op) is refused too.
  static Result<std::unique_ptr<Strategy>> Wrap(std::unique_ptr<Strategy> inner,
                                                const DpOptions& options);

  Status Aggregate(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                   std::span<float> new_global) override;
  std::string_view name() const override { return name_; }
  double prox_mu() const override { return inner_->prox_mu(); }
  std::optional<PrivacyReport> privacy() const override;
  Status CanRunAnotherRound() const override;
  std::vector<float> SaveState() const override;
  Status RestoreState(std::span<const float> state, size_t model_size) override;

  // The noise multiplier of the update sum: z itself, or less with adaptive clipping.
  double update_noise_multiplier() const { return z_update_; }

 private:
  CentralDpAggregation(std::unique_ptr<Strategy> inner, const DpOptions& options,
                       RdpAccountant accountant, GaussianNoise noise, double q, double z_update);

  std::unique_ptr<Strategy> inner_;
  DpOptions options_;
  RdpAccountant accountant_;
  GaussianNoise noise_;
  std::string name_;
  double q_;
  double z_update_;
  double clip_;
  uint64_t rounds_ = 0;
};

}  // namespace fedmesh
