// SecAggServer: the server's side of a secure aggregation round (SecAgg+), as a sans-IO
// state machine. It takes client messages through On*() and, when the caller closes a
// stage (on a deadline, or once accepted() == expected()), returns what to send to whom:
//
//   stage 0 AdvertiseKeys  OnAdvertise      -> CloseStage: the Roster, to every member
//   stage 1 ShareKeys      OnShares         -> CloseStage: ForwardedShares, one per client in U1
//   stage 2 MaskedInput    OnMaskedInput    -> CloseStage: the UnmaskRequest, to every client in U2
//   stage 3 Unmasking      OnUnmaskShares   -> CloseStage: the SecAggResult
//
// It relays sealed shares it cannot open, sums masked inputs it cannot read, and at the
// end rebuilds from neighbours' shares exactly the secrets needed to remove the masks: b_u
// of every client that sent its input (U2), s_sk_u of every client that shared keys but
// did not (U1 \ U2). The output is sum_{u in U2} encode(x_u) in Z_2^32; a client that
// drops after sending its input is still in it. If some needed secret has fewer than t
// shares, CloseStage fails with FailedPrecondition naming the client: never a partial or
// wrong sum.
// Every incoming message is checked before anything is kept: a refused message returns a
// Status naming the problem and leaves the server exactly as it was. A failed CloseStage
// also changes nothing (more messages may still arrive; the caller decides when to give
// the round up).
// Thread-safety: not thread-safe; one thread (or strand) drives a server.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "crypto/identity.h"
#include "crypto/secagg/fixed_point.h"
#include "crypto/secagg/secagg_graph.h"
#include "crypto/secagg/secagg_messages.h"
#include "crypto/secagg/secagg_options.h"
#include "crypto/secagg/secure_random.h"

namespace fedmesh {

// What CloseStage() asks the caller to send; which fields are set depends on `closed`.
struct SecAggOutbox {
  // The stage this call closed.
  SecAggStage closed = SecAggStage::kAdvertiseKeys;
  // The clients that go on to the next stage, sorted: the roster's members, then U1,
  // then U2. Empty once the round is finished.
  std::vector<std::string> recipients;
  // Closed AdvertiseKeys: send *roster to every recipient (one object, shared, since it
  // is the same for all).
  std::shared_ptr<const Roster> roster;
  // Closed ShareKeys: one message per recipient, in the same order.
  std::vector<ForwardedShares> forwarded_shares;
  // Closed MaskedInput: send *unmask_request to every recipient.
  std::shared_ptr<const UnmaskRequest> unmask_request;
  // Closed Unmasking: the aggregate.
  std::optional<SecAggResult> result;
};

class SecAggServer {
 public:
  // A server for `options`' round, admitting the clients on `allowlist`. `rng` draws the
  // public graph seed; null means SodiumRandom. InvalidArgument for bad options or a name
  // twice on the allowlist; Internal when libsodium cannot start.
  static Result<SecAggServer> Create(SecAggOptions options,
                                     std::span<const PublicIdentity> allowlist,
                                     std::unique_ptr<SecureRandom> rng = nullptr);

  SecAggServer(SecAggServer&&) noexcept = default;
  SecAggServer& operator=(SecAggServer&&) noexcept = default;

  // The stage now collecting messages (kFinished once the result is out).
  SecAggStage stage() const { return stage_; }
  // Messages accepted in the open stage, and how many could arrive at most (the
  // allowlist, then the roster, U1 and U2): a caller may close early when they are equal.
  size_t accepted() const;
  size_t expected() const;

  // Each On* method accepts one client message for the open stage, or refuses it with:
  // InvalidArgument for the wrong federation/round or malformed content (a low-order
  // public key, wrong vector length, a box for a non-neighbour, a share with the wrong x,
  // kind or length);
  // PermissionDenied for a sender not on the allowlist or a bad key signature;
  // FailedPrecondition for a stage that is not open, or a sender that did not take part in
  // the previous stage; AlreadyExists for a second message from one sender.
  Status OnAdvertise(const AdvertiseKeys& message);
  Status OnShares(const ShareKeys& message);
  Status OnMaskedInput(const MaskedInput& message);
  Status OnUnmaskShares(const UnmaskShares& message);

