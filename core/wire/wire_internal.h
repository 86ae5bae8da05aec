// Helpers shared by the wire codec's files (wire_codec.cc, wire_checks.cc, wire_proto.cc,
// reassembler.cc); not an API.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

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
  PayloadDigest digest;
};

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

// The checks Encode and the Reassembler both apply (defined in wire_checks.cc).
Status CheckHeader(const Header& h, const WireLimits& l);
// A body against its header and limits; payload_bytes is its payload's declared size.
Status CheckBody(const Header& h, const Body& body, uint64_t payload_bytes, const WireLimits& l);
// A payload's declared size, chunk size and chunk count; `what` names the field in errors.
Status CheckFraming(uint64_t payload_bytes, uint64_t chunk_bytes, uint64_t chunk_count,
                    std::string_view what, const WireLimits& l);
// The finite-value check of a completed message's payload (codec "none" float32).
Status CheckPayloadValues(const Body& body);
// The body's tensor payload (nullptr when it has none) and the field's name for errors.
const TensorPayload* PayloadOf(const Body& body);
TensorPayload* MutablePayloadOf(Body& body);
std::string_view PayloadFieldName(const Body& body);
// A message type's name ("unknown" for one this build does not know).
std::string_view TypeName(uint32_t type);

}  // namespace fedmesh::wire
