// Push-sum (Kempe et al. 2003): a node holds a mass (s, w) and exposes the estimate x = s/w.
// Each step it picks k = fanout of its out-neighbours, keeps the share 1/(k+1) and pushes
// (x, w/(k+1)) to each; a receiver adds the mass, x = (w x + w_m x_m) / (w + w_m). The sums
// of w x and of w over all nodes never change except for what is sent to a crashed node,
// and links need not be symmetric, so any topology works, random included. A share's weight
// must be in (0, max_push_weight] (averager.h): the cap keeps one forged share from taking
// a node over. It does not make push-sum robust to an enrolled peer that sends capped
// weights every step; dpsgd and pushpull, whose mixing weights the receiver sets, are.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "gossip/averager.h"

namespace fedmesh {
namespace {

using wire::GossipKind;

class PushSumAverager final : public Averager {
 public:
  explicit PushSumAverager(averager_internal::Init init) : Averager(std::move(init)) {}

  double weight() const override { return w_; }

 private:
  std::vector<ModelSend> Tick(std::span<const std::string> view) override {
    std::vector<std::string> targets = PickTargets(view);
    if (targets.empty()) return {};
    auto payload = Encode(chain_, x_);
    if (!payload.ok()) {
      tick_status_ = payload.status();
      return {};  // nothing sent, so the whole mass stays here
    }
    // x is unchanged: s and w shrink by the same factor.
    w_ /= static_cast<double>(targets.size() + 1);
    std::vector<ModelSend> sends;
    for (std::string& peer : targets) {
      sends.push_back(Make(std::move(peer), GossipKind::kPush, step_ + 1, *payload, w_));
    }
    return sends;
  }

  // `fanout` peers: random ones for the random topology, otherwise a random subset of the
  // out-neighbours at this step (all of them when there are no more than fanout).
  std::vector<std::string> PickTargets(std::span<const std::string> view) {
    std::vector<std::string> peers =
        SamplePeers(options_.topology, view, self_id_, step_, options_.fanout, &env().rng());
    if (peers.size() <= options_.fanout) return peers;
    for (size_t i = 0; i < options_.fanout; ++i) {  // partial Fisher-Yates
      const size_t j = i + env().rng().UniformInt(peers.size() - i);
      std::swap(peers[i], peers[j]);
    }
    peers.resize(options_.fanout);
    return peers;
  }

  Result<std::vector<ModelSend>> Receive(const std::string& from, const wire::GossipModel& message,
                                         std::span<const std::string> view) override {
    if (message.kind != GossipKind::kPush) return Unexpected(from, message.kind);
    const double cap = options_.max_push_weight > 0.0
                           ? options_.max_push_weight
                           : static_cast<double>(std::max<size_t>(view.size(), 1));
    // Written so that NaN fails too.
    if (!(message.weight > 0.0 && message.weight <= cap)) {
      return Status::InvalidArgument("GossipModel from " + from + " has push-sum weight " +
                                     std::to_string(message.weight) + "; it must be in (0, " +
                                     std::to_string(cap) + "] (max_push_weight)");
    }
    FM_ASSIGN_OR_RETURN(std::vector<float> xm, DecodeModel(from, message.model));
    const double total = w_ + message.weight;
    for (size_t i = 0; i < x_.size(); ++i) {
      x_[i] = static_cast<float>((w_ * x_[i] + message.weight * xm[i]) / total);
    }
    w_ = total;
    return std::vector<ModelSend>{};
  }

  void SaveExtra(State& state) const override { state.weight = w_; }
  void RestoreExtra(State& state) override { w_ = state.weight; }

  double w_ = 1.0;
};

}  // namespace

namespace averager_internal {
std::unique_ptr<Averager> NewPushSum(Init init) {
  return std::make_unique<PushSumAverager>(std::move(init));
}
}  // namespace averager_internal

}  // namespace fedmesh
