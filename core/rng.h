// Rng: a seeded pseudo-random generator (xoshiro256**, seeded by splitmix64) with the
// distributions fedmesh needs. The distributions are implemented here, not taken from
// <random>, so a seed gives the same numbers with every standard library and compiler:
// partitions, initial weights and simulations are reproducible across machines.
// Not cryptographic: secure aggregation and key material use libsodium, never this.
// Thread-safety: an Rng is not thread-safe; give each thread its own (see Split()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace fedmesh {

// One step of splitmix64; also a good 64-bit mixer for counter-based randomness.
FM_HD inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform float in [0, 1) from a counter: the same (seed, index) gives the same number on
// any backend or thread, which keeps dropout masks identical on CPU and GPU.
FM_HD inline float CounterUniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(SplitMix64(seed ^ SplitMix64(index)) >> 40) * 0x1.0p-24f;
}

class Rng {
 public:
  explicit Rng(uint64_t seed = 0);

  uint64_t NextU64();
  // Uniform in [0, 1) with 53 random bits.
  double Uniform();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n). REQUIRES: n > 0. Unbiased (Lemire's method).
  uint64_t UniformInt(uint64_t n);
  // Standard normal (Marsaglia polar method).
  double Normal();
  double Normal(double mean, double stddev) { return mean + stddev * Normal(); }
  // exp(Normal(mu, sigma)).
  double LogNormal(double mu, double sigma);
  // Gamma(shape, 1) by Marsaglia-Tsang; shape < 1 uses the boost U^(1/shape).
  // REQUIRES: shape > 0.
  double Gamma(double shape);
  // A Dirichlet(alpha, ..., alpha) draw of dimension k; sums to 1.
  std::vector<double> Dirichlet(double alpha, size_t k);

  // Fisher-Yates shuffle.
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      size_t j = UniformInt(i);
      std::swap(v[i - 1], v[j]);
    }
  }

  // An independent generator derived from this one's stream (for worker threads).
  Rng Split() { return Rng(NextU64()); }

 private:
  uint64_t s_[4];
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

}  // namespace fedmesh
