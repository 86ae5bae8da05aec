#include "core/wire/digest_memo.h"

#include <cstring>

namespace fedmesh::wire {

PayloadDigest DigestMemo::Hash(DigestKind kind, std::span<const uint8_t> bytes) {
  if (valid_ && digest_.kind == kind && bytes.size() == bytes_.size() &&
      (bytes.empty() || std::memcmp(bytes.data(), bytes_.data(), bytes.size()) == 0)) {
    ++hits_;
    return digest_;
  }
  ++misses_;
  const PayloadDigest digest = HashPayload(kind, bytes);
  valid_ = bytes.size() <= max_bytes_;
  if (valid_) {
    bytes_.assign(bytes.begin(), bytes.end());
    digest_ = digest;
  } else {
    bytes_.clear();
    bytes_.shrink_to_fit();
  }
  return digest;
}

}  // namespace fedmesh::wire
