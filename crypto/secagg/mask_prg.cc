#include "crypto/secagg/mask_prg.h"

#include <sodium.h>

#include <algorithm>

#include "core/check.h"
#include "crypto/sodium.h"

namespace fedmesh {
namespace {

constexpr size_t kBlockBytes = 64;
// Keystream is made in chunks this size: large enough to amortise the call, small enough
// to live on the stack and be wiped.
constexpr size_t kChunkBytes = 4096;
constexpr std::array<uint8_t, 12> kZeroNonce{};

uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// Calls fn(word_index, word) for the first `count` keystream words.
template <typename Fn>
void ForEachMaskWord(std::span<const uint8_t, kMaskSeedSize> seed, size_t count, Fn fn) {
  FM_CHECK(InitSodium().ok());
  uint8_t chunk[kChunkBytes];
  uint64_t block = 0;
  for (size_t done = 0; done < count;) {
    const size_t words = std::min(count - done, kChunkBytes / 4);
    const size_t bytes = (words * 4 + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
    // The IETF counter is 32 bits: 2^32 blocks is 256 GiB of mask, far beyond any vector.
    FM_CHECK_LT(block, uint64_t{1} << 32);
    std::fill_n(chunk, bytes, 0);
    crypto_stream_chacha20_ietf_xor_ic(chunk, chunk, bytes, kZeroNonce.data(),
                                       static_cast<uint32_t>(block), seed.data());
    for (size_t i = 0; i < words; ++i) fn(done + i, LoadLe32(chunk + 4 * i));
    done += words;
    block += bytes / kBlockBytes;
  }
  // The keystream is as secret as the seed: whoever sees it can unmask.
  sodium_memzero(chunk, sizeof(chunk));
}

}  // namespace

void ExpandMask(std::span<const uint8_t, kMaskSeedSize> seed, std::span<uint32_t> out) {
  ForEachMaskWord(seed, out.size(), [&](size_t i, uint32_t w) { out[i] = w; });
}

void AddMask(std::span<const uint8_t, kMaskSeedSize> seed, std::span<uint32_t> acc) {
  ForEachMaskWord(seed, acc.size(), [&](size_t i, uint32_t w) { acc[i] += w; });
}

void SubtractMask(std::span<const uint8_t, kMaskSeedSize> seed, std::span<uint32_t> acc) {
  ForEachMaskWord(seed, acc.size(), [&](size_t i, uint32_t w) { acc[i] -= w; });
}

void ChaCha20Keystream(std::span<const uint8_t, 32> key, std::span<const uint8_t, 12> nonce,
                       uint32_t counter, std::span<uint8_t> out) {
  FM_CHECK(InitSodium().ok());
  std::fill(out.begin(), out.end(), 0);
  if (!out.empty()) {
    crypto_stream_chacha20_ietf_xor_ic(out.data(), out.data(), out.size(), nonce.data(), counter,
                                       key.data());
  }
}

ChaCha20WordStream::ChaCha20WordStream(std::span<const uint8_t, kMaskSeedSize> seed) {
  std::copy(seed.begin(), seed.end(), key_.begin());
}

ChaCha20WordStream::~ChaCha20WordStream() {
  sodium_memzero(key_.data(), key_.size());
  sodium_memzero(block_.data(), block_.size());
}

void ChaCha20WordStream::Refill() {
  ChaCha20Keystream(key_, kZeroNonce, counter_, block_);
  counter_ += static_cast<uint32_t>(block_.size() / kBlockBytes);
  used_ = 0;
}

uint32_t ChaCha20WordStream::Next() {
  if (used_ == block_.size()) Refill();
  const uint32_t w = LoadLe32(block_.data() + used_);
  used_ += 4;
  return w;
}

uint32_t ChaCha20WordStream::Uniform(uint32_t bound) {
  FM_CHECK_GT(bound, 0u);
  // Accept only words below the largest multiple of `bound` that fits in 2^32, so every
  // residue is equally likely; fewer than half the words are ever rejected.
  const uint32_t limit = static_cast<uint32_t>((uint64_t{1} << 32) - (uint64_t{1} << 32) % bound);
  for (;;) {
    const uint32_t w = Next();
    if (limit == 0 || w < limit) return w % bound;
  }
}

}  // namespace fedmesh
