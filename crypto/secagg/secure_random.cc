#include "crypto/secagg/secure_random.h"

#include <sodium.h>

#include <algorithm>

#include "core/check.h"
#include "crypto/sodium.h"

namespace fedmesh {

void SodiumRandom::Fill(std::span<uint8_t> out) {
  // Every secagg factory checks InitSodium() and returns its Status; reaching this check
  // with libsodium down is a caller that skipped them, and random-looking zeros would be
  // the worst possible answer.
  FM_CHECK(InitSodium().ok());
  if (!out.empty()) randombytes_buf(out.data(), out.size());
}

DeterministicRandom::DeterministicRandom(std::span<const uint8_t, kSeedSize> seed) {
  std::copy(seed.begin(), seed.end(), key_.begin());
}

DeterministicRandom::DeterministicRandom(uint64_t seed) : key_{} {
  for (size_t i = 0; i < 8; ++i) key_[i] = static_cast<uint8_t>(seed >> (8 * i));
}

DeterministicRandom::~DeterministicRandom() { sodium_memzero(key_.data(), key_.size()); }

void DeterministicRandom::Fill(std::span<uint8_t> out) {
  FM_CHECK(InitSodium().ok());
  // A fresh nonce per call (rather than one long stream) keeps each call's output
  // independent of how many bytes earlier calls asked for.
  std::array<uint8_t, crypto_stream_chacha20_ietf_NONCEBYTES> nonce{};
  for (size_t i = 0; i < 8; ++i) nonce[i] = static_cast<uint8_t>(calls_ >> (8 * i));
  ++calls_;
  if (!out.empty()) {
    crypto_stream_chacha20_ietf(out.data(), out.size(), nonce.data(), key_.data());
  }
}

}  // namespace fedmesh
