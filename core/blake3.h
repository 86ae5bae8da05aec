// BLAKE3 (the 32-byte default hash of the BLAKE3 specification, unkeyed): the digest
// fedmesh puts on tensor payloads on the wire and that update signatures cover. Chosen over
// SHA-256 for those because payloads are large and hashed once on each side of every link:
// BLAKE3 hashes 1 KiB chunks independently, 16 at a time in AVX-512 lanes (8 with AVX2),
// which runs several times faster than SHA-256 with the SHA extensions, whose one stream is
// bound by the latency of its round instruction (bench/RESULTS.md, "BLAKE3 payload digests").
// Written here for the same reason as core/sha256.h: core/ must not depend on crypto/, and
// Debian ships no C BLAKE3 library. This is an integrity hash, not a MAC: authenticity comes
// from the signatures and CurveZMQ in crypto/.
// Thread-safety: a Blake3 object belongs to one thread; Blake3::Hash is stateless.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace fedmesh {

using Blake3Digest = std::array<uint8_t, 32>;

// Incremental hasher: Update() any number of times with any split of the input, then
// Finish() once. The digest depends only on the concatenated input, never on the split.
class Blake3 {
 public:
  Blake3();

  void Update(std::span<const uint8_t> data);
  void Update(std::string_view data);
  // REQUIRES: not called before on this object.
  Blake3Digest Finish();

  // One-shot digest of `data`.
  static Blake3Digest Hash(std::span<const uint8_t> data);
  static Blake3Digest Hash(std::string_view data);
  // The lane kernel this process uses: "avx512" (16 chunks at once), "avx2" (8) or
  // "portable" (4, baseline x86-64 or any other CPU). FEDMESH_BLAKE3_KERNEL=avx2 or
  // =portable caps the choice (the tests run each kernel that way). Same digests.
  static const char* Kernel();

 private:
  void AddChunkBytes(const uint8_t* data, size_t len);
  void FinishChunk();
  void PushSubtree(const uint32_t cv[8], unsigned level);

  // Chaining values of complete subtrees, one per set bit of chunks_done_, largest first.
  // 54 levels cover 2^54 chunks (2^64 bytes).
  std::array<std::array<uint32_t, 8>, 54> stack_{};
  size_t stack_len_ = 0;
  uint64_t chunks_done_ = 0;  // whole chunks folded into stack_
  // The chunk being filled: chaining value, the last block (kept until more bytes arrive, as
  // it may be the chunk's end), blocks already compressed, bytes in the chunk so far.
  std::array<uint32_t, 8> chunk_cv_{};
  std::array<uint8_t, 64> block_{};
  size_t block_len_ = 0;
  size_t blocks_compressed_ = 0;
  size_t chunk_len_ = 0;
  bool finished_ = false;
};

}  // namespace fedmesh
