// The byte layout every fedmesh signature covers (update, gossip model and member
// signatures): fields appended fixed-width little-endian or length-prefixed, so that no two
// different field sequences give the same bytes. One place, so the three signed formats
// cannot drift apart in how they encode a field.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fedmesh::signing {

// `v` as 8 little-endian bytes.
inline void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// The length (PutU64), then the bytes.
inline void PutBytes(std::vector<uint8_t>* out, std::span<const uint8_t> b) {
  PutU64(out, b.size());
  out->insert(out->end(), b.begin(), b.end());
}

inline void PutString(std::vector<uint8_t>* out, std::string_view s) {
  PutU64(out, s.size());
  out->insert(out->end(), s.begin(), s.end());
}

}  // namespace fedmesh::signing
