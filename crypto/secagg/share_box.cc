#include "crypto/secagg/share_box.h"

#include <sodium.h>

#include <string>

#include "core/check.h"
#include "crypto/sodium.h"

namespace fedmesh {
namespace {

static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == kShareBoxNonceSize);
static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == kShareBoxTagSize);
static_assert(crypto_box_BEFORENMBYTES == crypto_aead_xchacha20poly1305_ietf_KEYBYTES);

constexpr std::string_view kShareBoxDomain = "fedmesh-secagg-shares-v1";

void AppendLengthPrefixed(std::vector<uint8_t>& out, std::string_view bytes) {
  const uint32_t len = static_cast<uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(len >> (8 * i)));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

std::vector<uint8_t> AssociatedData(const ShareBoxContext& c) {
  std::vector<uint8_t> ad;
  AppendLengthPrefixed(ad, kShareBoxDomain);
  AppendLengthPrefixed(ad, c.federation_id);
  for (int i = 0; i < 8; ++i) ad.push_back(static_cast<uint8_t>(c.round >> (8 * i)));
  AppendLengthPrefixed(ad, c.from);
  AppendLengthPrefixed(ad, c.to);
  return ad;
}

}  // namespace

Result<SecureBuffer> ShareBoxKey(std::span<const uint8_t> my_secret_key,
                                 const CurveKey& their_public_key, std::string_view their_id) {
  FM_ASSIGN_OR_RETURN(SecureBuffer key, SecureBuffer::Create(crypto_box_BEFORENMBYTES));
  FM_RETURN_IF_ERROR(
      ShareBoxKeyInto(my_secret_key, their_public_key, their_id, key.span().first<32>()));
  return key;
}

Status ShareBoxKeyInto(std::span<const uint8_t> my_secret_key, const CurveKey& their_public_key,
                       std::string_view their_id, std::span<uint8_t, 32> out) {
  FM_RETURN_IF_ERROR(InitSodium());
  if (my_secret_key.size() != crypto_box_SECRETKEYBYTES) {
    return Status::InvalidArgument("an X25519 secret key is 32 bytes, not " +
                                   std::to_string(my_secret_key.size()));
  }
  // beforenm fails exactly when the X25519 result is all zeros (a low-order point).
  if (crypto_box_beforenm(out.data(), their_public_key.data(), my_secret_key.data()) != 0) {
    return Status::InvalidArgument("the channel public key of '" + std::string(their_id) +
                                   "' is a low-order point; no secret can be agreed with it");
  }
  return Status::OK();
}

std::vector<uint8_t> SealShareBox(std::span<const uint8_t> key, std::span<const uint8_t> plaintext,
                                  const ShareBoxContext& context, SecureRandom& rng) {
  FM_CHECK_EQ(key.size(), size_t{crypto_aead_xchacha20poly1305_ietf_KEYBYTES});
  FM_CHECK(InitSodium().ok());
  std::vector<uint8_t> box(kShareBoxOverhead + plaintext.size());
  // 24 random bytes: XChaCha20's nonce is long enough that random nonces never collide.
  rng.Fill(std::span(box).first(kShareBoxNonceSize));
  const std::vector<uint8_t> ad = AssociatedData(context);
  unsigned long long written = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(box.data() + kShareBoxNonceSize, &written,
                                             plaintext.data(), plaintext.size(), ad.data(),
                                             ad.size(), nullptr, box.data(), key.data());
  FM_CHECK_EQ(written, plaintext.size() + kShareBoxTagSize);
  return box;
}

Result<SecureBuffer> OpenShareBox(std::span<const uint8_t> key, std::span<const uint8_t> box,
                                  const ShareBoxContext& context) {
  const size_t size = box.size() >= kShareBoxOverhead ? box.size() - kShareBoxOverhead : 0;
  FM_ASSIGN_OR_RETURN(SecureBuffer plaintext, SecureBuffer::Create(size));
  FM_RETURN_IF_ERROR(OpenShareBoxInto(key, box, context, plaintext.span()));
  return plaintext;
}

Status OpenShareBoxInto(std::span<const uint8_t> key, std::span<const uint8_t> box,
                        const ShareBoxContext& context, std::span<uint8_t> out) {
  FM_CHECK_EQ(key.size(), size_t{crypto_aead_xchacha20poly1305_ietf_KEYBYTES});
  FM_RETURN_IF_ERROR(InitSodium());
  if (box.size() < kShareBoxOverhead) {
    return Status::Corruption("the share box from '" + std::string(context.from) + "' is " +
                              std::to_string(box.size()) + " bytes, shorter than its " +
                              std::to_string(kShareBoxOverhead) + "-byte nonce and tag");
  }
  if (box.size() - kShareBoxOverhead != out.size()) {
    return Status::Corruption("the share box from '" + std::string(context.from) + "' is " +
                              std::to_string(box.size()) + " bytes; a box of " +
                              std::to_string(out.size()) + " bytes of shares is " +
                              std::to_string(out.size() + kShareBoxOverhead));
  }
  const std::vector<uint8_t> ad = AssociatedData(context);
  unsigned long long written = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(
          out.data(), &written, nullptr, box.data() + kShareBoxNonceSize,
          box.size() - kShareBoxNonceSize, ad.data(), ad.size(), box.data(), key.data()) != 0) {
    sodium_memzero(out.data(), out.size());
    return Status::Corruption("the share box from '" + std::string(context.from) + "' to '" +
                              std::string(context.to) +
                              "' fails authentication: it was altered, or sealed for another "
                              "recipient, round or federation");
  }
  return Status::OK();
}

}  // namespace fedmesh
