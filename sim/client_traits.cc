#include "sim/client_traits.h"

#include <cmath>

#include "core/rng.h"

namespace fedmesh {

ClientTraits TraitsOf(const SimOptions& o, uint64_t client) {
  Rng rng(SplitMix64(o.seed ^ 0x7472616974730000ull) ^ SplitMix64(client));
  ClientTraits t;
  // Log-normal around the median: exp(N(log median, sigma)).
  auto around = [&rng](double median, double sigma) {
    return sigma > 0 ? median * std::exp(sigma * rng.Normal()) : median;
  };
  t.samples_per_s = around(o.compute_speed, o.compute_sigma);
  t.straggler = rng.Uniform() < o.stragglers;
  if (t.straggler) t.samples_per_s /= o.straggler_slowdown;
  t.byzantine = rng.Uniform() < o.byzantine;
  t.link.up_bytes_per_s = around(o.up_mbps, o.bandwidth_sigma) * 1e6 / 8;
  t.link.down_bytes_per_s = around(o.down_mbps, o.bandwidth_sigma) * 1e6 / 8;
  t.link.latency_s = around(o.latency_ms, o.latency_ms > 0 ? 0.5 : 0.0) / 1000.0;
  t.phase = static_cast<uint32_t>(rng.UniformInt(o.availability_period));
  return t;
}

bool IsAvailable(const SimOptions& o, const ClientTraits& t, uint64_t round) {
  if (o.availability >= 1.0) return true;
  const uint64_t period = o.availability_period;
  const uint64_t online = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::llround(o.availability * static_cast<double>(period))));
  return (round + t.phase) % period < online;
}

double ClientCoin(uint64_t seed, uint64_t client, uint64_t round, uint64_t salt) {
  const uint64_t h = SplitMix64(SplitMix64(seed ^ salt) ^ SplitMix64(client) ^
                                SplitMix64(round * 0x9E3779B97F4A7C15ull));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

bool DropsOut(const SimOptions& o, uint64_t client, uint64_t round) {
  constexpr uint64_t kDropoutSalt = 0x64726f706f7574ull;
  return o.dropout > 0 && ClientCoin(o.seed, client, round, kDropoutSalt) < o.dropout;
}

}  // namespace fedmesh
