// SecAggRound: the aggregator's side of one secure-aggregation round as the round engine
// drives it. It owns a SecAggServer (crypto/secagg/secagg_server.h) for the round's
// selection, takes the nodes' SecAgg* wire messages (checking that each names the
// authenticated peer as its sender before converting it), and when the engine closes a
// stage (every expected message arrived, or the stage's deadline passed) turns the
// server's outbox into wire messages for the nodes; after the last stage it hands back the
// sum of the contributors' clipped, fixed-point-encoded updates. It never sees an update in
// the clear.
// Thread-safety: one thread of control (the engine's).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"
#include "crypto/secagg/secagg_messages.h"
#include "crypto/secagg/secagg_server.h"

namespace fedmesh {

// The round engine's secure aggregation settings (config [secagg]).
struct SecAggSettings {
  // Off by default: updates travel as FitResults and the aggregator sees each one.
  bool enabled = false;
  // Shamir threshold and graph degree; 0 = the SecAgg+ defaults for the round's roster
  // (crypto/secagg/secagg_options.h).
  uint32_t threshold = 0;
  uint32_t neighbours = 0;
  // Every update's change is L2-clipped to `clip` and encoded with `bits` bits per
  // coordinate before masking. Defaults 1.0 and 16.
  double clip = 1.0;
  uint32_t bits = 16;
  // Distributed DP: the Gaussian noise each node adds before masking (update units);
  // [dp] mode = "distributed" sets it. Default 0: none.
  double noise_stddev = 0.0;
  // Seconds each stage after the first (which starts with training) waits for the nodes'
  // messages before it closes with those that came. > 0. Default: 60.
  double stage_timeout_s = 60.0;
  // The enrolled nodes' identities: a node's advertised keys must carry its signature.
  std::vector<PublicIdentity> allowlist;
};

class SecAggRound {
 public:
  // A round over `selected` (those of them on the allowlist take part). InvalidArgument for
  // settings the protocol refuses (e.g. a threshold at most half the degree).
  static Result<SecAggRound> Open(const SecAggSettings& settings, std::string federation_id,
                                  uint64_t round, size_t vector_size, size_t min_clients,
                                  std::span<const std::string> selected);

  // What the FitTask tells the nodes.
  const wire::SecAggParameters& parameters() const { return parameters_; }
  SecAggStage stage() const { return server_.stage(); }
  // Every message the open stage can still get has come: the engine may close it now.
  bool StageComplete() const { return server_.accepted() == server_.expected(); }

  // A node's SecAgg* message, from the authenticated peer `from`. OK when the server took
  // it; otherwise why not (a sender other than `from`, a malformed field, a message for a
  // stage that is not open, a duplicate...), with nothing changed.
  Status OnMessage(const std::string& from, const wire::Body& body);

  // What closing a stage produced: messages for the nodes, and after the last stage the
  // result. `masked_bytes`: the masked inputs' payload bytes, for the round's metrics.
  struct Step {
    SecAggStage closed = SecAggStage::kAdvertiseKeys;
    std::vector<std::pair<std::string, wire::Body>> sends;
    std::optional<SecAggResult> result;
  };
  // FailedPrecondition (nothing changed) when the stage cannot close: too few messages, or
  // too few shares to rebuild a needed secret; Corruption when shares rebuild a key that
  // is not the one its owner advertised.
  Result<Step> Close();
  // SecAggServer::Withdraw.
  bool Withdraw(std::string_view node) { return server_.Withdraw(node); }
  // SecAggServer::Revoke.
  bool Revoke(std::string_view node) { return server_.Revoke(node); }

  uint64_t masked_bytes() const { return masked_bytes_; }
  // The record_privacy of each accepted masked input (the sum's contributors), by node.
  const std::map<std::string, wire::RecordPrivacyReport>& record_privacy() const {
    return record_privacy_;
  }

 private:
  SecAggRound(SecAggServer server, wire::SecAggParameters parameters)
      : server_(std::move(server)), parameters_(std::move(parameters)) {}

  SecAggServer server_;
  wire::SecAggParameters parameters_;
  uint64_t masked_bytes_ = 0;
  std::map<std::string, wire::RecordPrivacyReport> record_privacy_;
};

}  // namespace fedmesh
