#include "collective/sealed_link.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <cstring>

#include "crypto/sodium.h"

namespace fedmesh::collective {
namespace internal {

struct Gcm {
  EVP_CIPHER_CTX* ctx = nullptr;
  bool seal = true;
};

void GcmDeleter::operator()(Gcm* g) const {
  if (g->ctx != nullptr) EVP_CIPHER_CTX_free(g->ctx);  // OpenSSL cleanses the key schedule
  delete g;
}

}  // namespace internal
namespace {

constexpr char kMagic[4] = {'F', 'M', 'S', 'L'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kHello = 1, kWelcome = 2, kUnknown = 3, kData = 4;
constexpr size_t kPrefix = 8;  // magic, version, type, two zero bytes
constexpr size_t kDataPrefix = 16;
constexpr size_t kTag = 16;
constexpr char kLabel[] = "fedmesh collective sealed link v1 (X25519, BLAKE2b, AES-256-GCM)";
// OpenSSL's update lengths are int: long payloads go in pieces.
constexpr size_t kPiece = size_t{1} << 30;

using GcmPtr = std::unique_ptr<internal::Gcm, internal::GcmDeleter>;

std::string Prefix(uint8_t type) {
  std::string p(kPrefix, '\0');
  std::memcpy(p.data(), kMagic, 4);
  p[4] = static_cast<char>(kVersion);
  p[5] = static_cast<char>(type);
  return p;
}

// X25519; false for a low-order point (the shared secret would be all zeros).
bool Dh(uint8_t out[32], std::span<const uint8_t> secret, const uint8_t* point) {
  return crypto_scalarmult(out, secret.data(), point) == 0;
}

// The 64 bytes of key material (see the header); the caller wipes it.
Result<SecureBuffer> Derive(const CurveKey& s_a, const CurveKey& s_b, std::string_view hello, const CurveKey& e_b,
                            const uint8_t ee[32], const uint8_t es[32], const uint8_t se[32]) {
  FM_ASSIGN_OR_RETURN(SecureBuffer out, SecureBuffer::Create(64));
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, 64);
  crypto_generichash_update(&st, reinterpret_cast<const uint8_t*>(kLabel), sizeof kLabel - 1);
  crypto_generichash_update(&st, s_a.data(), s_a.size());
  crypto_generichash_update(&st, s_b.data(), s_b.size());
  crypto_generichash_update(&st, reinterpret_cast<const uint8_t*>(hello.data()), hello.size());
  crypto_generichash_update(&st, e_b.data(), e_b.size());
  for (const uint8_t* d : {ee, es, se}) crypto_generichash_update(&st, d, 32);
  crypto_generichash_final(&st, out.data(), 64);
  sodium_memzero(&st, sizeof st);
  return out;
}

std::array<uint8_t, 32> WelcomeMac(const uint8_t* mac_key, const CurveKey& e_a, const CurveKey& e_b) {
  std::array<uint8_t, 32> mac{};
  crypto_generichash_state st;
  crypto_generichash_init(&st, mac_key, 32, mac.size());
  crypto_generichash_update(&st, e_a.data(), e_a.size());
  crypto_generichash_update(&st, e_b.data(), e_b.size());
  crypto_generichash_final(&st, mac.data(), mac.size());
  return mac;
}

Result<GcmPtr> MakeGcm(const uint8_t* key, bool seal) {
  GcmPtr g(new internal::Gcm());
  g->seal = seal;
  g->ctx = EVP_CIPHER_CTX_new();
  const int ok = g->ctx == nullptr ? 0
                 : seal           ? EVP_EncryptInit_ex(g->ctx, EVP_aes_256_gcm(), nullptr, key, nullptr)
                                  : EVP_DecryptInit_ex(g->ctx, EVP_aes_256_gcm(), nullptr, key, nullptr);
  if (ok != 1) return Status::Internal("sealed link: OpenSSL could not set up AES-256-GCM");
  return g;
}

// Starts one message under `counter`'s nonce, with the DATA prefix as associated data.
bool Begin(internal::Gcm& g, const uint8_t prefix[kDataPrefix], uint64_t counter) {
  uint8_t iv[12] = {};
  std::memcpy(iv + 4, &counter, 8);
  int len = 0;
  if (g.seal) {
    return EVP_EncryptInit_ex(g.ctx, nullptr, nullptr, nullptr, iv) == 1 &&
           EVP_EncryptUpdate(g.ctx, nullptr, &len, prefix, kDataPrefix) == 1;
  }
  return EVP_DecryptInit_ex(g.ctx, nullptr, nullptr, nullptr, iv) == 1 &&
         EVP_DecryptUpdate(g.ctx, nullptr, &len, prefix, kDataPrefix) == 1;
}

bool Update(internal::Gcm& g, const uint8_t* in, uint8_t* out, size_t n) {
  for (size_t at = 0; at < n; at += kPiece) {
    const int piece = static_cast<int>(std::min(kPiece, n - at));
    int len = 0;
    const int ok = g.seal ? EVP_EncryptUpdate(g.ctx, out + at, &len, in + at, piece)
                          : EVP_DecryptUpdate(g.ctx, out + at, &len, in + at, piece);
    if (ok != 1 || len != piece) return false;
  }
  return true;
}

Status Malformed(const std::string& why) { return Status::InvalidArgument("sealed link: " + why); }

}  // namespace

SealedFrameType SealedFrameTypeOf(std::string_view f) {
  if (f.size() < kPrefix || std::memcmp(f.data(), kMagic, 4) != 0 || static_cast<uint8_t>(f[4]) != kVersion ||
      f[6] != 0 || f[7] != 0) {
    return SealedFrameType::kInvalid;
  }
  switch (static_cast<uint8_t>(f[5])) {
    case kHello:
      return f.size() == kSealedHelloBytes ? SealedFrameType::kHello : SealedFrameType::kInvalid;
    case kWelcome:
      return f.size() == kSealedWelcomeBytes ? SealedFrameType::kWelcome : SealedFrameType::kInvalid;
    case kUnknown:
      return f.size() == kSealedUnknownBytes ? SealedFrameType::kUnknown : SealedFrameType::kInvalid;
    case kData:
      return f.size() == kSealedDataFrameBytes ? SealedFrameType::kData : SealedFrameType::kInvalid;
    default:
      return SealedFrameType::kInvalid;
  }
}

std::string SealedUnknownFrame() { return Prefix(kUnknown); }

SealedSender::~SealedSender() = default;

Result<SealedSender> SealedSender::Start(const Identity& me, int my_rank, uint64_t incarnation,
                                         const CurveKey& acceptor) {
  FM_RETURN_IF_ERROR(InitSodium());
  SealedSender s;
  s.me_ = &me;
  s.me_public_ = me.public_identity().curve_public;
  s.acceptor_ = acceptor;
  FM_ASSIGN_OR_RETURN(s.ephemeral_secret_, SecureBuffer::Create(32));
  randombytes_buf(s.ephemeral_secret_.data(), 32);
  crypto_scalarmult_base(s.ephemeral_public_.data(), s.ephemeral_secret_.data());
  s.hello_ = Prefix(kHello);
  s.hello_.resize(kSealedHelloBytes, '\0');
  const uint32_t rank = static_cast<uint32_t>(my_rank);
  std::memcpy(s.hello_.data() + 8, &rank, 4);
  std::memcpy(s.hello_.data() + 16, &incarnation, 8);
  std::memcpy(s.hello_.data() + 24, s.ephemeral_public_.data(), 32);
  return s;
}

Status SealedSender::Accept(std::string_view frame) {
  if (SealedFrameTypeOf(frame) != SealedFrameType::kWelcome) return Malformed("not a WELCOME frame");
  if (ephemeral_secret_.empty()) return Malformed("a WELCOME after the link was agreed");
  CurveKey e_b{};
  std::memcpy(e_b.data(), frame.data() + 8, 32);
  uint8_t ee[32], es[32], se[32];
  if (!Dh(ee, ephemeral_secret_.span(), e_b.data()) || !Dh(es, ephemeral_secret_.span(), acceptor_.data()) ||
      !Dh(se, me_->curve_secret(), e_b.data())) {
    return Malformed("WELCOME carries a low-order key");
  }
  auto keys = Derive(me_public_, acceptor_, hello_, e_b, ee, es, se);
  sodium_memzero(ee, 32);
  sodium_memzero(es, 32);
  sodium_memzero(se, 32);
  FM_RETURN_IF_ERROR(keys.status());
  const auto mac = WelcomeMac(keys->data() + 32, ephemeral_public_, e_b);
  if (sodium_memcmp(mac.data(), frame.data() + 40, 32) != 0) {
    return Malformed("WELCOME's MAC does not verify (not from the member dialled, or not to this HELLO)");
  }
  FM_ASSIGN_OR_RETURN(gcm_, MakeGcm(keys->data(), /*seal=*/true));
  ephemeral_secret_ = SecureBuffer();  // wiped: the link's key is all that is kept
  counter_ = 0;
  return Status::OK();
}

Result<std::string> SealedSender::Seal(std::string_view header, std::span<uint8_t> payload) {
  std::string f(kSealedDataFrameBytes, '\0');
  const std::string p = Prefix(kData);
  std::memcpy(f.data(), p.data(), kPrefix);
  std::memcpy(f.data() + 8, &counter_, 8);
  auto* u = reinterpret_cast<uint8_t*>(f.data());
  int len = 0;
  uint8_t none[16];  // GCM's final step writes nothing
  const bool ok = Begin(*gcm_, u, counter_) &&
                  Update(*gcm_, reinterpret_cast<const uint8_t*>(header.data()), u + kDataPrefix,
                         kSealedChunkHeaderBytes) &&
                  Update(*gcm_, payload.data(), payload.data(), payload.size()) &&
                  EVP_EncryptFinal_ex(gcm_->ctx, none, &len) == 1 &&
                  EVP_CIPHER_CTX_ctrl(gcm_->ctx, EVP_CTRL_GCM_GET_TAG, kTag, u + kDataPrefix + 48) == 1;
  if (!ok) return Status::Internal("sealed link: OpenSSL failed to seal a chunk");
  ++counter_;
  return f;
}

SealedReceiver::~SealedReceiver() = default;

Result<SealedReceiver> SealedReceiver::Accept(const Identity& me, std::span<const CurveKey> members,
                                              std::string_view hello) {
  FM_RETURN_IF_ERROR(InitSodium());
  if (SealedFrameTypeOf(hello) != SealedFrameType::kHello) return Malformed("not a HELLO frame");
  uint32_t rank = 0;
  std::memcpy(&rank, hello.data() + 8, 4);
  if (rank >= members.size() || hello[12] != 0 || hello[13] != 0 || hello[14] != 0 || hello[15] != 0) {
    return Malformed("HELLO claims rank " + std::to_string(rank) + " of a group of " + std::to_string(members.size()));
  }
  CurveKey e_a{};
  std::memcpy(e_a.data(), hello.data() + 24, 32);
  FM_ASSIGN_OR_RETURN(SecureBuffer e_secret, SecureBuffer::Create(32));
  randombytes_buf(e_secret.data(), 32);
  CurveKey e_b{};
  crypto_scalarmult_base(e_b.data(), e_secret.data());
  const CurveKey& s_a = members[rank];
  uint8_t ee[32], es[32], se[32];
  const bool ok = Dh(ee, e_secret.span(), e_a.data()) && Dh(es, me.curve_secret(), e_a.data()) &&
                  Dh(se, e_secret.span(), s_a.data());
  auto keys = ok ? Derive(s_a, me.public_identity().curve_public, hello, e_b, ee, es, se)
                 : Result<SecureBuffer>(Malformed("HELLO carries a low-order key"));
  sodium_memzero(ee, 32);
  sodium_memzero(es, 32);
  sodium_memzero(se, 32);
  FM_RETURN_IF_ERROR(keys.status());
  SealedReceiver r;
  r.rank_ = static_cast<int>(rank);
  std::memcpy(&r.incarnation_, hello.data() + 16, 8);
  r.welcome_ = Prefix(kWelcome);
  r.welcome_.resize(kSealedWelcomeBytes, '\0');
  std::memcpy(r.welcome_.data() + 8, e_b.data(), 32);
  const auto mac = WelcomeMac(keys->data() + 32, e_a, e_b);
  std::memcpy(r.welcome_.data() + 40, mac.data(), 32);
  FM_ASSIGN_OR_RETURN(r.gcm_, MakeGcm(keys->data(), /*seal=*/false));
  return r;
}

Result<std::string> SealedReceiver::Open(std::string_view frame, std::span<uint8_t> payload) {
  if (SealedFrameTypeOf(frame) != SealedFrameType::kData) return Malformed("not a DATA frame");
  uint64_t counter = 0;
  std::memcpy(&counter, frame.data() + 8, 8);
  if (counter != counter_) {
    return Malformed("chunk " + std::to_string(counter) + " where chunk " + std::to_string(counter_) +
                     " was next (replayed, lost or reordered)");
  }
  const auto* u = reinterpret_cast<const uint8_t*>(frame.data());
  std::string header(kSealedChunkHeaderBytes, '\0');
  uint8_t tag[kTag];
  std::memcpy(tag, u + kDataPrefix + 48, kTag);
  int len = 0;
  uint8_t none[16];
  const bool ok = Begin(*gcm_, u, counter) &&
                  Update(*gcm_, u + kDataPrefix, reinterpret_cast<uint8_t*>(header.data()), kSealedChunkHeaderBytes) &&
                  Update(*gcm_, payload.data(), payload.data(), payload.size()) &&
                  EVP_CIPHER_CTX_ctrl(gcm_->ctx, EVP_CTRL_GCM_SET_TAG, kTag, tag) == 1 &&
                  EVP_DecryptFinal_ex(gcm_->ctx, none, &len) == 1;
  if (!ok) return Malformed("chunk " + std::to_string(counter) + " does not verify (altered, or not from rank " +
                            std::to_string(rank_) + ")");
  ++counter_;
  return header;
}

}  // namespace fedmesh::collective
