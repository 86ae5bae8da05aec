// The conversion between wire messages (messages.h) and their protobuf envelope
// (fedmesh.proto), for wire_codec.cc; not an API: use Encode / Decode.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/wire/fedmesh.pb.h"
#include "core/wire/messages.h"
#include "core/wire/wire_codec.h"
#include "core/wire/wire_internal.h"

namespace fedmesh::wire {

void ToProto(const Header& h, uint32_t type, pb::Header* out);
Header FromProto(const pb::Header& h);
// The body into `env` (its payload described by `framing`), and back: the payload's
// description bounded by `l`, its framing into `framing`.
void BodyToProto(const Body& body, const Framing& framing, pb::Envelope* env);
Status BodyFromProto(const pb::Envelope& env, const WireLimits& l, Body* body, Framing* framing);
// The message type an envelope's body case stands for (defined in wire_codec.cc).
uint32_t TypeOfBodyCase(pb::Envelope::BodyCase c);

}  // namespace fedmesh::wire
