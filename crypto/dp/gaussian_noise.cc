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

namespace {

// Stream words first_block * 8 .. + 8 * blocks: nonce 0, block counter from first_block
// (crypto_stream_chacha20_xor_ic over zeros, written straight into out).
void Keystream(const uint8_t* key, uint64_t first_block, size_t blocks, uint64_t* out) {
  static const uint8_t zeros[65 * 64] = {};
  const uint8_t nonce[crypto_stream_chacha20_NONCEBYTES] = {};
  while (blocks > 0) {
    const size_t now = std::min<size_t>(blocks, sizeof(zeros) / 64);
    crypto_stream_chacha20_xor_ic(reinterpret_cast<uint8_t*>(out), zeros, now * 64, nonce,
                                  first_block, key);
    blocks -= now;
    first_block += now;
    out += now * 8;
  }
}

}  // namespace

uint64_t GaussianNoise::NextU64() {
  if (word_ < buf_first_ || word_ - buf_first_ >= buf_valid_) {
    buf_first_ = word_ / 8 * 8;
    Keystream(key_.data(), word_ / 8, kWords / 8, buf_.data());
    buf_valid_ = kWords;
  }
  return buf_[word_++ - buf_first_];
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

void GaussianNoise::AddPairs(float* x, size_t pairs, uint64_t first_word, double stddev) const {
  constexpr size_t kChunk = 256;  // pairs: 512 words, 64 or 65 keystream blocks
  std::array<uint64_t, (2 * kChunk / 8 + 1) * 8> words;
  std::array<double, kChunk> u1, u2, c, s;
  for (size_t done = 0; done < pairs; done += kChunk) {
    const size_t n = std::min(kChunk, pairs - done);
    const uint64_t w0 = first_word + 2 * done;
    const size_t skip = w0 % 8;
    Keystream(key_.data(), w0 / 8, (skip + 2 * n + 7) / 8, words.data());
    // The uniforms in the stream's order (u1, u2 per pair, as Standard draws them).
    for (size_t p = 0; p < n; ++p) {
      u1[p] = static_cast<double>((words[skip + 2 * p] >> 11) + 1) * 0x1.0p-53;  // (0, 1]
      u2[p] = static_cast<double>(words[skip + 2 * p + 1] >> 11) * 0x1.0p-53;    // [0, 1)
    }
    dp_internal::BoxMullerPairs(u1.data(), u2.data(), c.data(), s.data(), n);
    float* y = x + 2 * done;
    for (size_t p = 0; p < n; ++p) {
      y[2 * p] = static_cast<float>(y[2 * p] + stddev * c[p]);
      y[2 * p + 1] = static_cast<float>(y[2 * p + 1] + stddev * s[p]);
    }
  }
  sodium_memzero(words.data(), sizeof(words));
}

void GaussianNoise::Add(std::span<float> x, double stddev) {
  if (stddev == 0) return;
  size_t i = 0;
  if (spare_ && !x.empty()) x[i++] = static_cast<float>(x[0] + stddev * Standard());
  const size_t pairs = (x.size() - i) / 2;
  // Whole pairs: pair p takes stream words word_ + 2p and + 2p + 1 whichever thread makes
  // it, and chunks start at fixed multiples of 256 pairs, so any split gives equal values.
  constexpr size_t kSlice = 256 * 16;
  const size_t slices = (pairs + kSlice - 1) / kSlice;
  const uint64_t w = word_;
#pragma omp parallel for schedule(static) if (pairs >= kParallelPairs)
  for (size_t t = 0; t < slices; ++t) {
    const size_t p0 = t * kSlice, n = std::min(kSlice, pairs - p0);
    AddPairs(x.data() + i + 2 * p0, n, w + 2 * p0, stddev);
  }
  word_ += 2 * pairs;
  i += 2 * pairs;
  if (i < x.size()) x[i] = static_cast<float>(x[i] + stddev * Standard());  // keeps the spare
}

}  // namespace fedmesh
