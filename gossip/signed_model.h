// Signed gossip models. A gossip model travels through peers that are authenticated but
// not trusted with each other's updates, so every wire::GossipModel is signed by its
// sender's Ed25519 key over (federation, sender, sequence, kind, step, weight, codec,
// element count, SHA-256 of the payload bytes): a peer can neither forge a model for
// another site nor alter one in flight, and a copy sent to another federation does not
// verify there. Replays are caught by ReplayWindow (gossip/replay_window.h) on the
// sequence number the signature covers. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"

namespace fedmesh {

// The exact bytes that are signed: a domain tag, then each field length-prefixed or
// fixed-width little-endian, then the payload's SHA-256 (computed from model.bytes, so a
// caller cannot sign one hash and send other bytes).
std::vector<uint8_t> ModelSigningBytes(std::string_view federation, std::string_view sender,
                                       const wire::GossipModel& message);

// Sets message->signature. Internal only if libsodium cannot sign.
Status SignModel(const Identity& signer, std::string_view federation, wire::GossipModel* message);

// OK when `message` carries `signer`'s valid signature for (federation, signer.name).
// PermissionDenied otherwise, saying "unsigned" or "bad signature".
Status VerifyModel(const PublicIdentity& signer, std::string_view federation,
                   const wire::GossipModel& message);

}  // namespace fedmesh
