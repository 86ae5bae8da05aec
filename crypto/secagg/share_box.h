// The end-to-end envelope for Shamir shares. Client u sends each neighbour v its shares
// through the server, so they travel sealed under a key only u and v have: the X25519
// agreement of their channel keys, hashed by libsodium's crypto_box_beforenm (HSalsa20),
// used with XChaCha20-Poly1305 (IETF AEAD, a random 24-byte nonce per box). The associated
// data binds the box to (domain "fedmesh-secagg-shares-v1", federation, round, sender,
// recipient), so the server can neither read a box, alter it, nor replay it to another
// recipient, round or federation. Wire form: nonce (24 bytes) || ciphertext || tag (16).
// Thread-safety: pure functions apart from the SecureRandom they are given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "crypto/identity.h"
#include "crypto/secagg/secure_random.h"
#include "crypto/secure_buffer.h"

namespace fedmesh {

inline constexpr size_t kShareBoxNonceSize = 24;
inline constexpr size_t kShareBoxTagSize = 16;
inline constexpr size_t kShareBoxOverhead = kShareBoxNonceSize + kShareBoxTagSize;

// Who a box is from and for; all of it is authenticated, none of it is secret.
struct ShareBoxContext {
  std::string_view federation_id;
  uint64_t round = 0;
  std::string_view from;
  std::string_view to;
};

// The symmetric key between my channel secret key and their channel public key; the same
// on both sides. InvalidArgument (naming `their_id`) for a low-order public key.
Result<SecureBuffer> ShareBoxKey(std::span<const uint8_t> my_secret_key,
                                 const CurveKey& their_public_key, std::string_view their_id);

// The same, written into `out` (part of a caller's SecureBuffer, which can hold the keys
// of all neighbours in one secure allocation).
Status ShareBoxKeyInto(std::span<const uint8_t> my_secret_key, const CurveKey& their_public_key,
                       std::string_view their_id, std::span<uint8_t, 32> out);

// Seals `plaintext` for context.to. REQUIRES: key is a 32-byte ShareBoxKey.
std::vector<uint8_t> SealShareBox(std::span<const uint8_t> key, std::span<const uint8_t> plaintext,
                                  const ShareBoxContext& context, SecureRandom& rng);

// Opens a box sealed for this context. Corruption (naming the sender) when the box is too
// short or fails authentication: tampered, truncated, or sealed for another context.
Result<SecureBuffer> OpenShareBox(std::span<const uint8_t> key, std::span<const uint8_t> box,
                                  const ShareBoxContext& context);
// The same, written into `out`, which must be box.size() - kShareBoxOverhead bytes
// (Corruption, naming the sender, for a box of any other size). On failure `out` is zeroed.
Status OpenShareBoxInto(std::span<const uint8_t> key, std::span<const uint8_t> box,
                        const ShareBoxContext& context, std::span<uint8_t> out);

}  // namespace fedmesh
