// SHA-256 (FIPS 180-4): the integrity hash fedmesh puts on every tensor payload on the wire
// and on every stored model blob. Written here rather than borrowed from libsodium because
// core/ must not depend on crypto/ (dependencies flow core -> crypto). This is an integrity
// check against damaged or mismatched bytes, not a keyed MAC: authenticity comes from the
// signatures and CurveZMQ in crypto/.
// Thread-safety: a Sha256 object belongs to one thread; Sha256::Hash is stateless.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace fedmesh {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hasher: Update() any number of times with any split of the input, then
// Finish() once. The digest depends only on the concatenated input, never on the split.
class Sha256 {
 public:
  Sha256();

  void Update(std::span<const uint8_t> data);
  void Update(std::string_view data);
  // REQUIRES: not called before on this object.
  Sha256Digest Finish();

  // One-shot digest of `data`.
  static Sha256Digest Hash(std::span<const uint8_t> data);
  static Sha256Digest Hash(std::string_view data);
  // Whether this process hashes with the x86 SHA extensions (when the CPU has them and
  // FEDMESH_SHA256_PORTABLE is unset) rather than the portable loop. Same digests.
  static bool UsesShaExtensions();

 private:
  void Compress(const uint8_t* blocks, size_t num_blocks);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;  // bytes in buffer_, always < 64 between calls
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

// Lower-case hexadecimal, 64 characters.
std::string Sha256Hex(const Sha256Digest& digest);

}  // namespace fedmesh
