#include "crypto/dp/gaussian_noise.h"

#include <sodium.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "crypto/dp/box_muller.h"
#include "crypto/sodium.h"

namespace fedmesh {

Result<GaussianNoise> GaussianNoise::Create(std::optional<uint64_t> seed) {
  FM_RETURN_IF_ERROR(InitSodium());
  std::array<uint8_t, 32> key{};
  if (seed) {
    uint8_t in[8 + 16] = {};
    for (int i = 0; i < 8; ++i) in[i] = static_cast<uint8_t>(*seed >> (8 * i));
    std::memcpy(in + 8, "fedmesh-dp-noise", 16);
    crypto_generichash(key.data(), key.size(), in, sizeof(in), nullptr, 0);
  } else {
    randombytes_buf(key.data(), key.size());
  }
  return GaussianNoise(key);
}

GaussianNoise::~GaussianNoise() {
  sodium_memzero(key_.data(), key_.size());
  sodium_memzero(buf_.data(), sizeof(buf_));
}

Result<GaussianNoise> GaussianNoise::FromKey(std::span<const uint8_t, 32> key) {
  FM_RETURN_IF_ERROR(InitSodium());
  std::array<uint8_t, 32> k{};
  std::copy(key.begin(), key.end(), k.begin());
  GaussianNoise noise(k);
  sodium_memzero(k.data(), k.size());
  return noise;
}

uint64_t GaussianNoise::NextU64() {
  if (pos_ == buf_.size()) {
    // Blocks block_ .. block_ + 63 of the stream: nonce 0, block counter from block_
    // (crypto_stream_chacha20_xor_ic over zeros, written straight into buf_).
    static const uint8_t zeros[kWords * 8] = {};
    uint8_t nonce[crypto_stream_chacha20_NONCEBYTES] = {};
    crypto_stream_chacha20_xor_ic(reinterpret_cast<uint8_t*>(buf_.data()), zeros, sizeof(zeros),
                                  nonce, block_, key_.data());
    block_ += sizeof(zeros) / 64;
    pos_ = 0;
  }
  return buf_[pos_++];
}

double GaussianNoise::Standard() {
  if (spare_) {
    const double s = *spare_;
    spare_.reset();
    return s;
  }
  // u1 in (0, 1] so log(u1) is finite; u2 in [0, 1).
  const double u1 = static_cast<double>((NextU64() >> 11) + 1) * 0x1.0p-53;
  const double u2 = static_cast<double>(NextU64() >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double t = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(t);
  return r * std::cos(t);
}

void GaussianNoise::Add(std::span<float> x, double stddev) {
  if (stddev == 0) return;
  size_t i = 0;
  if (spare_ && !x.empty()) x[i++] = static_cast<float>(x[0] + stddev * Standard());
  // Whole pairs in chunks: the uniforms in the stream's order (u1, u2 per pair, as Standard
  // draws them), then the transcendental arithmetic vectorised (crypto/dp/box_muller.h).
  constexpr size_t kChunk = 256;
  std::array<double, kChunk> u1, u2, c, s;
  while (x.size() - i >= 2) {
    const size_t pairs = std::min(kChunk, (x.size() - i) / 2);
    for (size_t p = 0; p < pairs; ++p) {
      u1[p] = static_cast<double>((NextU64() >> 11) + 1) * 0x1.0p-53;  // (0, 1]
      u2[p] = static_cast<double>(NextU64() >> 11) * 0x1.0p-53;        // [0, 1)
    }
    dp_internal::BoxMullerPairs(u1.data(), u2.data(), c.data(), s.data(), pairs);
    for (size_t p = 0; p < pairs; ++p, i += 2) {
      x[i] = static_cast<float>(x[i] + stddev * c[p]);
      x[i + 1] = static_cast<float>(x[i + 1] + stddev * s[p]);
    }
  }
  if (i < x.size()) x[i] = static_cast<float>(x[i] + stddev * Standard());  // keeps the spare
}

}  // namespace fedmesh
