// Gossip mode: every client an Averager (gossip/averager.h), the protocol fedmesh-node runs
// with [gossip] listen set, in virtual time over the InProcessNetwork.
//
// One round: every client that is up trains local_epochs on its data (on the workers), then
// takes one gossip step at round start + its compute time; the network then runs until
// every message and answer of the step has arrived, and the next round starts there. The
// view is the set of clients that are up (the simulator plays a perfect membership layer:
// gossip/membership.h is exercised on its own in tests/sim/membership_sim_test.cc). A
// client that crashed, dropped out this round, or is outside its availability window is
// down: it neither trains nor gossips, and messages to it are lost.
// Models are unsigned here: signatures (gossip/signed_model.h) authenticate real peers and
// change nothing a simulation measures but 64 bytes a message.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <variant>

#include "core/rng.h"
#include "gossip/averager.h"
#include "gossip/consensus.h"
#include "gossip/topology.h"
#include "node/fit_task_runner.h"
#include "sim/client_traits.h"
#include "sim/in_process_network.h"
#include "sim/sim_modes.h"
#include "sim/virtual_clock_env.h"

namespace fedmesh::sim_internal {
namespace {


class GossipSim {
 public:
  explicit GossipSim(SimContext& ctx)
      : ctx_(ctx),
        o_(ctx.options),
        env_(o_.seed),
        net_(env_, SimLinkModel(o_), SimNetworkSeed(o_)) {}

  Result<std::vector<float>> Run();

 private:
  Status Init();
  bool IsUp(uint64_t c, uint64_t round) const;
  void Send(size_t i, std::vector<ModelSend> sends);

