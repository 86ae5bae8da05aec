// SecAggClient: one client's side of a secure aggregation round (SecAgg+, Bonawitz et al.
// 2017 with the sparse graph of Bell et al. 2020), as a sans-IO state machine: each
// method takes the server's message for a stage and returns this client's reply, and the
// caller carries the messages however it likes (ZeroMQ, the simulator, a test loop).
//
//   advertisement()        stage 0: fresh channel and masking keys, signed by the identity
//   OnRoster()             stage 1: shares of b_u and s_sk_u, sealed for each neighbour
//   OnForwardedShares()    stage 2: y_u = encode(x_u) + PRG(b_u) +- PRG(s_uv) (mod 2^32)
//   OnUnmaskRequest()      stage 3: shares of b_u for survivors, of s_sk_u for the dropped
//
// The client checks everything it is sent: a refused message returns a Status naming the
// problem and leaves the client exactly as it was, so the genuine message can still be
// handled. It never reveals, for one neighbour, shares of both secrets (that would let the
// server unmask that neighbour), and it wipes each secret as soon as no later stage needs
// it. Time is the caller's business: a client that misses a stage is simply dropped.
// Thread-safety: not thread-safe; one thread (or strand) drives a client.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "crypto/identity.h"
#include "crypto/secagg/fixed_point.h"
#include "crypto/secagg/key_agreement.h"
#include "crypto/secagg/secagg_graph.h"
#include "crypto/secagg/secagg_messages.h"
#include "crypto/secagg/secagg_options.h"
#include "crypto/secagg/secure_random.h"
#include "crypto/secure_buffer.h"

namespace fedmesh {

class SecAggClient {
 public:
  // A client for `options`' round whose id is identity.name(). `allowlist` holds the
  // enrolled identity of every client that may take part (this one included); roster
  // signatures are checked against it. `rng` draws every secret; null means SodiumRandom.
  // InvalidArgument for bad options, an allowlist with a name twice, or an identity that is
  // not on it (PermissionDenied when the name is there with other keys); Internal when
  // libsodium cannot start. The identity is used only here, to sign the advertisement.
  static Result<SecAggClient> Create(SecAggOptions options, const Identity& identity,
                                     std::span<const PublicIdentity> allowlist,
                                     std::unique_ptr<SecureRandom> rng = nullptr);

  SecAggClient(SecAggClient&&) noexcept = default;
  SecAggClient& operator=(SecAggClient&&) noexcept = default;

  const std::string& id() const { return advertisement_.client_id; }
  // The stage whose reply this client sent last: kAdvertiseKeys until it accepts a roster,
  // then kShareKeys, kMaskedInput, and kFinished once it has answered the unmask request.
  SecAggStage stage() const { return stage_; }

  // Stage 0: this client's signed public keys. The same message on every call (resend it
  // freely); the keys were made by Create.
  const AdvertiseKeys& advertisement() const { return advertisement_; }

  // Stage 1. Checks the roster (federation and round; every member on the allowlist, once,
  // with a valid signature; this client present with its own keys; enough members for the
  // threshold and min_clients), builds the round's graph, and returns one sealed box of
  // shares per neighbour. InvalidArgument: wrong round/federation, a duplicate member, a
  // low-order key; PermissionDenied: a member not on the allowlist or a bad signature;
  // FailedPrecondition: called out of order, or a roster too small.
  Result<ShareKeys> OnRoster(const Roster& roster);

  // Stage 2. Opens the boxes from this client's neighbours in U1, encodes `update`
  // (fixed_point.h) and returns it masked. InvalidArgument: wrong round/federation/
  // recipient, a box from a non-neighbour or twice from one, an update of the wrong length
  // or not finite; Corruption: a box that fails authentication; FailedPrecondition: called
  // out of order, or fewer neighbours in U1 than the threshold (this client's masks could
  // then never be removed, so it keeps its input to itself).
  Result<MaskedInput> OnForwardedShares(const ForwardedShares& shares,
                                        std::span<const float> update);
  // As OnForwardedShares, for an input already encoded in Z_2^32 (vector_size words): for
  // callers that add their own noise or encoding, and for tests of exact sums.
  Result<MaskedInput> OnForwardedSharesEncoded(const ForwardedShares& shares,
                                               std::span<const uint32_t> encoded);

  // Stage 3. Returns, for each neighbour u that sent this client its shares: the share of
  // b_u if u is listed as a survivor, of s_sk_u if u is listed as dropped. InvalidArgument:
  // wrong round/federation, a name not in the roster or listed twice, a neighbour listed
  // that never shared keys with this client; FailedPrecondition: called out of order, a
  // client listed as both survivor and dropped, this client not listed as a survivor, or
  // fewer survivors than min_clients.
  Result<UnmaskShares> OnUnmaskRequest(const UnmaskRequest& request);

 private:
  // What this client knows about one graph neighbour.
  struct Neighbour {
    uint32_t index = 0;  // in the graph
    // x-coordinate of this client's share of the neighbour's secrets: its rank in the
    // neighbour's sorted neighbour list, plus one.
    uint8_t my_x = 0;
    bool in_u1 = false;  // it sent this client a box in stage 1
  };

  SecAggClient() = default;
  Status CheckRoundOf(std::string_view what, std::string_view federation_id, uint64_t round) const;
  Result<MaskedInput> MaskInput(const ForwardedShares& shares, std::span<const uint32_t> encoded);

  SecAggOptions options_;
  FixedPointOptions fixed_point_;
  std::map<std::string, PublicIdentity, std::less<>> allowlist_;
  std::unique_ptr<SecureRandom> rng_;
  SecAggStage stage_ = SecAggStage::kAdvertiseKeys;
  CurveKeyPair channel_;  // c_pk / c_sk
  CurveKeyPair masking_;  // s_pk / s_sk
  AdvertiseKeys advertisement_;

  // Set by OnRoster.
  std::optional<SecAggGraph> graph_;
  uint32_t my_index_ = 0;
  uint32_t threshold_ = 0;
  std::vector<Neighbour> neighbours_;  // in the order of graph_->Neighbours(my_index_)
  // Per neighbour, same order, 32 bytes each, until stage 2: the share-box key (so the
  // channel secret key can go as soon as the boxes are sealed) and s_uv.
  SecureBuffer box_keys_;
  SecureBuffer pair_seeds_;
  SecureBuffer self_mask_seed_;  // b_u, until stage 2
  // Set by OnForwardedShares: this client's b-share || s_sk-share of each neighbour in U1,
  // kShareBoxPlaintextSize bytes per neighbour slot, until stage 3.
  SecureBuffer held_shares_;
};

}  // namespace fedmesh
