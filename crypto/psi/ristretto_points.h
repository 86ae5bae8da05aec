// The group arithmetic of ECDH private set intersection, over ristretto255 (libsodium): ids
// hashed to points, and points raised to a party's secret scalar ("blinded"). Blinding
// commutes, a·(b·H(x)) = b·(a·H(x)), which is what lets two parties compare ids that
// neither reveals. Batches run on all OpenMP threads: a scalar multiplication costs about
// 50 us, so a million ids is the work of a minute on one core.
// Thread-safety: pure functions; the scalar is only read.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "crypto/secure_buffer.h"

namespace fedmesh::psi {

inline constexpr size_t kPointSize = 32;   // an encoded ristretto255 element
inline constexpr size_t kScalarSize = 32;  // a scalar modulo the group order
using Point = std::array<uint8_t, kPointSize>;

// Hash-to-group domain: BLAKE2b-512 over this, its length and the id, then Elligator (libsodium's
// crypto_core_ristretto255_from_hash). Another domain would make another, unrelated set.
inline constexpr std::string_view kIdHashDomain = "fedmesh-psi-id-v1";

// A fresh secret scalar, uniform and non-zero, in secure memory.
Result<SecureBuffer> RandomScalar();

// H(id) for every id, in order.
std::vector<Point> HashIds(std::span<const std::string> ids);

// points[i] <- scalar · points[i], in place. InvalidArgument naming the first index that is
// not a valid group element (or whose product is the identity): what a peer sent is checked
// here, so a malformed point is an error, never a silent match.
Status Blind(std::span<const uint8_t> scalar, std::span<Point> points);

}  // namespace fedmesh::psi
