// SecureRandom: where secure aggregation draws every secret (X25519 keys, self-mask seeds,
// Shamir coefficients, AEAD nonces). It is a separate interface from Env's Rng because
// that one is fast and reproducible but predictable; a secret drawn from it would be
// recoverable from its seed. Production code uses SodiumRandom (the OS CSPRNG through
// randombytes_buf); tests use DeterministicRandom, a ChaCha20 stream from a 32-byte seed,
// so that a whole protocol run replays byte for byte.
// Thread-safety: SodiumRandom::Fill may be called from any thread; DeterministicRandom
// holds a counter and needs external synchronisation, like any generator with state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace fedmesh {

class SecureRandom {
 public:
  virtual ~SecureRandom() = default;
  // Overwrites `out` with random bytes. Never fails: if libsodium cannot start, the
  // process aborts rather than hand out bytes that only look random.
  virtual void Fill(std::span<uint8_t> out) = 0;
};

// The operating system's CSPRNG (getrandom / /dev/urandom via libsodium).
class SodiumRandom final : public SecureRandom {
 public:
  void Fill(std::span<uint8_t> out) override;
};

// A reproducible stream for tests and simulations: call i (counting from 0) returns the
// ChaCha20-IETF keystream under the seed with nonce = i (64-bit little-endian, then four
// zero bytes) from block 0. The seed is the whole secret: anyone who knows it knows every
// key this generator produced, so it is for tests and simulations, never for a real site.
class DeterministicRandom final : public SecureRandom {
 public:
  static constexpr size_t kSeedSize = 32;
  explicit DeterministicRandom(std::span<const uint8_t, kSeedSize> seed);
  // Convenience for tests: the seed is `seed` as 8 little-endian bytes, then zeros.
  explicit DeterministicRandom(uint64_t seed);
  ~DeterministicRandom() override;
  DeterministicRandom(const DeterministicRandom&) = delete;
  DeterministicRandom& operator=(const DeterministicRandom&) = delete;

  void Fill(std::span<uint8_t> out) override;

 private:
  std::array<uint8_t, kSeedSize> key_;
  uint64_t calls_ = 0;
};

}  // namespace fedmesh
