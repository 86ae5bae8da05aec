// X25519 key agreement for secure aggregation. Every client makes two fresh key pairs per
// round: a channel pair, whose agreement with a neighbour keys the AEAD that carries Shamir
// shares through the server, and a masking pair, whose agreement gives the pairwise mask
// seed s_uv. Both ends of a pair derive the same 32 bytes; nobody else (the server
// included) can, until the server rebuilds a dropped client's masking secret key from its
// neighbours' shares, which is the point.
// Pairwise seed = BLAKE2b-256 over, in order: the domain "fedmesh-secagg-pair-v1", the
// round (8 bytes little-endian), the two client ids in sorted order, and the X25519 shared
// point; the domain and ids each preceded by their length as 4 bytes little-endian, so no
// two different inputs hash the same bytes.
// Thread-safety: pure functions apart from the SecureRandom they are given.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"
#include "crypto/identity.h"
#include "crypto/secagg/secure_random.h"
#include "crypto/secure_buffer.h"

namespace fedmesh {

inline constexpr std::string_view kPairwiseSeedDomain = "fedmesh-secagg-pair-v1";

struct CurveKeyPair {
  CurveKey public_key{};
  SecureBuffer secret_key;  // 32 bytes

  // A fresh pair whose secret key is 32 bytes from `rng`. Internal only when libsodium
  // cannot start or the secure allocator fails.
  static Result<CurveKeyPair> Generate(SecureRandom& rng);
};

// X25519(secret_key, public_key), refused (InvalidArgument naming `their_id`) when the
// public key is a low-order point: the shared point would then be all zeros whatever our
// secret, i.e. known to everyone.
Result<SecureBuffer> SharedPoint(std::span<const uint8_t> my_secret_key,
                                 const CurveKey& their_public_key, std::string_view their_id);

// s_uv for the pair (my_id, their_id) in `round`. Symmetric: u with (s_sk_u, s_pk_v) and v
// with (s_sk_v, s_pk_u) get the same 32 bytes. Errors as SharedPoint.
Result<SecureBuffer> PairwiseMaskSeed(std::span<const uint8_t> my_secret_key,
                                      const CurveKey& their_public_key, uint64_t round,
                                      std::string_view my_id, std::string_view their_id);
// The same, written into `out` (part of a caller's SecureBuffer): a client derives one
// seed per neighbour, and a secure allocation per seed costs more than the X25519 itself.
Status PairwiseMaskSeedInto(std::span<const uint8_t> my_secret_key,
                            const CurveKey& their_public_key, uint64_t round,
                            std::string_view my_id, std::string_view their_id,
                            std::span<uint8_t, 32> out);

}  // namespace fedmesh