  SimContext& ctx_;
  const SimOptions& o_;
  VirtualClockEnv env_;
  InProcessNetwork net_;
  std::vector<std::string> ids_;
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<std::unique_ptr<Averager>> nodes_;
  std::vector<std::vector<float>> velocity_;
  std::vector<uint64_t> sequence_;
  std::vector<std::string> view_;
  Status status_;
};

Status GossipSim::Init() {
  FM_ASSIGN_OR_RETURN(const AveragingOptions a, AveragingOptionsFor(o_));
  const size_t n = o_.clients;
  for (size_t c = 0; c < n; ++c) {
    ids_.push_back(SimClientId(c));
    index_[ids_.back()] = c;
    FM_ASSIGN_OR_RETURN(auto node, Averager::Create(a, ids_.back(), ctx_.initial, env_));
    nodes_.push_back(std::move(node));
  }
  velocity_.resize(n);
  sequence_.assign(n, 0);
  net_.SetNodeLinks([this](const std::string& node) {
    return TraitsOf(o_, index_.find(node)->second).link;
  });
  net_.SetHandler([this](const std::string& from, const std::string& to, wire::Message m) {
    auto* model = std::get_if<wire::GossipModel>(&m.body);
    if (model == nullptr || !status_.ok()) return;
    const size_t i = index_.find(to)->second;
    auto replies = nodes_[i]->OnModel(from, *model, view_);
    // A refused message is what a real node logs and drops; a simulation of correct nodes
    // never produces one, so it is a bug worth stopping for.
    if (!replies.ok()) {
      status_ = replies.status().WithContext(to + " refused a model from " + from);
      return;
    }
    Send(i, std::move(*replies));
  });
  return Status::OK();
}

bool GossipSim::IsUp(uint64_t c, uint64_t round) const {
  for (const CrashEvent& e : o_.crashes) {
    if (e.client == c && round >= e.round && (e.rounds_down == 0 || round < e.round + e.rounds_down)) {
      return false;
    }
  }
  if (DropsOut(o_, c, round)) return false;
  return IsAvailable(o_, TraitsOf(o_, c), round);
}

void GossipSim::Send(size_t i, std::vector<ModelSend> sends) {
  for (ModelSend& s : sends) {
    s.message.sequence = ++sequence_[i];
    wire::Message m;
    m.header.federation_id = kSimFederation;
    m.header.sender_id = ids_[i];
    m.header.message_id = s.message.sequence;
    m.body = std::move(s.message);
    if (Status st = net_.Send(ids_[i], s.to, m); !st.ok() && status_.ok()) status_ = st;
  }
}

Result<std::vector<float>> GossipSim::Run() {
  FM_RETURN_IF_ERROR(Init());
  const size_t n = nodes_.size();
  uint64_t mark_sent = 0, mark_received = 0;
  for (uint64_t round = 1; round <= o_.rounds; ++round) {
    std::vector<size_t> up;
    view_.clear();
    for (size_t c = 0; c < n; ++c) {
      const bool is_up = IsUp(c, round);
      net_.SetDown(ids_[c], !is_up);
      if (is_up) {
        up.push_back(c);
        view_.push_back(ids_[c]);
      }
    }
    // Local training of every client that is up, in parallel.
    std::vector<std::vector<float>> params(up.size());
    for (size_t j = 0; j < up.size(); ++j) {
      auto x = nodes_[up[j]]->params();
      params[j].assign(x.begin(), x.end());
    }
    FM_RETURN_IF_ERROR(ctx_.workers.Run(up.size(), [&](size_t j, Model& model) {
      return TrainClient(ctx_, model, up[j], round, params[j], velocity_[up[j]]);
    }));
    ctx_.client_updates += up.size();
    const double start = env_.NowSeconds();
    for (size_t j = 0; j < up.size(); ++j) {
      const size_t c = up[j];
      std::copy(params[j].begin(), params[j].end(), nodes_[c]->params().begin());
      const double compute_s = static_cast<double>(o_.local_epochs) *
                               static_cast<double>(ctx_.data.SizeOf(c)) /
                               TraitsOf(o_, c).samples_per_s;
      net_.ScheduleAt(start + compute_s, [this, c] {
        if (!status_.ok()) return;
        Send(c, nodes_[c]->OnTick(view_));
        if (!nodes_[c]->tick_status().ok()) {
          status_ = nodes_[c]->tick_status().WithContext(ids_[c] + "'s gossip step");
        }
      });
    }
    net_.RunAll();
    FM_RETURN_IF_ERROR(status_);

    SimRoundMetrics m;
    m.round = round;
    m.sim_time_s = env_.NowSeconds();
    m.participants = up.size();
    m.dropped = n - up.size();
    const uint64_t sent = net_.total_bytes_sent();
    uint64_t received = 0;
    for (const std::string& id : ids_) received += net_.bytes_received(id);
    m.bytes_up = sent - mark_sent;
    m.bytes_down = received - mark_received;
    mark_sent = sent;
    mark_received = received;
    std::vector<std::span<const float>> models;
    for (size_t c : up) models.push_back(nodes_[c]->params());
    if (!models.empty()) m.consensus_distance = ConsensusDistance(models);
    if (IsEvalRound(ctx_, round) && !up.empty()) {
      double acc = 0, loss = 0;
      const size_t k = std::min<size_t>(o_.eval_clients, up.size());
      for (size_t j = 0; j < k; ++j) {
        FM_ASSIGN_OR_RETURN(EvalStats e, Evaluate(ctx_, nodes_[up[j]]->params()));
        acc += e.accuracy;
        loss += e.loss;
      }
      m.test_accuracy = acc / static_cast<double>(k);
      m.test_loss = loss / static_cast<double>(k);
    }
    FM_RETURN_IF_ERROR(ctx_.report(m));
  }
  // The average of the clients that are up at the end.
  std::vector<double> sum(ctx_.initial.size(), 0.0);
  size_t count = 0;
  for (size_t c = 0; c < n; ++c) {
    if (net_.IsDown(ids_[c])) continue;
    auto x = nodes_[c]->params();
    for (size_t k = 0; k < sum.size(); ++k) sum[k] += x[k];
    ++count;
  }
  std::vector<float> mean(sum.size());
  for (size_t k = 0; k < sum.size(); ++k) {
    mean[k] = static_cast<float>(sum[k] / static_cast<double>(std::max<size_t>(1, count)));
  }
  return mean;
}

}  // namespace

Result<std::vector<float>> RunGossipMode(SimContext& ctx) {
  GossipSim sim(ctx);
  return sim.Run();
}

}  // namespace fedmesh::sim_internal
