// GaussianNoise: the randomness of differential privacy, N(0, sigma^2) samples drawn from a
// ChaCha20 keystream. The key comes from the OS CSPRNG (libsodium) unless a seed is given:
// noise an observer could predict (a generator seeded from a config value, or Env's
// xoshiro) could be subtracted again and would protect nothing. A seeded stream is for
// simulations and tests, where reproducible runs matter more than secrecy.
// Samples are Box-Muller pairs of 53-bit uniforms. Known limit: this is floating-point
// Gaussian noise, not a discrete Gaussian; the textbook guarantee holds for real-valued
// noise, and floating-point artefacts (Mironov 2012) are not defended against here.
// Thread-safety: one thread at a time (the stream position is state); Add itself splits a
// long vector over OpenMP threads (the stream is random-access by block counter), with the
// same result for any thread count.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"

namespace fedmesh {

class GaussianNoise {
 public:
  // nullopt: a fresh key from the OS CSPRNG; a seed: the key is BLAKE2b of it (reproducible).
  // Internal when libsodium cannot start.
  static Result<GaussianNoise> Create(std::optional<uint64_t> seed = std::nullopt);
  // A stream under `key` (32 secret bytes the caller drew from a CSPRNG).
  static Result<GaussianNoise> FromKey(std::span<const uint8_t, 32> key);
  ~GaussianNoise();
  GaussianNoise(const GaussianNoise&) = default;
  GaussianNoise& operator=(const GaussianNoise&) = default;

  // One N(0, 1) sample.
  double Standard();
  // Adds N(0, stddev^2) to each element of `x` (stddev 0: unchanged). The same stream
  // words as calling Standard() per element; whole pairs go through the vectorised
  // Box-Muller (crypto/dp/box_muller.h), so values may differ from Standard()'s in the last
  // few ulp. Vectors of at least kParallelPairs pairs are split over the OpenMP threads in
  // fixed chunks, so the values do not depend on the thread count.
  void Add(std::span<float> x, double stddev);
  static constexpr size_t kParallelPairs = 16384;

 private:
  explicit GaussianNoise(const std::array<uint8_t, 32>& key) : key_(key) {}
  uint64_t NextU64();
  // Adds stddev * N(0,1) pairs made from stream words first_word .. + 2 * pairs to x[0 ..
  // 2 * pairs), one chunk of pairs after the other; reads no member but the key.
  void AddPairs(float* x, size_t pairs, uint64_t first_word, double stddev) const;

  std::array<uint8_t, 32> key_;
  // Keystream is made 64 blocks (4 KiB) per libsodium call: one call per 8 words cost more
  // than the Box-Muller arithmetic (DP-SGD noises a whole model every step). The words
  // come out in the same order either way.
  static constexpr size_t kWords = 512;
  uint64_t word_ = 0;                   // index in the stream of the next unused 64-bit word
  uint64_t buf_first_ = 0;              // stream index of buf_[0]
  size_t buf_valid_ = 0;                // words of buf_ that hold the stream (0: none yet)
  std::array<uint64_t, kWords> buf_{};
  std::optional<double> spare_;     // the second value of the last Box-Muller pair
};

}  // namespace fedmesh
