// The digest a tensor payload travels with: BLAKE3 (what this build writes by default) or
// SHA-256 (what builds before it wrote, still accepted). The receiver checks the bytes
// against it as chunks arrive, and an update's signature covers it (crypto/update_signature),
// so it is computed once on each side of a link; BLAKE3 because that pass is the largest
// cost of a plain upload after the kernel's copies (bench/RESULTS.md, "BLAKE3 payload
// digests").
// Thread-safety: value types and pure functions; a PayloadHasher belongs to one thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/blake3.h"
#include "core/sha256.h"

namespace fedmesh::wire {

enum class DigestKind : uint8_t { kSha256 = 1, kBlake3 = 2 };

struct PayloadDigest {
  DigestKind kind = DigestKind::kBlake3;
  std::array<uint8_t, 32> bytes{};

  friend bool operator==(const PayloadDigest&, const PayloadDigest&) = default;
};

// "sha256" or "blake3": the TensorPayload field that carries it (docs/wire.md).
std::string_view DigestKindName(DigestKind kind);

// "<kind>:<64 lower-case hex digits>", for messages.
std::string DigestText(const PayloadDigest& digest);

PayloadDigest HashPayload(DigestKind kind, std::span<const uint8_t> bytes);

// The kind of a payload's digest; BLAKE3 when it has none (not decoded from the wire). A site
// answers a task in KindOf(task.global_model.digest).
inline DigestKind KindOf(const std::optional<PayloadDigest>& digest) {
  return digest ? digest->kind : DigestKind::kBlake3;
}

// Incremental: Update() with the bytes in any split, then Finish() once.
class PayloadHasher {
 public:
  explicit PayloadHasher(DigestKind kind = DigestKind::kBlake3) : kind_(kind) {}

  void Update(std::span<const uint8_t> bytes);
  PayloadDigest Finish();

 private:
  DigestKind kind_;
  Sha256 sha256_;
  Blake3 blake3_;
};

}  // namespace fedmesh::wire
