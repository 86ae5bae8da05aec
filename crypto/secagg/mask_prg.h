// The mask PRG of secure aggregation: a 32-byte seed (a self-mask seed b_u or a pairwise
// seed s_uv) expands into as many uint32 mask words as the update has coordinates. The
// expansion is the ChaCha20 keystream (RFC 8439, libsodium's crypto_stream_chacha20_ietf)
// under the seed with the all-zero nonce from block 0, read as little-endian words, so
// any implementation of RFC 8439 reproduces the masks of a fedmesh client. A zero nonce is
// safe because every seed masks exactly one vector in one round.
// ChaCha20WordStream is the same keystream one word at a time, for public randomness
// derived from a public seed (the shuffle of the SecAgg+ graph).
// Thread-safety: the functions are pure; a ChaCha20WordStream is not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace fedmesh {

inline constexpr size_t kMaskSeedSize = 32;

// out[i] = keystream word i, for i < out.size().
void ExpandMask(std::span<const uint8_t, kMaskSeedSize> seed, std::span<uint32_t> out);
// acc[i] += keystream word i (mod 2^32), without holding the whole mask in memory.
void AddMask(std::span<const uint8_t, kMaskSeedSize> seed, std::span<uint32_t> acc);
// acc[i] -= keystream word i (mod 2^32).
void SubtractMask(std::span<const uint8_t, kMaskSeedSize> seed, std::span<uint32_t> acc);

// The raw ChaCha20-IETF keystream under (key, nonce) starting at block `counter`.
// Exposed so that known-answer tests can run RFC 8439's vectors (which use non-zero
// nonces and counters) through the code path the masks use.
void ChaCha20Keystream(std::span<const uint8_t, 32> key, std::span<const uint8_t, 12> nonce,
                       uint32_t counter, std::span<uint8_t> out);

// Keystream words of ChaCha20(seed, zero nonce) one at a time: word i is what
// ExpandMask would put at out[i].
class ChaCha20WordStream {
 public:
  explicit ChaCha20WordStream(std::span<const uint8_t, kMaskSeedSize> seed);
  ~ChaCha20WordStream();
  ChaCha20WordStream(const ChaCha20WordStream&) = delete;
  ChaCha20WordStream& operator=(const ChaCha20WordStream&) = delete;

  uint32_t Next();
  // Uniform in [0, bound) by rejection sampling (no modulo bias). REQUIRES: bound > 0.
  uint32_t Uniform(uint32_t bound);

 private:
  void Refill();

  std::array<uint8_t, kMaskSeedSize> key_;
  std::array<uint8_t, 1024> block_{};  // 16 ChaCha20 blocks
  size_t used_ = sizeof(block_);
  uint32_t counter_ = 0;  // next block to generate
};

}  // namespace fedmesh
