// RdpAccountant: how much differential privacy a training run has spent. Each DP-SGD step
// (or DP-FedAvg round) is a Poisson-subsampled Gaussian mechanism: every record (or
// client) joins the batch independently with probability q, and Gaussian noise of standard
// deviation noise_multiplier * clip_norm is added to the sum of clipped contributions. The
// accountant keeps that mechanism's Renyi differential privacy (RDP) at a fixed set of
// orders, where composition is plain addition, and converts the total to an
// (epsilon, delta) guarantee on request.
// The mathematics is exactly that of Google's dp-accounting RdpAccountant (v0.6.0, the
// add-or-remove-one neighbouring relation): Mironov, Talwar and Zhang 2019, "Renyi
// Differential Privacy of the Sampled Gaussian Mechanism" for the per-step RDP, and the
// conversion of Balle et al. 2020 / Canonne, Kamath and Steinke 2020 to epsilon. So
// fedmesh's epsilons are dp-accounting's (which current TF Privacy reports); the tests
// check dp-accounting's own values (tests/data/rdp_reference*.csv).
// Thread-safety: the free functions are pure and may run on any number of threads. An
// RdpAccountant is a lock-free value: its const methods may run concurrently, while
// Compose and RestoreRdp need exclusive access.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"

namespace fedmesh {

// Orders above this are refused: an integer order costs O(order) to evaluate, and an order
// alpha can only be the optimal one when epsilon is below about log(1/delta) / (alpha - 1),
// so past dp-accounting's largest default (1024) it matters only for epsilons near 0.01.
inline constexpr double kMaxRdpOrder = 1e6;

// dp-accounting's DEFAULT_RDP_ORDERS (dp_accounting/rdp/rdp_privacy_accountant.py): 1.1,
// 1.2, ..., 10.9 (computed as 1 + x / 10.0 for x = 1..99, so the doubles are identical),
// then 11, 12, ..., 63, then 128, 256, 512, 1024. 156 orders in all.
std::vector<double> DefaultRdpOrders();

struct RdpAccountantOptions {
  // Renyi orders alpha at which RDP is tracked: each finite, > 1 and <= kMaxRdpOrder.
  // Epsilon is the minimum over these orders, so more orders can only tighten it. Orders
  // in (1, 1.01] are accepted but never give a finite epsilon (the conversion is unstable
  // there; dp-accounting skips them the same way).
  // Default: DefaultRdpOrders(), the same orders as dp-accounting's RdpAccountant.
  std::vector<double> orders = DefaultRdpOrders();
};

struct PrivacySpent {
  double epsilon;  // >= 0; +inf when some step had no noise
  double order;    // the Renyi order alpha at which epsilon is attained
};

// The RDP at each of `orders` of ONE application of the sampled Gaussian mechanism with
// sampling probability `q` in [0, 1] and `noise_multiplier` >= 0 (noise standard deviation
// over L2 sensitivity). q == 0 gives 0 at every order; noise_multiplier == 0 with q > 0
// gives +inf; q == 1 is the plain Gaussian mechanism, alpha / (2 sigma^2). Like
// dp-accounting, a fractional order whose series has not converged after 1000 terms (small
// orders when q is large) gets +inf, which keeps it out of the epsilon minimum.
// InvalidArgument for q outside [0, 1] or NaN, a negative, infinite or NaN
// noise_multiplier, or an order that RdpAccountantOptions::orders would refuse.
Result<std::vector<double>> SampledGaussianRdp(double q, double noise_multiplier,
                                               std::span<const double> orders);

class RdpAccountant {
 public:
  // An accountant that has spent nothing yet. InvalidArgument when options.orders is
  // empty or holds an order that is not finite, not > 1 or above kMaxRdpOrder.
  static Result<RdpAccountant> Create(RdpAccountantOptions options = {});

  // Adds `steps` applications of the sampled Gaussian mechanism (q, noise_multiplier), as
  // SampledGaussianRdp describes them. steps == 0 changes nothing. InvalidArgument for a
  // bad q or noise_multiplier, and then the accountant is left unchanged.
  Status Compose(double q, double noise_multiplier, uint64_t steps = 1);

  // The smallest epsilon over the tracked orders such that everything composed so far is
  // (epsilon, delta)-DP. +inf when a step had noise_multiplier 0. InvalidArgument unless
  // delta is in (0, 1).
  Result<PrivacySpent> Epsilon(double delta) const;

  // Epsilon(delta) as it would be after Compose(q, noise_multiplier, steps), leaving this
  // accountant unchanged: what a trainer asks before a step to stop before its budget is
  // exceeded. Errors as Compose and Epsilon.
  Result<PrivacySpent> EpsilonIfComposed(double q, double noise_multiplier, uint64_t steps,
                                         double delta) const;

  std::span<const double> orders() const { return orders_; }
  // The RDP spent so far at each of orders(), in the same order; what a checkpoint saves.
  std::span<const double> rdp() const { return rdp_; }

  // Replaces the spent RDP with `rdp`, a vector saved from rdp() of an accountant with the
  // same orders (only its length can be checked). InvalidArgument when its length differs
  // from orders() or an entry is negative or NaN (+inf is allowed: a no-noise step).
  Status RestoreRdp(std::vector<double> rdp);

 private:
  explicit RdpAccountant(std::vector<double> orders)
      : orders_(std::move(orders)), rdp_(orders_.size(), 0.0) {}

  std::vector<double> orders_;
  std::vector<double> rdp_;  // one entry per order; each >= 0, possibly +inf
};

}  // namespace fedmesh
