// Shamir secret sharing, t-of-k over GF(2^8): a secret of any length is shared byte by
// byte, each byte as the constant term of its own random polynomial of degree t-1, and
// share i is every polynomial evaluated at x = i + 1. Any t shares give the secret back
// (Lagrange interpolation at 0); t-1 shares are consistent with every secret, so they say
// nothing about it. Secure aggregation shares 32-byte seeds and keys this way so that the
// server can rebuild a dropped client's secrets from its neighbours.
// The field is GF(2^8) with the AES polynomial x^8 + x^4 + x^3 + x + 1 (0x11b). The
// multiply is branch-free and table-free (no log/exp tables indexed by secret bytes, whose
// cache footprint would leak them), so timing does not depend on secret values.
// Thread-safety: pure functions; ShamirShares is an immutable value, safe to read from
// any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"
#include "crypto/secagg/secure_random.h"
#include "crypto/secure_buffer.h"

namespace fedmesh {

// x-coordinates are 1..255 (0 is where the secret sits), so at most 255 shares.
inline constexpr uint32_t kMaxShamirShares = 255;

// One share as seen by a combiner: its x-coordinate and one y byte per secret byte.
// A view: the bytes belong to whoever holds the share.
struct ShamirShare {
  uint8_t x = 0;
  std::span<const uint8_t> y;
};

// The k shares of one secret, in one secure buffer. Share i has x = i + 1.
class ShamirShares {
 public:
  ShamirShares() = default;
  size_t size() const { return count_; }
  size_t secret_size() const { return secret_size_; }
  // REQUIRES: i < size().
  ShamirShare operator[](size_t i) const {
    return {static_cast<uint8_t>(i + 1), ys_.span().subspan(i * secret_size_, secret_size_)};
  }

 private:
  friend Result<ShamirShares> ShamirSplit(std::span<const uint8_t>, uint32_t, uint32_t,
                                          SecureRandom&);
  ShamirShares(SecureBuffer ys, size_t count, size_t secret_size)
      : ys_(std::move(ys)), count_(count), secret_size_(secret_size) {}

  SecureBuffer ys_;  // count_ * secret_size_ bytes, share after share
  size_t count_ = 0;
  size_t secret_size_ = 0;
};

// Splits `secret` into `num_shares` shares, any `threshold` of which rebuild it.
// Randomness: exactly one rng.Fill of (threshold - 1) * secret.size() bytes; byte
// (j - 1) * secret.size() + i is the coefficient of x^j in the polynomial of secret byte i
// (known-answer tests rely on this order). InvalidArgument unless
// 1 <= threshold <= num_shares <= 255 and the secret is non-empty.
Result<ShamirShares> ShamirSplit(std::span<const uint8_t> secret, uint32_t threshold,
                                 uint32_t num_shares, SecureRandom& rng);

// Rebuilds a secret from shares of a `threshold`-of-k split. Uses the first `threshold`
// shares; all of them are checked first. FailedPrecondition with fewer than `threshold`
// shares; InvalidArgument for threshold 0, an x of 0, two shares with the same x, or y
// lengths that differ or are empty. The caller must know the threshold: any t' < t shares
// interpolate to *some* value, just not the secret, and nothing in the shares says so.
Result<SecureBuffer> ShamirCombine(std::span<const ShamirShare> shares, uint32_t threshold);

// GF(2^8) arithmetic, exposed for tests of the field itself. Constant time.
uint8_t Gf256Mul(uint8_t a, uint8_t b);
// The multiplicative inverse (a^254); 0 maps to 0.
uint8_t Gf256Inverse(uint8_t a);

}  // namespace fedmesh
