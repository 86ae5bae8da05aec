// Self-signed member records. A SWIM record about member X travels through other members,
// each enrolled but not trusted to speak for X. So X signs its own record with its Ed25519
// key over (federation, id, endpoint, both keys, incarnation), and every receiver checks
// that signature against X's allowlisted key. The state (alive, suspect, dead) is the one
// field left unsigned: any member may report X suspect or dead, but only on a record X
// signed, so it can neither move X to another endpoint nor raise X's incarnation (to the
// top, where X's refutation, incarnation + 1, would wrap). A copy for another federation
// does not verify here. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"

namespace fedmesh {

// The highest incarnation a record may carry: 2^32 below the top of uint64, so 2^32
// refutations (one a second for 136 years) can follow before incarnation + 1 wraps.
// Records above it are refused, and a member never refutes above it.
inline constexpr uint64_t kMaxIncarnation =
    std::numeric_limits<uint64_t>::max() - (uint64_t{1} << 32);

// The exact bytes that are signed: a domain tag, then each field length-prefixed or
// fixed-width little-endian. `state` and `signature` are not among them.
std::vector<uint8_t> MemberSigningBytes(std::string_view federation,
                                        const wire::MemberUpdate& update);

// Sets update->signature. InvalidArgument when the record is not the signer's own (another
// id or other keys); Internal only if libsodium cannot sign.
Status SignMember(const Identity& signer, std::string_view federation, wire::MemberUpdate* update);

// OK when `update` is about `signer` (same id and keys) and carries its valid signature for
// `federation`. PermissionDenied otherwise, saying "unsigned", "is not about" or "bad
// signature".
Status VerifyMember(const PublicIdentity& signer, std::string_view federation,
                    const wire::MemberUpdate& update);

}  // namespace fedmesh
