// CHOCO-gossip (Koloskova et al. 2019, Algorithm 1): besides x a node keeps x_hat, a public
// copy of x that every neighbour also holds, and a copy x_hat_j of each neighbour's. Each
// step it first completes the previous one's consensus step,
//   x += gamma * sum_j w_ij (x_hat_j - x_hat)            (Metropolis-Hastings w_ij)
// then compresses q = Q(x - x_hat) with the codec chain, adds the decoded q (exactly what
// the neighbours will add) to x_hat and pushes q; a receiver adds it to its x_hat_j. Only
// differences travel, so even topk|int8 converges: x_hat absorbs the compression error.
//
// The copies must stay bitwise equal to their originals. A q is applied only when its step
// is the copy's step + 1; a gap (lost message, a restart, a neighbour new to us) discards
// the copy, leaves it out of the consensus step and sends a kSyncRequest, answered by a
// kSync with the whole x_hat (uncompressed) and its step. A copy we never had starts as the
// zero vector at step 0, which is what every node starts from, so a fresh network needs no
// sync at all.
#include <algorithm>
#include <map>
#include <utility>

#include "core/codec/payload.h"
#include "gossip/averager.h"

namespace fedmesh {
namespace {

using wire::GossipKind;

class ChocoAverager final : public Averager {
 public:
  explicit ChocoAverager(averager_internal::Init init)
      : Averager(std::move(init)), x_hat_(x_.size(), 0.0f) {}

 private:
  struct Copy {
    std::vector<float> x_hat;  // empty while invalid
    uint64_t step = 0;         // of the last q applied (or of the Sync)
    bool valid = false;
    bool sync_pending = false;
    double requested_at = 0.0;
  };

  std::vector<ModelSend> Tick(std::span<const std::string> view) override {
    // The graph is static (Validate): the row of step 0 for the current view.
    SetRow(view);
    ConsensusStep();
    auto q = Compress();
    if (!q.ok()) {
      tick_status_ = q.status();  // neighbours see a gap next step and resynchronise
      return {};
    }
    std::vector<ModelSend> sends;
    for (const std::string& peer : row_.peers) {
      sends.push_back(Make(peer, GossipKind::kPush, step_ + 1, *q));
    }
    return sends;
  }

  // Sets the neighbour row and drops the copies of nodes that are no longer neighbours.
  void SetRow(std::span<const std::string> view) {
    row_ = SymmetricRow(view, 0);
    row_known_ = true;
    std::erase_if(copies_, [this](const auto& entry) { return !IsNeighbor(entry.first); });
  }

  bool IsNeighbor(const std::string& id) const {
    return std::find(row_.peers.begin(), row_.peers.end(), id) != row_.peers.end();
  }

  // x += gamma * sum_j w_ij (x_hat_j - x_hat) over the valid copies; a missing one's weight
  // stays with self (its term is 0).
  void ConsensusStep() {
    std::vector<double> acc(x_.size(), 0.0);
    bool any = false;
    for (size_t k = 0; k < row_.peers.size(); ++k) {
      auto it = copies_.find(row_.peers[k]);
      if (it == copies_.end() || !it->second.valid) continue;
      const std::vector<float>& xj = it->second.x_hat;
      const double w = row_.peer_weights[k];
      for (size_t i = 0; i < acc.size(); ++i) acc[i] += w * (double{xj[i]} - double{x_hat_[i]});
      any = true;
    }
    if (!any) return;
    const double gamma = options_.choco_gamma;
    for (size_t i = 0; i < acc.size(); ++i) {
      x_[i] = static_cast<float>(x_[i] + gamma * acc[i]);
    }
  }

  // q = Q(x - x_hat): encodes it, adds the decoded value to x_hat and returns the payload.
  Result<wire::TensorPayload> Compress() {
    std::vector<float> diff(x_.size());
    for (size_t i = 0; i < diff.size(); ++i) diff[i] = x_[i] - x_hat_[i];
    FM_ASSIGN_OR_RETURN(wire::TensorPayload payload, Encode(chain_, diff));
    FM_ASSIGN_OR_RETURN(std::vector<float> q, codec::DecodePayload(payload));
    for (size_t i = 0; i < q.size(); ++i) x_hat_[i] += q[i];
    return payload;
  }

