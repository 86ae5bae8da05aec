// DigestMemo: the digest (payload_digest.h) of the last payload hashed through it, kept with a copy of its
// bytes. Bytes equal to those (same size, memcmp: about ten times cheaper than hashing)
// get the remembered digest, which is what hashing them would give; any other bytes are
// hashed and remembered in their place. For a sender that encodes one payload for many
// receivers (a round's FitTask to every selected node) and for the in-process transport,
// whose receiver decodes the very bytes its sender hashed a moment before (sim/).
// Thread-safety: none; one per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/wire/payload_digest.h"

namespace fedmesh::wire {

class DigestMemo {
 public:
  // Payloads larger than max_bytes are hashed but not remembered (the copy would cost more
  // memory than the hash is worth). Default: 64 MiB.
  explicit DigestMemo(size_t max_bytes = size_t{64} << 20) : max_bytes_(max_bytes) {}

  // The remembered digest only when it is of `kind` too.
  PayloadDigest Hash(DigestKind kind, std::span<const uint8_t> bytes);

  // Hashes served from memory and hashes computed, since construction.
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  size_t max_bytes_;
  bool valid_ = false;
  std::vector<uint8_t> bytes_;
  PayloadDigest digest_{};
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace fedmesh::wire
