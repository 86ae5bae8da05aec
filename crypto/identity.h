// A site's long-term identity: two key pairs under one name. The X25519 pair (libsodium
// crypto_box) is the CurveZMQ key that authenticates and encrypts every connection; the
// Ed25519 pair (crypto_sign) signs model updates so that a relay (a gossip peer, an upper
// aggregator) cannot forge or alter them. PublicIdentity is the shareable half, what an
// operator enrolls in an allowlist; Identity adds the secrets, which live only in
// SecureBuffers. Key files on disk are crypto/key_files.h.
// Thread-safety: both types are immutable after construction; const methods may be called
// from any number of threads at once. Identity is move-only, like its secrets.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"
#include "crypto/secure_buffer.h"

namespace fedmesh {

inline constexpr size_t kCurveKeySize = 32;       // X25519 public and secret keys
inline constexpr size_t kSignPublicKeySize = 32;  // Ed25519 public key
inline constexpr size_t kSignSeedSize = 32;       // Ed25519 secret seed
inline constexpr size_t kSignatureSize = 64;      // Ed25519 detached signature

using CurveKey = std::array<uint8_t, kCurveKeySize>;
using SignPublicKey = std::array<uint8_t, kSignPublicKeySize>;
using Signature = std::array<uint8_t, kSignatureSize>;

// OK when `name` can name a site: 1 to 64 characters from [A-Za-z0-9._-], starting with a
// letter or digit. Names appear in file names, logs and metrics, so nothing else is allowed.
// InvalidArgument otherwise, saying what is wrong.
Status ValidateSiteName(std::string_view name);

struct PublicIdentity {
  std::string name;
  CurveKey curve_public{};      // X25519 public key, as CurveZMQ uses it
  SignPublicKey sign_public{};  // Ed25519 public key

  // curve_public as the 40-character Z85 text CurveZMQ takes (ZMQ_CURVE_SERVERKEY etc.).
  std::string curve_public_z85() const;
  // sign_public as 40 Z85 characters, the form key files use.
  std::string sign_public_z85() const;

  friend bool operator==(const PublicIdentity&, const PublicIdentity&) = default;
};

class Identity {
 public:
  // A fresh identity with random key pairs. InvalidArgument when `name` fails
  // ValidateSiteName; Internal when libsodium or the secure allocator fails.
  static Result<Identity> Generate(std::string name);

  // The identity whose secrets are `curve_secret` (32 bytes) and `sign_seed` (the 32-byte
  // Ed25519 seed); both public keys are derived from them. The caller keeps its own copies
  // and should wipe them. InvalidArgument on a bad name or wrong sizes.
  static Result<Identity> FromSecrets(std::string name, std::span<const uint8_t> curve_secret,
                                      std::span<const uint8_t> sign_seed);

  Identity(Identity&&) noexcept = default;
  Identity& operator=(Identity&&) noexcept = default;

  const PublicIdentity& public_identity() const { return public_; }
  const std::string& name() const { return public_.name; }

  // SECRET. The 32-byte X25519 secret key. Prefer this to curve_secret_z85():
  // zmq_setsockopt(ZMQ_CURVE_SECRETKEY) accepts these 32 raw bytes directly, with no copy
  // outside secure memory.
  std::span<const uint8_t> curve_secret() const { return curve_secret_.span(); }
  // SECRET. The 32-byte Ed25519 seed from which the signing key pair is derived; this is
  // what a key file stores.
  std::span<const uint8_t> sign_seed() const {
    return sign_secret_.span().first(kSignSeedSize);  // libsodium's layout: seed || public
  }
  // SECRET. curve_secret() as 40 Z85 characters, for APIs that want ZMQ_CURVE_SECRETKEY
  // as text. The returned string is ordinary heap memory: the caller must not log it and
  // should wipe it (sodium_memzero on its data()) once it has been handed over.
  std::string curve_secret_z85() const;

  // The Ed25519 detached signature of `msg`. Internal only if libsodium cannot start.
  Result<Signature> Sign(std::span<const uint8_t> msg) const;

 private:
  Identity(PublicIdentity pub, SecureBuffer curve_secret, SecureBuffer sign_secret)
      : public_(std::move(pub)),
        curve_secret_(std::move(curve_secret)),
        sign_secret_(std::move(sign_secret)) {}

  PublicIdentity public_;
  SecureBuffer curve_secret_;  // 32 bytes
  SecureBuffer sign_secret_;   // 64 bytes, libsodium's Ed25519 secret key (seed || public)
};

// True when `sig` is `signer`'s valid Ed25519 signature of exactly `msg`. False for any
// other signature, including one of the wrong length (so callers may pass bytes straight
// from the wire) or when libsodium cannot start.
bool VerifySignature(const PublicIdentity& signer, std::span<const uint8_t> msg,
                     std::span<const uint8_t> sig);

}  // namespace fedmesh
