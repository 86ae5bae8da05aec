#include "crypto/dp/rdp_accountant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <string>

namespace fedmesh {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// dp-accounting's _MAX_STEPS_LOG_A_FRAC: the fractional-order series gives up (and the
// order gets +inf) after this many terms.
constexpr int kMaxFracTerms = 1000;

// Numbers in error messages: %g keeps 1e-05 readable and prints nan and inf as such;
// ten digits still tell 1.0000001 from 1.
std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", x);
  return buf;
}

// log(exp(a) + exp(b)) without overflow; -inf stands for log(0).
double LogAdd(double a, double b) {
  const double lo = std::min(a, b);
  const double hi = std::max(a, b);
  if (lo == -kInf) return hi;
  return std::log1p(std::exp(lo - hi)) + hi;
}

// log(erfc(x)), accurate where erfc(x) itself underflows (x past ~26.5), which the
// fractional series reaches whenever sigma is small or the term index is far from z0.
double LogErfc(double x) {
  if (x < 20) return std::log(std::erfc(x));
  // Asymptotic expansion erfc(x) = exp(-x^2) / (x sqrt(pi)) * sum_n (-1)^n (2n-1)!! /
  // (2x^2)^n. At x >= 20 the tenth term is below 1e-20, far under a double's precision.
  const double inv = 1.0 / (2.0 * x * x);
  double term = 1.0;
  double sum = 1.0;
  for (int n = 1; n <= 10; ++n) {
    term *= -(2.0 * n - 1.0) * inv;
    sum += term;
  }
  return -x * x - std::log(x) - 0.5 * std::log(std::numbers::pi) + std::log(sum);
}

// log|Gamma(x)|, as scipy.special.gammaln. lgamma_r rather than std::lgamma because the
// latter writes the global `signgam`, a data race between threads using accountants.
double LogAbsGamma(double x) {
#if defined(__GLIBC__) || defined(__APPLE__)
  int sign = 0;
  return ::lgamma_r(x, &sign);
#else
  return std::lgamma(x);
#endif
}

// log|C(n, k)| for real n, the generalised binomial coefficient (dp-accounting's
// _log_comb). For fractional n and k > n + 1 the coefficient's sign alternates; like
// dp-accounting we add the magnitudes, which can only over-estimate A_alpha, so the RDP
// stays a valid upper bound.
double LogBinom(double n, double k) {
  return LogAbsGamma(n + 1) - LogAbsGamma(k + 1) - LogAbsGamma(n - k + 1);
}

// log(A_alpha) for integer alpha and 0 < q < 1 (dp-accounting's _compute_log_a_int): the
// closed form A_alpha = sum_{i=0}^{alpha} C(alpha, i) q^i (1-q)^(alpha-i)
// exp((i^2 - i) / (2 sigma^2)), summed in log space because the terms overflow a double.
double LogAInt(double q, double sigma, int64_t alpha) {
  const double log_q = std::log(q);
  const double log1mq = std::log1p(-q);
  const double two_sigma2 = 2 * (sigma * sigma);
  const double a = static_cast<double>(alpha);
  double log_a = -kInf;
  for (int64_t k = 0; k <= alpha; ++k) {
    const double i = static_cast<double>(k);
    const double log_coef = LogBinom(a, i) + i * log_q + (a - i) * log1mq;
    log_a = LogAdd(log_a, log_coef + (i * i - i) / two_sigma2);
  }
  return log_a;
}

