// Signed updates in aggregator mode: a site signs every FitResult that carries a model
// update with its Ed25519 key, over (federation, node, round, model version, num_examples,
// applied_prediction, codec, element count, shapes, the update bytes' payload digest). The
// aggregator verifies the signature against the site's enrolled sign_public before the
// update reaches the round engine and stores it with the update, so an accepted update can
// be attributed to its site later (and a relaying upper aggregator cannot alter it).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"

namespace fedmesh {

// The exact bytes signed: a domain tag naming the digest's kind ("fedmesh/update/v1" for
// SHA-256, as builds before BLAKE3 signed; "fedmesh/update/v2" for BLAKE3), then each field
// length-prefixed or fixed-width little-endian, then the digest of r.update.bytes.
std::vector<uint8_t> UpdateSigningBytes(std::string_view federation, std::string_view node,
                                        uint64_t model_version, const wire::FitResult& r,
                                        const wire::PayloadDigest& payload_digest);

// Sets r->signature over a `kind` digest of r->update.bytes, and r->update.digest to that
// digest, so the update travels with the digest its signature covers (Encode checks it and
// the receiver need not hash again). A site answers a task in the kind the task came with:
// an aggregator built before BLAKE3 then gets SHA-256 and a v1 signature it can check.
// Internal only if libsodium cannot sign.
Status SignUpdate(const Identity& signer, std::string_view federation, uint64_t model_version,
                  wire::FitResult* r, wire::DigestKind kind = wire::DigestKind::kBlake3);

// The digest `r`'s update traveled with (r.update.digest), or the BLAKE3 of its bytes when it
// has none: what VerifyUpdate checks the signature against.
wire::PayloadDigest UpdateDigest(const wire::FitResult& r);

// OK when `r` carries `signer`'s valid signature over the digest r.update traveled with
// (r.update.digest, which the Reassembler sets after checking it against the bytes
// received; without it, the BLAKE3 of the bytes). PermissionDenied, saying "unsigned" or
// "bad signature", otherwise.
Status VerifyUpdate(const PublicIdentity& signer, std::string_view federation,
                    uint64_t model_version, const wire::FitResult& r);

}  // namespace fedmesh
