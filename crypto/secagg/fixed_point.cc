#include "crypto/secagg/fixed_point.h"

#include <cmath>
#include <string>

namespace fedmesh {
namespace {

uint64_t MaxMagnitude(uint32_t bits) { return (uint64_t{1} << (bits - 1)) - 1; }

}  // namespace

Status FixedPointOptions::Validate() const {
  if (!std::isfinite(clip) || clip <= 0) {
    return Status::InvalidArgument(
        "secure aggregation clip (L2 bound) must be finite and > 0; got " + std::to_string(clip));
  }
  if (bits < 2 || bits > 32) {
    return Status::InvalidArgument("secure aggregation bits must be in [2, 32]; got " +
                                   std::to_string(bits));
  }
  if (max_clients < 1) {
    return Status::InvalidArgument("secure aggregation max_clients must be at least 1");
  }
  // n * (2^(B-1) - 1) < 2^31, i.e. n <= (2^31 - 1) / (2^(B-1) - 1), in integers so that
  // the check itself cannot overflow.
  constexpr uint64_t kLimit = (uint64_t{1} << 31) - 1;
  if (max_clients > kLimit / MaxMagnitude(bits)) {
    uint32_t fitting_bits = 0;
    for (uint32_t b = 2; b <= 32; ++b) {
      if (max_clients <= kLimit / MaxMagnitude(b)) fitting_bits = b;
    }
    const std::string advice =
        fitting_bits >= 2 ? "use bits <= " + std::to_string(fitting_bits) + " or " : std::string();
    return Status::InvalidArgument(
        "a sum of " + std::to_string(max_clients) + " updates at " + std::to_string(bits) +
        " bits could exceed 2^31 - 1 and wrap around in Z_2^32: " + advice +
        "lower max_clients to " + std::to_string(kLimit / MaxMagnitude(bits)));
  }
  if (!std::isfinite(noise_stddev) || noise_stddev < 0) {
    return Status::InvalidArgument("secure aggregation noise_stddev must be finite and >= 0; got " +
                                   std::to_string(noise_stddev));
  }
  if (noise_stddev > 0) {
    const double per_client = static_cast<double>(MaxMagnitude(bits)) +
                              std::ceil(kNoiseTail * noise_stddev * scale());
    if (static_cast<double>(max_clients) * per_client > static_cast<double>(kLimit)) {
      return Status::InvalidArgument(
          "a sum of " + std::to_string(max_clients) + " noised updates at " +
          std::to_string(bits) + " bits (noise_stddev " + std::to_string(noise_stddev) +
          " = clip x " + std::to_string(noise_stddev / clip) +
          ") could exceed 2^31 - 1: use fewer bits or less noise");
    }
  }
  return Status::OK();
}

double FixedPointOptions::scale() const { return static_cast<double>(MaxMagnitude(bits)) / clip; }

Result<std::vector<uint32_t>> EncodeFixedPoint(std::span<const float> update,
                                               const FixedPointOptions& options) {
  double norm_sq = 0;
  for (size_t i = 0; i < update.size(); ++i) {
    if (!std::isfinite(update[i])) {
      return Status::InvalidArgument("update coordinate " + std::to_string(i) +
                                     " is not finite; it cannot be encoded for secure "
                                     "aggregation");
    }
    norm_sq += static_cast<double>(update[i]) * update[i];
  }
  const double norm = std::sqrt(norm_sq);
  const double clip_factor = norm > options.clip ? options.clip / norm : 1.0;
  const double scale = options.scale();
  const double bound = static_cast<double>(MaxMagnitude(options.bits));
  std::vector<uint32_t> out(update.size());
  for (size_t i = 0; i < update.size(); ++i) {
    // The clamp only catches the last ulp of rounding in the clip: mathematically
    // |x_i * clip_factor| <= C already.
    double q = std::round(static_cast<double>(update[i]) * clip_factor * scale);
    q = std::fmin(std::fmax(q, -bound), bound);
    out[i] = static_cast<uint32_t>(static_cast<int32_t>(q));
  }
  return out;
}

void AddEncodedNoise(std::span<uint32_t> encoded, const FixedPointOptions& options,
                     GaussianNoise& noise) {
  const double sigma = options.noise_stddev * options.scale();
  if (sigma <= 0) return;
  const double cut = kNoiseTail * sigma;
  for (uint32_t& w : encoded) {
    const double z = std::fmin(std::fmax(sigma * noise.Standard(), -cut), cut);
    w += static_cast<uint32_t>(static_cast<int32_t>(std::llround(z)));
  }
}

std::vector<float> DecodeFixedPointSum(std::span<const uint32_t> sum,
                                       const FixedPointOptions& options) {
  const double scale = options.scale();
  std::vector<float> out(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    out[i] = static_cast<float>(static_cast<double>(static_cast<int32_t>(sum[i])) / scale);
  }
  return out;
}

}  // namespace fedmesh
