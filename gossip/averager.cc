#include "gossip/averager.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "core/check.h"
#include "core/codec/payload.h"
#include "gossip/mixing.h"

namespace fedmesh {

namespace {

bool AllFinite(std::span<const float> values) {
  return std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
}

std::string KindName(wire::GossipKind kind) {
  switch (kind) {
    case wire::GossipKind::kPush:
      return "Push";
    case wire::GossipKind::kExchange:
      return "Exchange";
    case wire::GossipKind::kExchangeReply:
      return "ExchangeReply";
    case wire::GossipKind::kPullRequest:
      return "PullRequest";
    case wire::GossipKind::kPullReply:
      return "PullReply";
    case wire::GossipKind::kSyncRequest:
      return "SyncRequest";
    case wire::GossipKind::kSync:
      return "Sync";
  }
  return "kind " + std::to_string(static_cast<uint32_t>(kind));
}

// Neighbours of `rank` in the undirected closure of the topology's graph at `step`. The
// symmetric topologies are circulant (out-neighbours of r are r + the hops of rank 0), so
// the in-neighbours are r - hops and no other node's list needs computing.
std::vector<uint32_t> ClosureNeighbors(Topology topology, uint32_t n, uint32_t rank,
                                       uint64_t step) {
  std::set<uint32_t> out;
  for (uint32_t hop : OutNeighbors(topology, n, 0, step)) {
    out.insert((rank + hop) % n);
    out.insert((rank + n - hop) % n);
  }
  out.erase(rank);
  return {out.begin(), out.end()};
}

}  // namespace

Result<GossipProtocol> ParseGossipProtocol(std::string_view name) {
  if (name == "pushpull") return GossipProtocol::kPushPull;
  if (name == "dpsgd") return GossipProtocol::kDpsgd;
  if (name == "choco") return GossipProtocol::kChoco;
  if (name == "pushsum") return GossipProtocol::kPushSum;
  return Status::InvalidArgument("gossip protocol \"" + std::string(name) +
                                 "\" is unknown; use pushpull, dpsgd, choco or pushsum");
}

std::string_view GossipProtocolName(GossipProtocol protocol) {
  switch (protocol) {
    case GossipProtocol::kPushPull:
      return "pushpull";
    case GossipProtocol::kDpsgd:
      return "dpsgd";
    case GossipProtocol::kChoco:
      return "choco";
    case GossipProtocol::kPushSum:
      return "pushsum";
  }
  return "unknown";
}

std::vector<std::string> KnownGossipProtocolNames() {
  return {"pushpull", "dpsgd", "choco", "pushsum"};
}

Status Validate(const AveragingOptions& options) {
  const std::string_view protocol = GossipProtocolName(options.protocol);
  if (protocol == "unknown") {
    return Status::InvalidArgument("protocol " +
                                   std::to_string(static_cast<int>(options.protocol)) +
                                   " is unknown; use pushpull, dpsgd, choco or pushsum");
  }
  if (TopologyName(options.topology) == "unknown") {
    return Status::InvalidArgument("topology " +
                                   std::to_string(static_cast<int>(options.topology)) +
                                   " is unknown; use random, ring, exponential or "
                                   "one_peer_exponential");
  }
  if (auto chain = codec::Chain::Parse(options.codec); !chain.ok()) {
    return chain.status().WithContext("codec");
  }
  if (options.fanout == 0) {
    return Status::InvalidArgument("fanout is 0; it must be >= 1 (peers per gossip step)");
  }
  if (!(options.choco_gamma > 0.0 && options.choco_gamma <= 1.0)) {
    return Status::InvalidArgument("choco_gamma is " + std::to_string(options.choco_gamma) +
                                   "; it must be in (0, 1] (try 0.5, smaller for coarser codecs)");
  }
  if (!(std::isfinite(options.max_push_weight) && options.max_push_weight >= 0.0)) {
    return Status::InvalidArgument("max_push_weight is " + std::to_string(options.max_push_weight) +
                                   "; it must be finite and >= 0 (0: the view's size)");
  }
  if (!(std::isfinite(options.exchange_timeout_s) && options.exchange_timeout_s > 0.0)) {
    return Status::InvalidArgument("exchange_timeout_s is " +
                                   std::to_string(options.exchange_timeout_s) +
                                   "; it must be finite and > 0 seconds");
  }
  const bool symmetric_only =
      options.protocol == GossipProtocol::kDpsgd || options.protocol == GossipProtocol::kChoco;
  if (symmetric_only && options.topology == Topology::kRandom) {
    return Status::InvalidArgument(
        "topology random is not symmetric, and protocol " + std::string(protocol) +
        " needs a symmetric graph for its Metropolis-Hastings weights; use topology ring or "
        "exponential, or protocol pushsum or pushpull for random peers");
  }
  if (options.protocol == GossipProtocol::kChoco &&
      options.topology == Topology::kOnePeerExponential) {
    return Status::InvalidArgument(
        "topology one_peer_exponential changes neighbours every step, but protocol choco keeps "
        "a copy of each neighbour's public model, updated every step; use topology ring or "
        "exponential");
  }
  return Status::OK();
}

Result<std::unique_ptr<Averager>> Averager::Create(const AveragingOptions& options,
                                                   std::string self_id, std::vector<float> initial,
                                                   Env& env) {
  FM_RETURN_IF_ERROR(Validate(options));
  if (self_id.empty()) return Status::InvalidArgument("self_id is empty; give the node's id");
  if (initial.empty()) return Status::InvalidArgument("the initial model is empty");
  if (!AllFinite(initial)) {
    return Status::InvalidArgument("the initial model has non-finite values");
  }
  FM_ASSIGN_OR_RETURN(codec::Chain chain, codec::Chain::Parse(options.codec));
  averager_internal::Init init{options, std::move(chain), std::move(self_id), std::move(initial),
                               &env};
  switch (options.protocol) {
    case GossipProtocol::kPushPull:
      return averager_internal::NewPushPull(std::move(init));
    case GossipProtocol::kDpsgd:
      return averager_internal::NewDpsgd(std::move(init));
    case GossipProtocol::kChoco:
      return averager_internal::NewChoco(std::move(init));
    case GossipProtocol::kPushSum:
      return averager_internal::NewPushSum(std::move(init));
  }
  return Status::Internal("unreachable: Validate accepted an unknown protocol");
}

Averager::Averager(averager_internal::Init init)
    : options_(std::move(init.options)),
      chain_(std::move(init.chain)),
      self_id_(std::move(init.self_id)),
      x_(std::move(init.x)),
      env_(*init.env) {}

std::vector<ModelSend> Averager::OnTick(std::span<const std::string> view) {
  tick_status_ = Status::OK();
  std::vector<ModelSend> sends = Tick(view);
  ++step_;
  return sends;
}

Result<std::vector<ModelSend>> Averager::OnModel(const std::string& from,
                                                 const wire::GossipModel& message,
                                                 std::span<const std::string> view) {
  using wire::GossipKind;
  if (message.step > kMaxGossipStep) {
    return Status::InvalidArgument("GossipModel " + KindName(message.kind) + " from " + from +
                                   " has step " + std::to_string(message.step) +
                                   "; the largest is 2^53");
  }
  if (message.kind == GossipKind::kPullRequest) {
    // Choco's chain compresses differences, useless for a whole model: send it raw.
    const codec::Chain& chain = HasPublicCopy() ? codec::Chain() : chain_;
    FM_ASSIGN_OR_RETURN(wire::TensorPayload payload, Encode(chain, x_));
    std::vector<ModelSend> reply;
    reply.push_back(Make(from, GossipKind::kPullReply, step_, std::move(payload)));
    return reply;
  }
  if (message.kind == GossipKind::kPullReply) {
    // Adopting a model replaces ours outright: only an answer to our own request may.
    if (!PullOutstanding(from)) {
      return Status::FailedPrecondition("PullReply from " + from +
                                        ", which this node did not ask for its model");
    }
    FM_ASSIGN_OR_RETURN(std::vector<float> values, DecodeModel(from, message.model));
    x_ = std::move(values);
    step_ = std::max(step_, message.step);
    pulls_.clear();
    return std::vector<ModelSend>{};
  }
  return Receive(from, message, view);
}

ModelSend Averager::PullRequest(std::string to) {
  pulls_.insert(to);
  return Make(std::move(to), wire::GossipKind::kPullRequest, step_,
              codec::MakePayload(codec::Chain(), 0, {}));
}

Averager::State Averager::Snapshot() const {
  State state;
  state.x = x_;
  state.step = step_;
  SaveExtra(state);
  return state;
}

Status Averager::Restore(State state) {
  if (state.x.size() != x_.size()) {
    return Status::InvalidArgument("restored x has " + std::to_string(state.x.size()) +
                                   " values; this model has " + std::to_string(x_.size()));
  }
  if (!AllFinite(state.x)) return Status::InvalidArgument("restored x has non-finite values");
  if (HasPublicCopy()) {
    if (state.x_hat.size() != x_.size()) {
      return Status::InvalidArgument("restored x_hat has " + std::to_string(state.x_hat.size()) +
                                     " values; choco needs " + std::to_string(x_.size()));
    }
    if (!AllFinite(state.x_hat)) {
      return Status::InvalidArgument("restored x_hat has non-finite values");
    }
  } else if (!state.x_hat.empty() && state.x_hat.size() != x_.size()) {
    return Status::InvalidArgument("restored x_hat has " + std::to_string(state.x_hat.size()) +
                                   " values; expected none or " + std::to_string(x_.size()));
  }
  if (!(std::isfinite(state.weight) && state.weight > 0.0)) {
    return Status::InvalidArgument("restored weight is " + std::to_string(state.weight) +
                                   "; it must be finite and > 0");
  }
  x_ = std::move(state.x);
  step_ = state.step;
  RestoreExtra(state);
  ForgetPeers();
  pulls_.clear();
  return Status::OK();
}

Result<std::vector<float>> Averager::DecodeModel(const std::string& from,
                                                 const wire::TensorPayload& payload) const {
  // Checked before decoding, so a hostile count allocates nothing.
  if (payload.element_count != x_.size()) {
    return Status::InvalidArgument("GossipModel from " + from + " carries " +
                                   std::to_string(payload.element_count) +
                                   " values; this model has " + std::to_string(x_.size()));
  }
  auto values = codec::DecodePayload(payload);
  if (!values.ok()) return values.status().WithContext("GossipModel from " + from);
  if (!AllFinite(*values)) {
    return Status::InvalidArgument("GossipModel from " + from + " has non-finite values");
  }
  return values;
}

Result<wire::TensorPayload> Averager::Encode(const codec::Chain& chain,
                                             std::span<const float> values) {
  return codec::EncodePayload(chain, values, env_.rng().NextU64());
}

ModelSend Averager::Make(std::string to, wire::GossipKind kind, uint64_t step,
                         wire::TensorPayload payload, double weight) {
  ModelSend send;
  send.to = std::move(to);
  send.message.kind = kind;
  send.message.step = step;
  send.message.weight = weight;
  send.message.model = std::move(payload);
  return send;
}

Status Averager::Unexpected(const std::string& from, wire::GossipKind kind) const {
  return Status::InvalidArgument("GossipModel " + KindName(kind) + " from " + from +
                                 " is not part of protocol " +
                                 std::string(GossipProtocolName(options_.protocol)) +
                                 "; do the peers use different gossip protocols?");
}

Averager::MixingRow Averager::SymmetricRow(std::span<const std::string> view,
                                           uint64_t graph_step) const {
  std::vector<std::string> sorted(view.begin(), view.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  MixingRow row;
  auto it = std::lower_bound(sorted.begin(), sorted.end(), self_id_);
  if (it == sorted.end() || *it != self_id_) return row;
  const auto n = static_cast<uint32_t>(sorted.size());
  const auto rank = static_cast<uint32_t>(it - sorted.begin());
  const std::vector<uint32_t> neighbors = ClosureNeighbors(options_.topology, n, rank, graph_step);
  // Every node's degree follows from (topology, n, step): no degree exchange needed.
  std::vector<uint32_t> degrees;
  for (uint32_t j : neighbors) {
    degrees.push_back(
        static_cast<uint32_t>(ClosureNeighbors(options_.topology, n, j, graph_step).size()));
    row.peers.push_back(sorted[j]);
  }
  const std::vector<double> weights =
      MetropolisHastingsRow(static_cast<uint32_t>(neighbors.size()), degrees);
  row.self_weight = weights[0];
  row.peer_weights.assign(weights.begin() + 1, weights.end());
  return row;
}

}  // namespace fedmesh
