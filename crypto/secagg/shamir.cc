#include "crypto/secagg/shamir.h"

#include <string>
#include <utility>

namespace fedmesh {

uint8_t Gf256Mul(uint8_t a, uint8_t b) {
  // Shift-and-add with masks instead of branches: the instruction sequence is the same
  // for every (a, b), so neither timing nor branch prediction depends on secret bytes.
  uint8_t product = 0;
  for (int bit = 0; bit < 8; ++bit) {
    product ^= static_cast<uint8_t>(-(b & 1)) & a;
    b >>= 1;
    const uint8_t carry = static_cast<uint8_t>(-(a >> 7));
    a = static_cast<uint8_t>((a << 1) ^ (carry & 0x1b));
  }
  return product;
}

uint8_t Gf256Inverse(uint8_t a) {
  // a^254 = a^-1 in GF(2^8)* by a fixed addition chain; the exponent is public, so the
  // sequence of multiplies is the same for every a.
  uint8_t result = 1;
  uint8_t power = a;                   // a^(2^i)
  for (int bit = 1; bit < 8; ++bit) {  // 254 = 0b11111110
    power = Gf256Mul(power, power);
    result = Gf256Mul(result, power);
  }
  return result;
}

Result<ShamirShares> ShamirSplit(std::span<const uint8_t> secret, uint32_t threshold,
                                 uint32_t num_shares, SecureRandom& rng) {
  if (secret.empty()) return Status::InvalidArgument("cannot share an empty secret");
  if (threshold < 1 || threshold > num_shares || num_shares > kMaxShamirShares) {
    return Status::InvalidArgument(
        "a Shamir split needs 1 <= threshold <= shares <= " + std::to_string(kMaxShamirShares) +
        "; got threshold " + std::to_string(threshold) + " of " + std::to_string(num_shares));
  }
  const size_t len = secret.size();
  FM_ASSIGN_OR_RETURN(SecureBuffer coefficients, SecureBuffer::Create((threshold - 1) * len));
  rng.Fill(coefficients.span());
  FM_ASSIGN_OR_RETURN(SecureBuffer ys, SecureBuffer::Create(num_shares * len));
  for (uint32_t i = 0; i < num_shares; ++i) {
    const uint8_t x = static_cast<uint8_t>(i + 1);
    uint8_t* y = ys.data() + i * len;
    for (size_t b = 0; b < len; ++b) {
      // Horner from the highest coefficient down to the secret byte.
      uint8_t acc = 0;
      for (uint32_t j = threshold - 1; j >= 1; --j) {
        acc = Gf256Mul(acc, x) ^ coefficients.data()[(j - 1) * len + b];
      }
      y[b] = Gf256Mul(acc, x) ^ secret[b];
    }
  }
  return ShamirShares(std::move(ys), num_shares, len);
}

Result<SecureBuffer> ShamirCombine(std::span<const ShamirShare> shares, uint32_t threshold) {
  if (threshold == 0) return Status::InvalidArgument("a Shamir threshold must be at least 1");
  if (shares.size() < threshold) {
    return Status::FailedPrecondition("a " + std::to_string(threshold) + "-of-k secret needs " +
                                      std::to_string(threshold) + " shares to rebuild; got " +
                                      std::to_string(shares.size()));
  }
  const size_t len = shares[0].y.size();
  bool seen[256] = {};
  for (const ShamirShare& share : shares) {
    if (share.x == 0) {
      return Status::InvalidArgument("a Shamir share has x = 0, where the secret itself sits");
    }
    if (seen[share.x]) {
      return Status::InvalidArgument("two Shamir shares have the same x = " +
                                     std::to_string(share.x));
    }
    seen[share.x] = true;
    if (share.y.empty() || share.y.size() != len) {
      return Status::InvalidArgument("Shamir shares have different lengths (" +
                                     std::to_string(len) + " and " +
                                     std::to_string(share.y.size()) + " bytes) or are empty");
    }
  }
  // Lagrange basis at 0: l_i(0) = prod_{j != i} x_j / (x_j - x_i); subtraction is XOR.
  const std::span<const ShamirShare> used = shares.first(threshold);
  FM_ASSIGN_OR_RETURN(SecureBuffer secret, SecureBuffer::Create(len));
  for (size_t i = 0; i < used.size(); ++i) {
    uint8_t numerator = 1;
    uint8_t denominator = 1;
    for (size_t j = 0; j < used.size(); ++j) {
      if (j == i) continue;
      numerator = Gf256Mul(numerator, used[j].x);
      denominator = Gf256Mul(denominator, used[j].x ^ used[i].x);
    }
    const uint8_t basis = Gf256Mul(numerator, Gf256Inverse(denominator));
    for (size_t b = 0; b < len; ++b) secret.data()[b] ^= Gf256Mul(basis, used[i].y[b]);
  }
  return secret;
}

}  // namespace fedmesh
