// Fixed-point encoding of model updates into Z_2^32, the group secure aggregation sums in.
// A client L2-clips its update to norm C (so every coordinate satisfies |x_i| <= C), then
// maps x_i to round(x_i * S) with S = (2^(B-1) - 1) / C, an int32 stored as uint32 two's
// complement. Masks cancel in Z_2^32, so the server gets the exact sum of the encodings as
// long as that sum never wraps: with n clients |sum| <= n * (2^(B-1) - 1), which must stay
// below 2^31. Validate() refuses settings where it could wrap for the stated maximum
// number of clients. Decoding reads the sum as int32 and divides by S.
// Clipping is part of the encoding (not just a safety net) because without a norm bound no
// finite B avoids overflow, and because it is what distributed DP noise is calibrated to.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "crypto/dp/gaussian_noise.h"

namespace fedmesh {

// Noise added by AddEncodedNoise is cut at this many standard deviations (a draw beyond it
// has probability below 1e-15), so that a sum's magnitude stays bounded.
inline constexpr double kNoiseTail = 8.0;

struct FixedPointOptions {
  // L2 bound C on each client's update. Default 1.0. Must be finite and > 0.
  double clip = 1.0;
  // Quantisation bits per coordinate, sign included: |encoding| <= 2^(bits-1) - 1.
  // Default 16. Must be in [2, 32].
  uint32_t bits = 16;
  // The most clients whose encodings may be summed. Default 1000. Must be >= 1 and
  // satisfy max_clients * (2^(bits-1) - 1) < 2^31.
  uint64_t max_clients = 1000;
  // Distributed DP: the standard deviation of the Gaussian noise a client adds to its
  // encoding (in update units; AddEncodedNoise). The noise is rounded and cut at
  // kNoiseTail standard deviations, and the overflow bound leaves room for it. Finite,
  // >= 0. Default 0: none.
  double noise_stddev = 0.0;

  // OK when the settings are usable; InvalidArgument saying which bound fails and what
  // would fit otherwise.
  Status Validate() const;
  // S = (2^(bits-1) - 1) / clip.
  double scale() const;
};

// The clipped, quantised encoding of `update`. InvalidArgument for a non-finite value.
// REQUIRES: options.Validate() is OK.
Result<std::vector<uint32_t>> EncodeFixedPoint(std::span<const float> update,
                                               const FixedPointOptions& options);

// Adds to each word of `encoded` an integer N(0, (noise_stddev * scale)^2) draw, rounded
// and cut at +-kNoiseTail standard deviations, mod 2^32. `noise` must be keyed from a
// secret the server does not know. REQUIRES: options.Validate() is OK.
void AddEncodedNoise(std::span<uint32_t> encoded, const FixedPointOptions& options,
                     GaussianNoise& noise);

// The float value of a sum of encodings: int32(sum_i) / S for each coordinate. To get the
// mean update, divide by the number of clients summed.
std::vector<float> DecodeFixedPointSum(std::span<const uint32_t> sum,
                                       const FixedPointOptions& options);

}  // namespace fedmesh