// log(A_alpha) for fractional alpha and 0 < q < 1 (dp-accounting's _compute_log_a_frac;
// Section 3.3 of Mironov, Talwar, Zhang 2019): A_alpha splits into integrals over
// (-inf, z0] and [z0, inf), each a series in i whose terms carry an erfc tail. Returns
// +inf when the series has not converged within kMaxFracTerms terms.
double LogAFrac(double q, double sigma, double alpha) {
  const double log_q = std::log(q);
  const double log1mq = std::log1p(-q);
  const double sigma2 = sigma * sigma;
  const double z0 = sigma2 * std::log(1 / q - 1) + 0.5;
  const double sqrt2_sigma = std::sqrt(2.0) * sigma;
  const double log_half = std::log(0.5);
  double log_a0 = -kInf;
  double log_a1 = -kInf;
  double last_s0 = -kInf;
  double last_s1 = -kInf;
  for (int k = 0; k < kMaxFracTerms; ++k) {
    const double i = k;
    const double j = alpha - i;
    const double log_coef = LogBinom(alpha, i);
    const double log_t0 = log_coef + i * log_q + j * log1mq;
    const double log_t1 = log_coef + j * log_q + i * log1mq;
    const double log_e0 = log_half + LogErfc((i - z0) / sqrt2_sigma);
    const double log_e1 = log_half + LogErfc((z0 - j) / sqrt2_sigma);
    const double log_s0 = log_t0 + (i * i - i) / (2 * sigma2) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2 * sigma2) + log_e1;
    log_a0 = LogAdd(log_a0, log_s0);
    log_a1 = LogAdd(log_a1, log_s1);
    const double total = LogAdd(log_a0, log_a1);
    // Stop once both tails are shrinking and each new term is below e^-30 of the total.
    if (log_s0 < last_s0 && log_s1 < last_s1 && std::max(log_s0, log_s1) < total - 30) {
      return total;
    }
    last_s0 = log_s0;
    last_s1 = log_s1;
  }
  return kInf;
}

double RdpAtOrder(double q, double sigma, double alpha) {
  if (q == 0) return 0;
  if (sigma == 0) return kInf;
  if (q == 1) return alpha / (2 * (sigma * sigma));
  const double log_a = std::floor(alpha) == alpha ? LogAInt(q, sigma, static_cast<int64_t>(alpha))
                                                  : LogAFrac(q, sigma, alpha);
  return log_a / (alpha - 1);
}

Status ValidateMechanism(double q, double noise_multiplier) {
  if (!(q >= 0 && q <= 1)) {
    return Status::InvalidArgument(
        "sampling probability q must be in [0, 1] (the chance each record joins a batch); got " +
        Num(q));
  }
  if (!(noise_multiplier >= 0) || std::isinf(noise_multiplier)) {
    return Status::InvalidArgument(
        "noise_multiplier must be a finite number >= 0 (noise stddev over clip norm); got " +
        Num(noise_multiplier));
  }
  return Status::OK();
}

Status ValidateOrders(std::span<const double> orders) {
  if (orders.empty()) {
    return Status::InvalidArgument(
        "RDP orders are empty; leave RdpAccountantOptions.orders at DefaultRdpOrders() or "
        "list Renyi orders > 1");
  }
  for (size_t i = 0; i < orders.size(); ++i) {
    const double a = orders[i];
    if (!(a > 1 && a <= kMaxRdpOrder)) {
      return Status::InvalidArgument(
          "RDP orders[" + std::to_string(i) + "] is " + Num(a) +
          "; every Renyi order must be finite, > 1 and <= " + Num(kMaxRdpOrder));
    }
  }
  return Status::OK();
}

Status ValidateDelta(double delta) {
  if (!(delta > 0 && delta < 1)) {
    return Status::InvalidArgument(
        "delta must be in (0, 1), typically below 1 / dataset size; got " + Num(delta));
  }
  return Status::OK();
}

// Per-order RDP of one step, after validation.
std::vector<double> RdpOfOneStep(double q, double noise_multiplier,
                                 std::span<const double> orders) {
  std::vector<double> out(orders.size());
  for (size_t i = 0; i < orders.size(); ++i) out[i] = RdpAtOrder(q, noise_multiplier, orders[i]);
  return out;
}

void AddSteps(std::vector<double>& total, const std::vector<double>& one, uint64_t steps) {
  if (steps == 0) return;  // 0 * inf would be NaN for a no-noise step
  const double n = static_cast<double>(steps);
  for (size_t i = 0; i < total.size(); ++i) total[i] += n * one[i];
}

