// D-PSGD gossip averaging: each step a node mixes the latest model each neighbour pushed,
// x <- w_ii x + sum_j w_ij x_j, with the Metropolis-Hastings row of the step at which they
// were pushed, then pushes x to the neighbours of this step. A neighbour whose latest model
// arrived more than kMaxStaleness of OUR steps ago (dead, or cut off) contributes its weight
// to self, so the row stays stochastic and no step waits. With synchronised steps and
// delivery within a period every model is fresh and this is exactly x(t+1) = W x(t). Real
// processes are not synchronised: a neighbour's push often lands just after our step, and
// forgetting it then (mixing with self instead) was measured to let label-skewed sites drift
// apart by several accuracy points; reusing a model one or two steps old keeps them mixed.
// Age is counted in the receiver's own steps, never by comparing step numbers across nodes:
// two live sites whose counters differ by a constant offset (they joined at different
// times) would otherwise see each other as permanently stale on one side only, the mixing
// turns one-way, and the sites drift apart (CI once ended a 6-site run at 0.67 that way).
#include <algorithm>
#include <map>
#include <utility>

#include "gossip/averager.h"

namespace fedmesh {
namespace {

using wire::GossipKind;

class DpsgdAverager final : public Averager {
 public:
  explicit DpsgdAverager(averager_internal::Init init) : Averager(std::move(init)) {}

 private:
  struct Received {
    uint64_t step;         // the sender's step: orders one sender's models
    uint64_t received_at;  // our step when it arrived: its age
    std::vector<float> x;
  };

  std::vector<ModelSend> Tick(std::span<const std::string> view) override {
    Mix();
    // The graph can change with the step (one_peer_exponential): the row that mixes what
    // the neighbours send now is the one of the step they send it at, this one.
    row_ = SymmetricRow(view, step_);
    if (row_.peers.empty()) return {};
    auto payload = Encode(chain_, x_);
    if (!payload.ok()) {
      tick_status_ = payload.status();
      return {};
    }
    std::vector<ModelSend> sends;
    for (const std::string& peer : row_.peers) {
      sends.push_back(Make(peer, GossipKind::kPush, step_ + 1, *payload));
    }
    return sends;
  }

  static constexpr uint64_t kMaxStaleness = 2;

  // x <- w_ii x + sum_j w_ij x_j over the previous step's row, in double.
  void Mix() {
    if (row_.peers.empty()) return;
    std::vector<double> acc(x_.size());
    double self_weight = row_.self_weight;
    for (size_t k = 0; k < row_.peers.size(); ++k) {
      auto it = received_.find(row_.peers[k]);
      if (it == received_.end() || it->second.received_at + kMaxStaleness < step_) {
        self_weight += row_.peer_weights[k];  // silent neighbour: no waiting
        continue;
      }
      const std::vector<float>& xj = it->second.x;
      for (size_t i = 0; i < acc.size(); ++i) acc[i] += row_.peer_weights[k] * xj[i];
    }
    for (size_t i = 0; i < acc.size(); ++i) {
      x_[i] = static_cast<float>(acc[i] + self_weight * x_[i]);
    }
  }

  Result<std::vector<ModelSend>> Receive(const std::string& from, const wire::GossipModel& message,
                                         std::span<const std::string> /*view*/) override {
    if (message.kind != GossipKind::kPush) return Unexpected(from, message.kind);
    FM_ASSIGN_OR_RETURN(std::vector<float> x, DecodeModel(from, message.model));
    // Only the last step's neighbours have a weight; keeping others would only cost memory.
    if (std::find(row_.peers.begin(), row_.peers.end(), from) == row_.peers.end()) {
      return std::vector<ModelSend>{};
    }
    auto it = received_.find(from);
    // The latest model of each neighbour counts: an older one arriving late is dropped.
    if (it == received_.end() || it->second.step <= message.step) {
      received_[from] = Received{message.step, step_, std::move(x)};
    }
    return std::vector<ModelSend>{};
  }

  void ForgetPeers() override {
    received_.clear();
    row_ = MixingRow{};
  }

  MixingRow row_;  // of the last step: who was sent x, and the weights to mix their replies
  std::map<std::string, Received> received_;  // the latest model of each neighbour
};

}  // namespace

namespace averager_internal {
std::unique_ptr<Averager> NewDpsgd(Init init) {
  return std::make_unique<DpsgdAverager>(std::move(init));
}
}  // namespace averager_internal

}  // namespace fedmesh
