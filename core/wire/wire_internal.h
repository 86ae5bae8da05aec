// Helpers shared by the wire codec's files (wire_codec.cc, wire_proto.cc); not an API.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "core/sha256.h"
#include "core/status.h"
#include "core/wire/wire_codec.h"

namespace fedmesh::wire {

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// The wire-only part of a payload description: how its bytes are cut and their hash.
struct Framing {
  uint64_t payload_bytes = 0;
  uint64_t chunk_bytes = 0;
  uint32_t chunk_count = 0;
  Sha256Digest sha256{};
};

// The SHA-256 of no bytes: the hash an empty payload must carry.
inline Sha256Digest EmptySha256() { return Sha256::Hash(std::string_view()); }

// A Shamir share's x-coordinate: 1..255 (x = 0 would reveal the secret).
Status CheckShareX(uint64_t x, size_t index);

// Secure aggregation fields, checked by the sender (CheckBody) and by the receiver before
// a field is copied (BodyFromProto), with the same words: a byte field of fixed length, the
// three keys of an advertisement, and counts of listed items against their limits.
Status CheckExactBytes(size_t size, size_t expected, std::string_view field,
                       std::string_view what_it_is);
Status CheckSecAggKeys(std::string_view field, size_t channel, size_t masking, size_t signature);
Status CheckSecAggCount(std::string_view type, size_t count, std::string_view items, size_t limit,
                        std::string_view limit_name);
Status CheckSecAggBoxCount(std::string_view type, size_t count);
Status CheckSecAggShareCount(size_t count);
Status CheckSecAggRequestCount(size_t survivors, size_t dropped, const WireLimits& l);

}  // namespace fedmesh::wire
