// Signed updates in aggregator mode: a site signs every FitResult that carries a model
// update with its Ed25519 key, over (federation, node, round, model version, num_examples,
// applied_prediction, codec, element count, shapes, SHA-256 of the update bytes). The
// aggregator verifies the signature against the site's enrolled sign_public before the
// update reaches the round engine and stores it with the update, so an accepted update can
// be attributed to its site later (and a relaying upper aggregator cannot alter it).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/sha256.h"
#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"

namespace fedmesh {

// The exact bytes signed: a domain tag, then each field length-prefixed or fixed-width
// little-endian, then `payload_sha256` (the SHA-256 of r.update.bytes).
std::vector<uint8_t> UpdateSigningBytes(std::string_view federation, std::string_view node,
                                        uint64_t model_version, const wire::FitResult& r,
                                        const Sha256Digest& payload_sha256);

// Sets r->signature, hashing r->update.bytes. Internal only if libsodium cannot sign.
Status SignUpdate(const Identity& signer, std::string_view federation, uint64_t model_version,
                  wire::FitResult* r);

// OK when `r` carries `signer`'s valid signature. Uses r.update.sha256 when set (the
// Reassembler sets it after checking it against the bytes received), else hashes the bytes.
// PermissionDenied, saying "unsigned" or "bad signature", otherwise.
Status VerifyUpdate(const PublicIdentity& signer, std::string_view federation,
                    uint64_t model_version, const wire::FitResult& r);

}  // namespace fedmesh
