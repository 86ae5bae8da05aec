// The messages of secure aggregation (SecAgg+), as plain structs: what a transport or the
// simulator carries between SecAggClient and SecAggServer. The server relays everything
// (clients never talk directly); what it must not read travels sealed (share_box.h).
// Every message names its federation and round, and every client message its sender, so
// that a message of another round or federation is refused rather than mixed in.
//
//   stage             client -> server       server -> clients (on CloseStage)
//   0 AdvertiseKeys   AdvertiseKeys          Roster (to every member)
//   1 ShareKeys       ShareKeys              ForwardedShares (one per client in U1)
//   2 MaskedInput     MaskedInput            UnmaskRequest (to every client in U2)
//   3 Unmasking       UnmaskShares           - (the server has the sum)
//
// Conversion to and from the wire (protobuf) belongs in one place at the edge, as for
// every fedmesh message family; nothing here depends on it.
// Thread-safety: plain values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "crypto/identity.h"
#include "crypto/secagg/secagg_graph.h"
#include "crypto/secagg/share_box.h"

namespace fedmesh {

enum class SecAggStage {
  kAdvertiseKeys = 0,
  kShareKeys = 1,
  kMaskedInput = 2,
  kUnmasking = 3,
  kFinished = 4,  // the sum is out (server) / the client has nothing left to send
};
std::string_view SecAggStageName(SecAggStage stage);

// Each client shares two 32-byte secrets: its self-mask seed b_u and its masking secret
// key s_sk_u. A share box carries both shares for one neighbour: b share || s_sk share.
inline constexpr size_t kSecAggSecretSize = 32;
inline constexpr size_t kShareBoxPlaintextSize = 2 * kSecAggSecretSize;
inline constexpr size_t kShareBoxSize = kShareBoxOverhead + kShareBoxPlaintextSize;

// Stage 0, client -> server: two fresh X25519 public keys, signed with the client's
// long-term Ed25519 identity over AdvertiseSignedBytes(...).
struct AdvertiseKeys {
  std::string federation_id;
  uint64_t round = 0;
  std::string client_id;
  CurveKey channel_public_key{};  // c_pk: keys the share boxes
  CurveKey masking_public_key{};  // s_pk: keys the pairwise masks
  Signature signature{};
};

// The bytes an AdvertiseKeys signature covers: the domain "fedmesh-secagg-advertise-v1",
// federation, round (8 bytes LE), client id, c_pk, s_pk; strings length-prefixed (4 bytes
// LE). A verifier builds them from its own federation and round, not the message's.
std::vector<uint8_t> AdvertiseSignedBytes(std::string_view federation_id, uint64_t round,
                                          std::string_view client_id,
                                          const CurveKey& channel_public_key,
                                          const CurveKey& masking_public_key);

// Stage 0 close, server -> every member: everyone's signed keys (sorted by client_id) and
// the public seed of the round's graph.
struct Roster {
  std::string federation_id;
  uint64_t round = 0;
  std::vector<AdvertiseKeys> members;
  std::array<uint8_t, kGraphSeedSize> graph_seed{};
};

// One sealed pair of shares from `from` to `to` (kShareBoxSize bytes).
struct SealedShares {
  std::string from;
  std::string to;
  std::vector<uint8_t> box;
};

// Stage 1, client -> server: one box per graph neighbour.
struct ShareKeys {
  std::string federation_id;
  uint64_t round = 0;
  std::string client_id;
  std::vector<SealedShares> boxes;
};

// Stage 1 close, server -> one client in U1: the boxes its neighbours in U1 sealed for it.
// The senders listed are exactly the recipient's neighbours in U1, which is how a client
// learns whom to mask against.
struct ForwardedShares {
  std::string federation_id;
  uint64_t round = 0;
  std::string recipient;
  std::vector<SealedShares> boxes;
};

// Stage 2, client -> server: y_u = encode(x_u) + PRG(b_u) +- PRG(s_uv) ... mod 2^32.
struct MaskedInput {
  std::string federation_id;
  uint64_t round = 0;
  std::string client_id;
  std::vector<uint32_t> masked;
};

// Stage 2 close, server -> every client in U2: who sent a masked input (U2) and who
// shared keys but did not (U1 \ U2), both sorted.
struct UnmaskRequest {
  std::string federation_id;
  uint64_t round = 0;
  std::vector<std::string> survivors;
  std::vector<std::string> dropped;
};

enum class SecretKind : uint8_t {
  kSelfMaskSeed = 0,  // b_u, revealed for survivors so their self-masks can be removed
  kMaskingKey = 1,    // s_sk_u, revealed for dropped clients so their pairwise masks can be
};
std::string_view SecretKindName(SecretKind kind);

// 'id', as the secagg error messages name a client.
std::string QuotedId(std::string_view id);

// One share a client reveals: of `owner`'s secret `kind`, at x-coordinate `x`.
struct RevealedShare {
  std::string owner;
  SecretKind kind = SecretKind::kSelfMaskSeed;
  uint8_t x = 0;
  std::vector<uint8_t> y;  // kSecAggSecretSize bytes
};

// Stage 3, client -> server: one share per neighbour in U1 (of b for survivors, of s_sk
// for dropped ones).
struct UnmaskShares {
  std::string federation_id;
  uint64_t round = 0;
  std::string client_id;
  std::vector<RevealedShare> shares;
};

// What the server outputs once the round completes.
struct SecAggResult {
  // sum over contributors of encode(x_u), in Z_2^32.
  std::vector<uint32_t> sum;
  // sum decoded to floats (DecodeFixedPointSum); divide by contributors.size() for the mean.
  std::vector<float> decoded_sum;
  // U2, sorted: whose inputs the sum holds.
  std::vector<std::string> contributors;
};

}  // namespace fedmesh
