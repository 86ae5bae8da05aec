// Per-message signatures of split training: the sender signs every split message
// (vertical/split_messages.h) with its Ed25519 key (crypto/identity.h) over a domain tag, the
// federation, its own site name, the receiver's, and the SHA-256 of the message bytes (signed
// flag set; the message holds its step and micro-batch). The
// receiver checks it against the sender's enrolled signing key before decoding. CurveZMQ
// already keeps a message the sender's and unaltered in transit; the signature also makes
// it attributable afterwards (a party can show which activations or gradients it was sent,
// and by whom), and it binds the receiver, so a message cannot be passed on to another party
// as if meant for it. Replays within a link are CurveZMQ's to stop (its nonces); within a job
// a repeated step or micro-batch is a protocol error anyway.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "crypto/identity.h"

namespace fedmesh::vertical {

// `message` (EncodeSplitMessage's bytes) with the signed flag set and `from`'s signature
// appended. InvalidArgument when `message` is not a split message or is signed already;
// Internal only if libsodium cannot sign.
Result<std::string> SignSplitMessage(const Identity& from, std::string_view federation, std::string_view to,
                                     std::string message);

// OK when `message` carries `from`'s valid signature for receiver `to` in `federation`.
// PermissionDenied naming the sender, "unsigned" or "bad signature", otherwise.
Status VerifySplitMessage(const PublicIdentity& from, std::string_view federation, std::string_view to,
                          std::string_view message);

}  // namespace fedmesh::vertical
