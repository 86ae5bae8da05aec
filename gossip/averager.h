// Averager: the gossip averaging protocols as sans-IO state machines. A node holds a model x
// and, every gossip step (OnTick), mixes it with its peers' models; messages in and out are
// wire::GossipModel values, time and randomness come from the Env, so the node binary
// (ZeroMQ, wall clock) and the simulator (in-process network, virtual clock) drive the
// same objects. Protocols:
//   pushpull  randomised pairwise averaging (Boyd et al. 2006): one Exchange per step with a
//             random peer, both sides end at (x_i + x_j) / 2
//   dpsgd     x <- W x with Metropolis-Hastings weights on a symmetric graph (Lian et al. 2017)
//   choco     CHOCO-gossip (Koloskova et al. 2019): neighbours exchange compressed
//             differences against public copies x_hat, so any codec chain still converges
//   pushsum   (Kempe et al. 2003) mass-conserving shares (x, w) on directed links
// No protocol waits: a peer that does not answer is left out of the step (its weight stays
// with self), an unanswered Exchange is abandoned after a timeout, and a CHOCO copy that
// fell out of step is resynchronised. Messages must be authenticated and de-duplicated by
// the caller (gossip/signed_model.h) before OnModel sees them.
// Thread-safety: an Averager is not thread-safe; one thread of control drives it (and owns
// the Env's rng()).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec/codec.h"
#include "core/env.h"
#include "core/status.h"
#include "core/wire/messages.h"
#include "gossip/topology.h"

namespace fedmesh {

enum class GossipProtocol { kPushPull, kDpsgd, kChoco, kPushSum };

// The largest step a GossipModel may carry: 2^53, far beyond any run (285,000 years at a
// thousand steps a second), exact as a double in metrics, and far enough below 2^64 that
// adopting a pulled step and counting on can never wrap.
inline constexpr uint64_t kMaxGossipStep = uint64_t{1} << 53;

// "pushpull", "dpsgd", "choco", "pushsum". InvalidArgument listing them.
Result<GossipProtocol> ParseGossipProtocol(std::string_view name);
std::string_view GossipProtocolName(GossipProtocol protocol);
std::vector<std::string> KnownGossipProtocolNames();

struct AveragingOptions {
  // Default: dpsgd.
  GossipProtocol protocol = GossipProtocol::kDpsgd;
  // Who talks to whom (gossip/topology.h). dpsgd and choco need a symmetric graph: ring,
  // exponential (both), one_peer_exponential (dpsgd only: choco keeps copies of a fixed
  // neighbour set). Default: exponential.
  Topology topology = Topology::kExponential;
  // Peers per step for the random topology, and how many of its out-neighbours a push-sum
  // node sends to per step. >= 1. Default: 1.
  uint32_t fanout = 1;
  // Codec chain of model payloads (core/codec/codec.h); for choco the chain that compresses
  // x - x_hat. Default: "none" (raw float32).
  std::string codec = "none";
  // CHOCO consensus step size, in (0, 1]. Coarser codecs need smaller steps: 0.5 diverges
  // with topk:0.1|int8 on 64 nodes where 0.2 converges (tests/sim/gossip_averaging_test.cc).
  // Default: 0.5.
  double choco_gamma = 0.5;
  // pushpull: an Exchange unanswered after this many seconds is abandoned; choco: a
  // kSyncRequest unanswered after this long is sent again. > 0. Default: 2.
  double exchange_timeout_s = 2.0;
  // pushsum: the largest weight one message may carry; larger ones are refused, as are
  // non-finite and non-positive ones. 0 means the number of members in the receiver's view
  // (self included): the mass a federation of that size starts with (every node starts at
  // weight 1 and push-sum never creates mass), which an honest share (at most half its
  // sender's weight) exceeds only after over half the federation left having passed its
  // mass on. Without a cap one share of weight 1e30 made its receiver adopt the sender's
  // model outright and spread it. Finite and >= 0. Default: 0.
  double max_push_weight = 0.0;
};

// InvalidArgument naming the field: an unknown protocol or topology, a codec chain that does
// not parse, choco_gamma outside (0, 1], exchange_timeout_s <= 0, fanout 0, max_push_weight
// negative or not finite, dpsgd or choco on the random topology, choco on
// one_peer_exponential.
Status Validate(const AveragingOptions& options);

// A message to send: kind, step, weight and model are set; the caller fills sequence and
// signature.
struct ModelSend {
  std::string to;
  wire::GossipModel message;
};

class Averager;
namespace averager_internal {
// What every protocol starts from; built by Averager::Create after validation.
struct Init {
  AveragingOptions options;
  codec::Chain chain;
  std::string self_id;
  std::vector<float> x;
  Env* env = nullptr;
};
// One per protocol, each in its own file (gossip/push_pull.cc, dpsgd.cc, choco.cc,
// push_sum.cc).
std::unique_ptr<Averager> NewPushPull(Init init);
std::unique_ptr<Averager> NewDpsgd(Init init);
std::unique_ptr<Averager> NewChoco(Init init);
std::unique_ptr<Averager> NewPushSum(Init init);
}  // namespace averager_internal

class Averager {
 public:
  // What a restart needs: x, the push-sum weight, the step, and choco's public copy x_hat
  // (empty for the other protocols).
  struct State {
    std::vector<float> x;
    std::vector<float> x_hat;
    double weight = 1;
    uint64_t step = 0;
  };