// dp-accounting's compute_epsilon: the improved RDP-to-DP conversion (Balle et al. 2020,
// Proposition 12 of arXiv:2004.00010; Canonne, Kamath, Steinke 2020, eq. 20)
//   eps(alpha) = rdp + log1p(-1/alpha) - log(delta * alpha) / (alpha - 1),
// minimised over the orders and clamped at 0.
PrivacySpent EpsilonFromRdp(std::span<const double> orders, std::span<const double> rdp,
                            double delta) {
  size_t best = 0;
  double best_eps = kInf;
  for (size_t i = 0; i < orders.size(); ++i) {
    const double a = orders[i];
    const double r = rdp[i];
    double eps;
    if (r < 0) {
      eps = 0;  // only rounding makes RDP negative; dp-accounting reads it as 0 too
    } else if (delta * delta + std::expm1(-r) > 0) {
      // The KL bound delta <= sqrt(1 - exp(-rdp)) already gives epsilon 0.
      eps = 0;
    } else if (a > 1.01) {
      eps = r + std::log1p(-1 / a) - std::log(delta * a) / (a - 1);
    } else {
      eps = kInf;  // the bound is numerically unstable as alpha -> 1
    }
    if (i == 0 || eps < best_eps) {  // the first minimum, as numpy.argmin
      best = i;
      best_eps = eps;
    }
  }
  return PrivacySpent{std::max(0.0, best_eps), orders[best]};
}

}  // namespace

std::vector<double> DefaultRdpOrders() {
  std::vector<double> orders;
  orders.reserve(156);
  for (int x = 1; x < 100; ++x) orders.push_back(1 + x / 10.0);
  for (int a = 11; a < 64; ++a) orders.push_back(a);
  for (double a : {128.0, 256.0, 512.0, 1024.0}) orders.push_back(a);
  return orders;
}

Result<std::vector<double>> SampledGaussianRdp(double q, double noise_multiplier,
                                               std::span<const double> orders) {
  FM_RETURN_IF_ERROR(ValidateMechanism(q, noise_multiplier));
  FM_RETURN_IF_ERROR(ValidateOrders(orders));
  return RdpOfOneStep(q, noise_multiplier, orders);
}

Result<RdpAccountant> RdpAccountant::Create(RdpAccountantOptions options) {
  FM_RETURN_IF_ERROR(ValidateOrders(options.orders));
  return RdpAccountant(std::move(options.orders));
}

Status RdpAccountant::Compose(double q, double noise_multiplier, uint64_t steps) {
  FM_RETURN_IF_ERROR(ValidateMechanism(q, noise_multiplier));
  AddSteps(rdp_, RdpOfOneStep(q, noise_multiplier, orders_), steps);
  return Status::OK();
}

Result<PrivacySpent> RdpAccountant::Epsilon(double delta) const {
  FM_RETURN_IF_ERROR(ValidateDelta(delta));
  return EpsilonFromRdp(orders_, rdp_, delta);
}

Result<PrivacySpent> RdpAccountant::EpsilonIfComposed(double q, double noise_multiplier,
                                                      uint64_t steps, double delta) const {
  FM_RETURN_IF_ERROR(ValidateMechanism(q, noise_multiplier));
  FM_RETURN_IF_ERROR(ValidateDelta(delta));
  std::vector<double> rdp = rdp_;
  AddSteps(rdp, RdpOfOneStep(q, noise_multiplier, orders_), steps);
  return EpsilonFromRdp(orders_, rdp, delta);
}

Status RdpAccountant::RestoreRdp(std::vector<double> rdp) {
  if (rdp.size() != orders_.size()) {
    return Status::InvalidArgument(
        "restored rdp has " + std::to_string(rdp.size()) + " entries but the accountant tracks " +
        std::to_string(orders_.size()) +
        " orders; restore a vector saved from rdp() of an accountant with the same orders");
  }
  for (size_t i = 0; i < rdp.size(); ++i) {
    if (!(rdp[i] >= 0)) {
      return Status::InvalidArgument("restored rdp[" + std::to_string(i) + "] is " + Num(rdp[i]) +
                                     "; RDP values must be >= 0 (+inf is allowed); the "
                                     "checkpoint is corrupt");
    }
  }
  rdp_ = std::move(rdp);
  return Status::OK();
}

}  // namespace fedmesh
