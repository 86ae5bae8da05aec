#include "crypto/identity.h"

#include <sodium.h>

#include <algorithm>
#include <utility>

#include "crypto/sodium.h"
#include "crypto/z85.h"

namespace fedmesh {
namespace {

constexpr size_t kMaxSiteNameLength = 64;

static_assert(crypto_box_PUBLICKEYBYTES == kCurveKeySize);
static_assert(crypto_box_SECRETKEYBYTES == kCurveKeySize);
static_assert(crypto_scalarmult_BYTES == kCurveKeySize);
static_assert(crypto_sign_PUBLICKEYBYTES == kSignPublicKeySize);
static_assert(crypto_sign_SEEDBYTES == kSignSeedSize);
static_assert(crypto_sign_BYTES == kSignatureSize);

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// The name in quotes when it is printable ASCII; otherwise just "site name", so that a
// control character never reaches a log line or a terminal.
std::string Described(std::string_view name) {
  const bool printable =
      std::all_of(name.begin(), name.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  return printable ? "site name '" + std::string(name) + "'" : std::string("site name");
}

}  // namespace

Status ValidateSiteName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("a site name must not be empty");
  if (name.size() > kMaxSiteNameLength) {
    return Status::InvalidArgument("site name is " + std::to_string(name.size()) +
                                   " characters long; the limit is " +
                                   std::to_string(kMaxSiteNameLength));
  }
  if (!IsAlnum(name[0])) {
    return Status::InvalidArgument(Described(name) + " must start with a letter or digit");
  }
  for (char c : name) {
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-') {
      return Status::InvalidArgument(Described(name) +
                                     " may only contain letters, digits, '.', '_' and '-'");
    }
  }
  return Status::OK();
}

std::string PublicIdentity::curve_public_z85() const { return Z85Encode(curve_public); }
std::string PublicIdentity::sign_public_z85() const { return Z85Encode(sign_public); }

Result<Identity> Identity::Generate(std::string name) {
  FM_RETURN_IF_ERROR(ValidateSiteName(name));
  FM_RETURN_IF_ERROR(InitSodium());
  PublicIdentity pub;
  pub.name = std::move(name);
  FM_ASSIGN_OR_RETURN(SecureBuffer curve_secret, SecureBuffer::Create(crypto_box_SECRETKEYBYTES));
  FM_ASSIGN_OR_RETURN(SecureBuffer sign_secret, SecureBuffer::Create(crypto_sign_SECRETKEYBYTES));
  // crypto_box_keypair is what zmq_curve_keypair uses: a random scalar and its X25519 base
  // point multiple, so the keys are CurveZMQ keys.
  if (crypto_box_keypair(pub.curve_public.data(), curve_secret.data()) != 0 ||
      crypto_sign_keypair(pub.sign_public.data(), sign_secret.data()) != 0) {
    return Status::Internal("libsodium failed to generate a key pair");
  }
  return Identity(std::move(pub), std::move(curve_secret), std::move(sign_secret));
}

Result<Identity> Identity::FromSecrets(std::string name, std::span<const uint8_t> curve_secret,
                                       std::span<const uint8_t> sign_seed) {
  FM_RETURN_IF_ERROR(ValidateSiteName(name));
  if (curve_secret.size() != kCurveKeySize || sign_seed.size() != kSignSeedSize) {
    return Status::InvalidArgument("an identity needs a " + std::to_string(kCurveKeySize) +
                                   "-byte curve secret and a " + std::to_string(kSignSeedSize) +
                                   "-byte signing seed");
  }
  FM_RETURN_IF_ERROR(InitSodium());
  PublicIdentity pub;
  pub.name = std::move(name);
  FM_ASSIGN_OR_RETURN(SecureBuffer curve, SecureBuffer::CopyOf(curve_secret));
  FM_ASSIGN_OR_RETURN(SecureBuffer sign, SecureBuffer::Create(crypto_sign_SECRETKEYBYTES));
  if (crypto_scalarmult_base(pub.curve_public.data(), curve.data()) != 0 ||
      crypto_sign_seed_keypair(pub.sign_public.data(), sign.data(), sign_seed.data()) != 0) {
    return Status::Internal("libsodium failed to derive the public keys from the secrets");
  }
  return Identity(std::move(pub), std::move(curve), std::move(sign));
}

std::string Identity::curve_secret_z85() const { return Z85Encode(curve_secret_.span()); }

Result<Signature> Identity::Sign(std::span<const uint8_t> msg) const {
  FM_RETURN_IF_ERROR(InitSodium());
  Signature sig;
  if (crypto_sign_detached(sig.data(), nullptr, msg.data(), msg.size(), sign_secret_.data()) != 0) {
    return Status::Internal("libsodium failed to sign a message");
  }
  return sig;
}

bool VerifySignature(const PublicIdentity& signer, std::span<const uint8_t> msg,
                     std::span<const uint8_t> sig) {
  if (sig.size() != kSignatureSize || !InitSodium().ok()) return false;
  return crypto_sign_verify_detached(sig.data(), msg.data(), msg.size(),
                                     signer.sign_public.data()) == 0;
}

}  // namespace fedmesh
