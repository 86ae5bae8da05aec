// SecAggParticipant: a node's part in one secure aggregation round. It wraps a
// SecAggClient (crypto/secagg/secagg_client.h) for the round the FitTask named, holds the
// node's change to the global model until the masking stage, and turns the aggregator's
// SecAgg* messages into the node's replies, every one through the wire structs. The change
// itself never leaves the node: only its masked encoding does.
// Thread-safety: one thread of control (the client's event loop).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"
#include "crypto/secagg/secagg_client.h"

namespace fedmesh {

// A node's own floors on the secure aggregation a FitTask asks for ([secagg] min_clients,
// min_threshold, min_noise_stddev). The aggregator chooses the settings, so without them an
// honest-but-curious aggregator that turns malicious could shrink the crowd an update hides
// in (a roster of 2), the Shamir threshold, or the distributed-DP noise.
struct SecAggFloors {
  // The task's min_clients (the roster and survivor floor the protocol enforces) must be
  // at least this. Default: 3. >= 2.
  size_t min_clients = 3;
  // The lowest Shamir threshold the task allows (its explicit threshold, or the protocol's
  // default rule for its smallest roster) must be at least this. Default: 0 (no floor
  // beyond the protocol's).
  uint32_t min_threshold = 0;
  // The task's noise_stddev (distributed DP) must be at least this. Default: 0.
  double min_noise_stddev = 0.0;
};

// OK when `options` (from a FitTask) meet `floors`; FailedPrecondition naming the setting,
// both values and the [secagg] key otherwise.
Status CheckSecAggFloors(const SecAggOptions& options, const SecAggFloors& floors);

// The (round, statistics?) slots this site has sent a masked input for. Masking the same
// change again under another roster (an aggregator retrying the round without one member)
// would let the difference of the two sums reveal that member's update, so a participant
// refuses to mask a second input for a slot it finds here.
using MaskLedger = std::set<std::pair<uint64_t, bool>>;

class SecAggParticipant {
 public:
  // Starts this node's part in the secure aggregation `task` asks for, with `update` (the
  // node's change to the global model). `allowlist`: the sites whose signed keys this node
  // accepts in the roster. InvalidArgument / FailedPrecondition for settings the protocol
  // refuses or a task without secure aggregation.
  // The task is refused (FailedPrecondition) when its settings fall below `floors`.
  static Result<SecAggParticipant> Start(const wire::Header& header, const wire::FitTask& task,
                                         const Identity& identity,
                                         std::span<const PublicIdentity> allowlist,
                                         std::vector<float> update,
                                         const SecAggFloors& floors = {},
                                         MaskLedger* ledger = nullptr);

  // As Start, for an input already encoded in Z_2^32 (federated statistics' exact sums,
  // core/stats/secure_sums.h): `words` must have the task's vector size. floors.min_noise_stddev
  // does not apply: the sums are exact by design.
  static Result<SecAggParticipant> StartEncoded(const wire::Header& header, const wire::FitTask& task,
                                                const Identity& identity,
                                                std::span<const PublicIdentity> allowlist,
                                                std::vector<uint32_t> words,
                                                const SecAggFloors& floors = {},
                                                MaskLedger* ledger = nullptr);

  uint64_t round() const { return round_; }
  // Stage 0: the signed keys to send first.
  wire::Body advertisement() const;
  // The aggregator's roster, forwarded shares or unmask request: the reply to send. An
  // error when the message is malformed, out of order or fails a check (a bad signature in
  // the roster, a box that does not open), or when the ledger (Start) shows this site
  // already masked an input for the round (FailedPrecondition); the round is then over for
  // this node.
  Result<wire::Body> OnMessage(const wire::Body& body);
  // The node has sent its last message for the round.
  bool finished() const { return finished_; }

 private:
  SecAggParticipant(SecAggClient client, uint64_t round, std::vector<float> update,
                    MaskLedger* ledger)
      : client_(std::move(client)), round_(round), update_(std::move(update)), ledger_(ledger) {}

  SecAggClient client_;
  uint64_t round_;
  std::vector<float> update_;     // wiped once masked
  std::vector<uint32_t> encoded_;  // StartEncoded's input instead of update_; wiped once masked
  bool encoded_input_ = false;
  MaskLedger* ledger_ = nullptr;  // not owned; may be null
  bool finished_ = false;
};

// Whether `body` is a message the aggregator sends in secure aggregation.
bool IsSecAggServerMessage(const wire::Body& body);

}  // namespace fedmesh
