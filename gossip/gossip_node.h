// GossipNode: one peer of a serverless federation, as a sans-IO state machine. It composes
// SWIM membership (gossip/membership.h), an averaging protocol (gossip/averager.h), model
// signatures (gossip/signed_model.h) and replay protection (gossip/replay_window.h), and
// owns the life cycle a node goes through:
//   joining   membership joins through the seeds; a node with no checkpoint pulls the
//             current model from a live neighbour before it trains (or, when nobody answers
//             within join_pull_timeout_s, starts from its own initial model: the first node);
//             only a neighbour it asked can answer, and only until it adopts an answer;
//   running   every period_s the driver trains on params() and calls Tick(), which mixes
//             with neighbours' models by the configured protocol.
// Every GossipModel it sends is signed and numbered; every one it receives must come from
// an allowlisted id (as authenticated by the transport), carry that member's valid
// signature and a sequence number it has not seen, or it is dropped and counted by cause.
// The driver (node/gossip_service.h over ZeroMQ; the simulator over InProcessNetwork) moves
// messages and calls OnTimer at NextTimerAt(); the node reads time and randomness only
// through its Env. Thread-safety: one thread drives a GossipNode.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"
#include "gossip/averager.h"
#include "gossip/membership.h"
#include "gossip/replay_window.h"
#include "storage/node_store.h"

namespace fedmesh {

struct GossipNodeOptions {
  // Federation every message names. Required (wire id rules).
  std::string federation_id;
  // This site's graph hash (core/graph), sent with every model; a model whose sender runs
  // another graph is dropped (GossipDrops::wrong_model). Default: empty (a built-in model).
  std::string model_sha256;
  MembershipOptions membership;
  AveragingOptions averaging;
  // Seconds between gossip steps (config [gossip] period_ms). Default: 1 s.
  double period_s = 1.0;
  // A node without a checkpoint waits at most this long for a neighbour's model before it
  // trains from its own initial model. Default: 5 s.
  double join_pull_timeout_s = 5.0;
  // First sequence number to sign with. The driver passes a value above both the
  // checkpoint's and the wall clock in microseconds, so a restart never reuses one.
  // Default: 1.
  uint64_t first_sequence = 1;
};

Status Validate(const GossipNodeOptions& options);

// Messages dropped, by cause. Each is a message that reached OnMessage and changed nothing.
struct GossipDrops {
  uint64_t wrong_federation = 0;  // header names another federation
  uint64_t spoofed_sender = 0;    // header sender differs from the authenticated peer
  uint64_t not_allowlisted = 0;   // sender (or a member it vouches for) not in the allowlist
  uint64_t unsigned_model = 0;
  uint64_t bad_signature = 0;
  uint64_t replayed = 0;          // sequence number seen before (or older than the window)
  uint64_t malformed = 0;         // undecodable or misshapen payload, unexpected type
  uint64_t wrong_model = 0;       // the sender runs another model graph (model_sha256)
  uint64_t unsolicited = 0;       // a PullReply this node did not ask that peer for, or no
                                  // longer waits for (it adopted another or started alone)
  uint64_t total() const {
    return wrong_federation + spoofed_sender + not_allowlisted + unsigned_model + bad_signature +
           replayed + malformed + wrong_model + unsolicited;
  }
};

struct GossipSend {
  std::string to;  // member id; the driver finds its endpoint with AddressOf
  wire::Message message;
};

class GossipNode {
 public:
  // `identity` signs every model and must outlive the node; its name is the node's id and
  // must be in `allowlist`. `initial_model` is used when `restored` is null and no
  // neighbour answers the join pull. `restored`: the node store's checkpoint, or null.
  static Result<std::unique_ptr<GossipNode>> Create(const GossipNodeOptions& options,
                                                    const Identity& identity,
                                                    std::string endpoint,
                                                    std::vector<PublicIdentity> allowlist,
                                                    std::vector<Seed> seeds,
                                                    std::vector<float> initial_model, Env& env,
                                                    const NodeCheckpoint* restored);

  // A whole message from `from`, the id the transport authenticated. OK when it was used;
  // otherwise the reason it was dropped (also counted in drops()).
  Status OnMessage(const std::string& from, const wire::Message& message);
  // Membership timers and join progress at env.NowSeconds().
  void OnTimer();
  // When OnTimer or Tick next has work: the driver waits at most until then.
  double NextTimerAt() const;
  // True when the node is running and its next gossip step is due: the driver trains its
  // local steps on params(), then calls Tick().
  bool TickDue() const;
  void Tick();
  std::vector<GossipSend> TakeSends();

  bool running() const { return running_; }
  std::span<float> params() { return averager_->params(); }
  std::span<const float> params() const { return averager_->params(); }
  uint64_t step() const { return averager_->step(); }
  // Live members other than self.
  size_t peers_alive() const;
  const GossipDrops& drops() const { return drops_; }
  const std::string& id() const { return id_; }
  // The id whose CurveZMQ key is `curve_public_z85`, if allowlisted.
  std::optional<std::string> IdForCurveKey(const std::string& curve_public_z85) const;
  std::optional<Address> AddressOf(const std::string& id) const {
    return membership_->AddressOf(id);
  }
  const Membership& membership() const { return *membership_; }
  const Averager& averager() const { return *averager_; }

  // Everything a restart needs, for NodeStore::SaveCheckpoint.
  NodeCheckpoint Checkpoint() const;
  // Replaces the allowlist (SIGHUP); removed members leave the view at once.
  void SetAllowlist(std::vector<PublicIdentity> allowlist);

 private:
  GossipNode(const GossipNodeOptions& options, const Identity& identity, Env& env);
  Status RestoreFrom(const NodeCheckpoint& checkpoint);
  Status OnModel(const std::string& from, const wire::GossipModel& model);
  void QueueModels(std::vector<ModelSend> sends);
  void QueueMembership();
  wire::Header NextHeader();
  void StartRunning();

  GossipNodeOptions options_;
  const Identity& identity_;
  Env& env_;
  std::string id_;
  std::map<std::string, PublicIdentity> allowlist_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<Averager> averager_;
  ReplayWindow replay_;
  GossipDrops drops_;
  std::vector<GossipSend> sends_;
  uint64_t next_sequence_;
  bool running_ = false;
  double started_at_ = 0;
  double next_tick_at_ = 0;
  double next_pull_at_ = 0;
};

}  // namespace fedmesh
