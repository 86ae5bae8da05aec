#include "crypto/secagg/key_agreement.h"

#include <sodium.h>

#include <string>
#include <utility>

#include "crypto/sodium.h"

namespace fedmesh {
namespace {

void HashLengthPrefixed(crypto_generichash_state& state, std::string_view bytes) {
  const uint32_t len = static_cast<uint32_t>(bytes.size());
  const uint8_t prefix[4] = {static_cast<uint8_t>(len), static_cast<uint8_t>(len >> 8),
                             static_cast<uint8_t>(len >> 16), static_cast<uint8_t>(len >> 24)};
  crypto_generichash_update(&state, prefix, sizeof(prefix));
  crypto_generichash_update(&state, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// X25519 into `out`; the error names `their_id`.
Status ScalarMult(std::span<const uint8_t> my_secret_key, const CurveKey& their_public_key,
                  std::string_view their_id, uint8_t* out) {
  FM_RETURN_IF_ERROR(InitSodium());
  if (my_secret_key.size() != crypto_scalarmult_SCALARBYTES) {
    return Status::InvalidArgument("an X25519 secret key is 32 bytes, not " +
                                   std::to_string(my_secret_key.size()));
  }
  // crypto_scalarmult fails exactly when the result is the all-zero point.
  if (crypto_scalarmult(out, my_secret_key.data(), their_public_key.data()) != 0) {
    return Status::InvalidArgument("the X25519 public key of '" + std::string(their_id) +
                                   "' is a low-order point; no secret can be agreed with it");
  }
  return Status::OK();
}

}  // namespace

Result<CurveKeyPair> CurveKeyPair::Generate(SecureRandom& rng) {
  FM_RETURN_IF_ERROR(InitSodium());
  CurveKeyPair pair;
  FM_ASSIGN_OR_RETURN(pair.secret_key, SecureBuffer::Create(crypto_scalarmult_SCALARBYTES));
  rng.Fill(pair.secret_key.span());
  if (crypto_scalarmult_base(pair.public_key.data(), pair.secret_key.data()) != 0) {
    return Status::Internal("libsodium failed to derive an X25519 public key");
  }
  return pair;
}

Result<SecureBuffer> SharedPoint(std::span<const uint8_t> my_secret_key,
                                 const CurveKey& their_public_key, std::string_view their_id) {
  FM_ASSIGN_OR_RETURN(SecureBuffer point, SecureBuffer::Create(crypto_scalarmult_BYTES));
  FM_RETURN_IF_ERROR(ScalarMult(my_secret_key, their_public_key, their_id, point.data()));
  return point;
}

Result<SecureBuffer> PairwiseMaskSeed(std::span<const uint8_t> my_secret_key,
                                      const CurveKey& their_public_key, uint64_t round,
                                      std::string_view my_id, std::string_view their_id) {
  FM_ASSIGN_OR_RETURN(SecureBuffer seed, SecureBuffer::Create(32));
  FM_RETURN_IF_ERROR(PairwiseMaskSeedInto(my_secret_key, their_public_key, round, my_id, their_id,
                                          seed.span().first<32>()));
  return seed;
}

Status PairwiseMaskSeedInto(std::span<const uint8_t> my_secret_key,
                            const CurveKey& their_public_key, uint64_t round,
                            std::string_view my_id, std::string_view their_id,
                            std::span<uint8_t, 32> out) {
  // The shared point lives on the stack only for this call and is wiped before return,
  // as libsodium does with its own temporaries.
  uint8_t point[crypto_scalarmult_BYTES];
  FM_RETURN_IF_ERROR(ScalarMult(my_secret_key, their_public_key, their_id, point));
  const bool mine_first = my_id < their_id;
  const std::string_view lo = mine_first ? my_id : their_id;
  const std::string_view hi = mine_first ? their_id : my_id;

  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, out.size());
  HashLengthPrefixed(state, kPairwiseSeedDomain);
  uint8_t round_le[8];
  for (size_t i = 0; i < 8; ++i) round_le[i] = static_cast<uint8_t>(round >> (8 * i));
  crypto_generichash_update(&state, round_le, sizeof(round_le));
  HashLengthPrefixed(state, lo);
  HashLengthPrefixed(state, hi);
  crypto_generichash_update(&state, point, sizeof(point));
  crypto_generichash_final(&state, out.data(), out.size());
  sodium_memzero(&state, sizeof(state));
  sodium_memzero(point, sizeof(point));
  return Status::OK();
}

}  // namespace fedmesh