  // Closes the open stage. FailedPrecondition (state unchanged) when it cannot close:
  // fewer than min_clients advertised / shared keys / sent inputs, a roster too small for
  // the threshold, or (closing Unmasking) a needed secret with fewer than t shares.
  // Corruption when shares rebuild a masking key that does not match the key its owner
  // advertised (a neighbour sent a bad share).
  // Closing ShareKeys leaves out of U1 every client with fewer than t neighbours in U1
  // (repeatedly, as each removal lowers its neighbours' counts): such a client could not
  // safely send its input, and its masking key could not be rebuilt, so keeping it would
  // only make the round fail at the end.
  Result<SecAggOutbox> CloseStage();

  // `client` will not take part (its node reported that it failed its task): while keys
  // are being advertised and it has sent none, it leaves the allowlist, so the stage can
  // close without waiting for it. True when it was withdrawn; false (nothing changed) in
  // later stages, where SecAgg+ handles a dropout by itself, or after it advertised.
  bool Withdraw(std::string_view client);

  // `client` was revoked (its key left the federation): no message of it is accepted any
  // more, and the open stage no longer counts on one (expected() drops), so it can close
  // without waiting for the deadline. What it sent before stays: SecAgg+ treats it from
  // here on as a client that dropped out. Before the roster is made it simply leaves it.
  // True when the open stage's counts changed (the caller may see whether it can close
  // now); false when it was unknown, already revoked, or had already sent for the stage.
  bool Revoke(std::string_view client);

 private:
  struct CollectedShare {
    uint8_t x = 0;
    std::array<uint8_t, kSecAggSecretSize> y{};
  };

  SecAggServer() = default;
  Status CheckMessage(std::string_view what, SecAggStage stage, std::string_view federation_id,
                      uint64_t round, std::string_view sender) const;
  // The graph index of `sender`, if it is in the roster and in `members` (by index).
  Result<uint32_t> RosterIndex(std::string_view what, std::string_view sender,
                               const std::vector<bool>* members, std::string_view set) const;
  Result<SecAggOutbox> CloseAdvertiseKeys();
  Result<SecAggOutbox> CloseShareKeys();
  Result<SecAggOutbox> CloseMaskedInput();
  Result<SecAggOutbox> CloseUnmasking();
  std::vector<std::string> Members(const std::vector<bool>& in) const;
  // Revoked clients the open stage still counted on: in `members` (every roster member
  // when null) and not marked in `sent`.
  size_t RevokedWaitedFor(const std::vector<bool>* members, const std::vector<bool>& sent) const;

  SecAggOptions options_;
  FixedPointOptions fixed_point_;
  std::map<std::string, PublicIdentity, std::less<>> allowlist_;
  std::set<std::string, std::less<>> revoked_;  // off allowlist_ too
  std::unique_ptr<SecureRandom> rng_;
  SecAggStage stage_ = SecAggStage::kAdvertiseKeys;

  // Stage 0.
  std::map<std::string, AdvertiseKeys, std::less<>> advertised_;
  // From the close of stage 0 on.
  std::shared_ptr<const Roster> roster_;  // members in graph index order
  std::optional<SecAggGraph> graph_;
  uint32_t threshold_ = 0;
  // Stage 1: boxes_[u][r] is u's box for its neighbour of rank r.
  std::vector<std::vector<std::vector<uint8_t>>> boxes_;
  std::vector<bool> in_u1_;
  // Stage 2.
  std::vector<bool> in_u2_;
  std::vector<uint32_t> masked_sum_;  // sum of y_u over U2, mod 2^32
  // Stage 3: shares of b_u (u in U2) or s_sk_u (u in U1 \ U2), by owner index.
  std::vector<bool> unmasked_;
  std::vector<std::vector<CollectedShare>> shares_;
};

}  // namespace fedmesh
