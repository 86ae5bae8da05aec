#include "core/wire/payload_digest.h"

namespace fedmesh::wire {

std::string_view DigestKindName(DigestKind kind) {
  return kind == DigestKind::kSha256 ? "sha256" : "blake3";
}

std::string DigestText(const PayloadDigest& digest) {
  return std::string(DigestKindName(digest.kind)) + ":" + Sha256Hex(digest.bytes);
}

PayloadDigest HashPayload(DigestKind kind, std::span<const uint8_t> bytes) {
  PayloadHasher h(kind);
  h.Update(bytes);
  return h.Finish();
}

void PayloadHasher::Update(std::span<const uint8_t> bytes) {
  if (kind_ == DigestKind::kSha256) {
    sha256_.Update(bytes);
  } else {
    blake3_.Update(bytes);
  }
}

PayloadDigest PayloadHasher::Finish() {
  return PayloadDigest{kind_, kind_ == DigestKind::kSha256 ? sha256_.Finish() : blake3_.Finish()};
}

}  // namespace fedmesh::wire
