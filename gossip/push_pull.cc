// Push-pull pairwise averaging: each step a node sends x to one random peer (Exchange), the
// peer answers with its own x from before mixing (ExchangeReply) and both set x to the pair's
// mean. One Exchange is outstanding at a time; it is abandoned when its peer leaves the view
// or after exchange_timeout_s, so a crashed peer costs at most that long.
#include <optional>
#include <utility>

#include "gossip/averager.h"

namespace fedmesh {
namespace {

using wire::GossipKind;

// x = (x + y) / 2. Float addition commutes, so both sides of a pair end bitwise equal.
void MixHalf(std::span<float> x, std::span<const float> y) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = (x[i] + y[i]) * 0.5f;
}

bool Contains(std::span<const std::string> view, const std::string& id) {
  for (const auto& v : view) {
    if (v == id) return true;
  }
  return false;
}

class PushPullAverager final : public Averager {
 public:
  explicit PushPullAverager(averager_internal::Init init) : Averager(std::move(init)) {}

 private:
  struct Outstanding {
    std::string peer;
    uint64_t step;  // the Exchange's step, echoed by its reply
    double sent_at;
  };

  std::vector<ModelSend> Tick(std::span<const std::string> view) override {
    if (outstanding_ && Contains(view, outstanding_->peer) &&
        now() - outstanding_->sent_at < options_.exchange_timeout_s) {
      return {};  // still waiting; the timeout bounds how long
    }
    outstanding_.reset();
    std::optional<std::string> peer = PickPeer(view);
    if (!peer) return {};
    auto payload = Encode(chain_, x_);
    if (!payload.ok()) {
      tick_status_ = payload.status();
      return {};
    }
    const uint64_t step = step_ + 1;
    outstanding_ = Outstanding{*peer, step, now()};
    std::vector<ModelSend> sends;
    sends.push_back(Make(*peer, GossipKind::kExchange, step, std::move(*payload)));
    return sends;
  }

  // One peer, uniformly: among all live peers (random topology) or among the topology's
  // out-neighbours at this step.
  std::optional<std::string> PickPeer(std::span<const std::string> view) {
    std::vector<std::string> candidates =
        SamplePeers(options_.topology, view, self_id_, step_, 1, &env().rng());
    if (candidates.empty()) return std::nullopt;
    return candidates[env().rng().UniformInt(candidates.size())];
  }

  Result<std::vector<ModelSend>> Receive(const std::string& from, const wire::GossipModel& message,
                                         std::span<const std::string> /*view*/) override {
    switch (message.kind) {
      case GossipKind::kExchange:
        return OnExchange(from, message);
      case GossipKind::kExchangeReply:
        return OnReply(from, message);
      default:
        return Unexpected(from, message.kind);
    }
  }

  Result<std::vector<ModelSend>> OnExchange(const std::string& from,
                                            const wire::GossipModel& message) {
    FM_ASSIGN_OR_RETURN(std::vector<float> theirs, DecodeModel(from, message.model));
    // The reply carries x from before mixing, and is encoded first so that an encoding
    // error leaves x unchanged.
    FM_ASSIGN_OR_RETURN(wire::TensorPayload mine, Encode(chain_, x_));
    MixHalf(x_, theirs);
    std::vector<ModelSend> reply;
    reply.push_back(Make(from, GossipKind::kExchangeReply, message.step, std::move(mine)));
    return reply;
  }

  Result<std::vector<ModelSend>> OnReply(const std::string& from,
                                         const wire::GossipModel& message) {
    FM_ASSIGN_OR_RETURN(std::vector<float> theirs, DecodeModel(from, message.model));
    // A late reply to an abandoned Exchange is dropped: mixing it now would count the
    // pair's mass twice if a newer Exchange with that peer is under way.
    if (!outstanding_ || outstanding_->peer != from || outstanding_->step != message.step) {
      return std::vector<ModelSend>{};
    }
    MixHalf(x_, theirs);
    outstanding_.reset();
    return std::vector<ModelSend>{};
  }

  void ForgetPeers() override { outstanding_.reset(); }

  std::optional<Outstanding> outstanding_;
};

}  // namespace

namespace averager_internal {
std::unique_ptr<Averager> NewPushPull(Init init) {
  return std::make_unique<PushPullAverager>(std::move(init));
}
}  // namespace averager_internal

}  // namespace fedmesh