  Result<std::vector<ModelSend>> Receive(const std::string& from, const wire::GossipModel& message,
                                         std::span<const std::string> view) override {
    if (!row_known_) SetRow(view);  // a message before our first step
    switch (message.kind) {
      case GossipKind::kPush:
        return OnDifference(from, message);
      case GossipKind::kSyncRequest:
        return OnSyncRequest(from);
      case GossipKind::kSync:
        return OnSync(from, message);
      default:
        return Unexpected(from, message.kind);
    }
  }

  Result<std::vector<ModelSend>> OnDifference(const std::string& from,
                                              const wire::GossipModel& message) {
    FM_ASSIGN_OR_RETURN(std::vector<float> q, DecodeModel(from, message.model));
    // A non-neighbour's q has no weight here; keeping a copy would only cost syncs.
    if (!IsNeighbor(from)) return std::vector<ModelSend>{};
    auto [it, inserted] = copies_.try_emplace(from);
    Copy& copy = it->second;
    if (inserted) {
      copy.valid = true;
      copy.x_hat.assign(x_.size(), 0.0f);  // every node starts at x_hat = 0, step 0
    }
    if (copy.valid && message.step == copy.step + 1) {
      for (size_t i = 0; i < q.size(); ++i) copy.x_hat[i] += q[i];
      copy.step = message.step;
      return std::vector<ModelSend>{};
    }
    return Resync(from, copy);
  }

  // Discards an out-of-step copy and asks for the whole x_hat, again after the timeout if
  // the first request (or its answer) was lost.
  std::vector<ModelSend> Resync(const std::string& from, Copy& copy) {
    copy.valid = false;
    copy.x_hat = {};
    std::vector<ModelSend> sends;
    if (copy.sync_pending && now() - copy.requested_at < options_.exchange_timeout_s) {
      return sends;
    }
    copy.sync_pending = true;
    copy.requested_at = now();
    sends.push_back(
        Make(from, GossipKind::kSyncRequest, step_, codec::MakePayload(codec::Chain(), 0, {})));
    return sends;
  }

  Result<std::vector<ModelSend>> OnSyncRequest(const std::string& from) {
    // x_hat now folds in every q up to step_, and the next q carries step_ + 1.
    FM_ASSIGN_OR_RETURN(wire::TensorPayload payload, Encode(codec::Chain(), x_hat_));
    std::vector<ModelSend> reply;
    reply.push_back(Make(from, GossipKind::kSync, step_, std::move(payload)));
    return reply;
  }

  Result<std::vector<ModelSend>> OnSync(const std::string& from, const wire::GossipModel& message) {
    FM_ASSIGN_OR_RETURN(std::vector<float> x_hat, DecodeModel(from, message.model));
    auto it = copies_.find(from);
    if (it == copies_.end() || !it->second.sync_pending) {
      return std::vector<ModelSend>{};  // not asked for (or no longer a neighbour)
    }
    it->second = Copy{std::move(x_hat), message.step, true, false, 0.0};
    return std::vector<ModelSend>{};
  }

  bool HasPublicCopy() const override { return true; }
  void SaveExtra(State& state) const override { state.x_hat = x_hat_; }
  void RestoreExtra(State& state) override { x_hat_ = std::move(state.x_hat); }
  void ForgetPeers() override {
    copies_.clear();
    row_ = MixingRow{};
    row_known_ = false;
  }

  std::vector<float> x_hat_;
  MixingRow row_;  // neighbours and weights, from the last step's view
  bool row_known_ = false;
  std::map<std::string, Copy> copies_;
};

}  // namespace

namespace averager_internal {
std::unique_ptr<Averager> NewChoco(Init init) {
  return std::make_unique<ChocoAverager>(std::move(init));
}
}  // namespace averager_internal

}  // namespace fedmesh