  // InvalidArgument for options Validate refuses, an empty self_id, or an empty or
  // non-finite initial model. REQUIRES: env outlives the Averager.
  static Result<std::unique_ptr<Averager>> Create(const AveragingOptions& options,
                                                  std::string self_id, std::vector<float> initial,
                                                  Env& env);
  virtual ~Averager() = default;
  Averager(const Averager&) = delete;
  Averager& operator=(const Averager&) = delete;

  GossipProtocol protocol() const { return options_.protocol; }
  const AveragingOptions& options() const { return options_; }
  const std::string& self_id() const { return self_id_; }

  // The node's current model x (push-sum: the estimate s / w). The driver trains on it in
  // place between ticks.
  std::span<float> params() { return x_; }
  std::span<const float> params() const { return x_; }
  // Gossip steps taken (OnTick calls, or more after adopting a pulled model).
  uint64_t step() const { return step_; }
  // Push-sum weight w; 1 for the other protocols.
  virtual double weight() const { return 1.0; }

  // One gossip step at env.NowSeconds(). `view`: ids of the live members including self, any
  // order. Messages carry step = step() after the increment. A model the codec cannot encode
  // (a non-finite parameter, fp16 overflow) is not sent: see tick_status().
  std::vector<ModelSend> OnTick(std::span<const std::string> view);
  // OK, or why the last OnTick sent nothing of what the protocol meant to send.
  const Status& tick_status() const { return tick_status_; }

  // Handles a message already authenticated and de-duplicated by the caller; returns the
  // replies to send. A payload that does not decode, has the wrong element count or
  // non-finite values, a step above kMaxGossipStep, a push-sum weight outside
  // (0, max_push_weight], or a kind this protocol does not use -> InvalidArgument and the
  // state is unchanged. Any protocol answers kPullRequest with kPullReply (x, step; choco:
  // uncompressed). A kPullReply is adopted only from a peer this node sent a PullRequest to
  // since it last adopted one (FailedPrecondition otherwise, state unchanged): it takes that
  // x and step = max(step, its step), and forgets the other requests; a push-sum node keeps
  // its weight (no mass moves). A kExchangeReply echoes its Exchange's step, which is how
  // the initiator matches it; a late one for an abandoned Exchange is ignored.
  Result<std::vector<ModelSend>> OnModel(const std::string& from, const wire::GossipModel& message,
                                         std::span<const std::string> view);

  // A kPullRequest to `to`: what a joining or restarted node sends to a live neighbour. `to`
  // is remembered as asked until a PullReply is adopted or CancelPulls.
  ModelSend PullRequest(std::string to);
  // Whether a PullReply from `from` would be adopted.
  bool PullOutstanding(const std::string& from) const { return pulls_.contains(from); }
  // Forgets the PullRequests sent (the node gave up waiting and started on its own).
  void CancelPulls() { pulls_.clear(); }

  State Snapshot() const;
  // Restores a Snapshot and forgets everything learned about peers (outstanding Exchange,
  // PullRequests, received models, CHOCO copies, which resynchronise). InvalidArgument when x (or
  // choco's x_hat) has the wrong size or non-finite values, or the weight is not finite and > 0.
  Status Restore(State state);

 protected:
  explicit Averager(averager_internal::Init init);

  // The protocol's step; step() is still the count before this step.
  virtual std::vector<ModelSend> Tick(std::span<const std::string> view) = 0;
  // Every kind except kPullRequest and kPullReply (handled here).
  virtual Result<std::vector<ModelSend>> Receive(const std::string& from,
                                                 const wire::GossipModel& message,
                                                 std::span<const std::string> view) = 0;
  // Protocol state beyond x and step, into and out of a State; Restore has checked sizes.
  virtual void SaveExtra(State& /*state*/) const {}
  virtual void RestoreExtra(State& /*state*/) {}
  // Forgets peer state (after Restore).
  virtual void ForgetPeers() {}
  // Whether State::x_hat must hold a model (choco).
  virtual bool HasPublicCopy() const { return false; }

  // The payload's values; errors for a bad header or bytes, a count other than x's size, or
  // a non-finite value. `from` names the sender in the message.
  Result<std::vector<float>> DecodeModel(const std::string& from,
                                         const wire::TensorPayload& payload) const;
  // `values` encoded with `chain`, seeded from the Env.
  Result<wire::TensorPayload> Encode(const codec::Chain& chain, std::span<const float> values);
  // A message of `kind` to `to` at `step` carrying `payload`.
  static ModelSend Make(std::string to, wire::GossipKind kind, uint64_t step,
                        wire::TensorPayload payload, double weight = 1.0);
  // InvalidArgument: this protocol does not use messages of `kind`.
  Status Unexpected(const std::string& from, wire::GossipKind kind) const;

  // A neighbour row of a symmetric graph: the peers and their Metropolis-Hastings weights.
  struct MixingRow {
    std::vector<std::string> peers;
    std::vector<double> peer_weights;
    double self_weight = 1.0;
  };
  // Row of `self` in the undirected closure of the topology at `graph_step` among the sorted
  // view. Empty peers when self is not in the view or is alone.
  MixingRow SymmetricRow(std::span<const std::string> view, uint64_t graph_step) const;

  Env& env() { return env_; }
  double now() const { return env_.NowSeconds(); }

  AveragingOptions options_;
  codec::Chain chain_;
  std::string self_id_;
  std::vector<float> x_;
  uint64_t step_ = 0;
  Status tick_status_;  // set by Tick when it could not send

 private:
  Env& env_;
  std::set<std::string> pulls_;  // peers sent a PullRequest since the last adopted reply
};

}  // namespace fedmesh
