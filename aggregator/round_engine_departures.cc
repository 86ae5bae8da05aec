// RoundEngine when a node leaves a round early: it disconnects (its task stays open), its
// key is revoked (it is forgotten, and nothing waits for it any more), or it reports that
// it will not serve its task (Reject TASK_FAILED: the round, evaluation or secure
// aggregation stops waiting for it). The rest of the engine is in round_engine.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "aggregator/round_engine.h"
#include "core/check.h"

namespace fedmesh {
namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

}  // namespace

std::vector<RoundEngine::Output> RoundEngine::OnDisconnect(const std::string& node_id) {
  FM_CHECK(started_);
  if (auto it = nodes_.find(node_id); it != nodes_.end() && it->second.connected) {
    it->second.connected = false;
    --connected_;
  }
  return {};
}

std::vector<RoundEngine::Output> RoundEngine::OnRevoke(const std::string& node_id) {
  FM_CHECK(started_);
  std::vector<Output> out;
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return out;
  if (it->second.connected) --connected_;
  nodes_.erase(it);
  if (eval_) {
    eval_->Forget(node_id);
    if (eval_->complete()) CloseEval(out);
  }
  if (stats_ && !stats_->secure_phase()) {
    stats_->Forget(node_id);
    if (stats_->complete()) AdvanceStats(out);
  } else if (stats_ && stats_secagg_ && stats_secagg_->Revoke(node_id) && stats_secagg_->StageComplete()) {
    AdvanceStatsSecAgg(/*at_deadline=*/true, out);
  }
  if (secagg_ && phase_ == Phase::kRoundOpen) {
    // The secure round stops counting on it: its stage closes now if everyone else has
    // answered, and it is a dropout to SecAgg+ from here on (what it sent stays).
    // Nothing more can come for the stage then: closing it is what its deadline would do.
    if (secagg_->Revoke(node_id) && secagg_->StageComplete()) AdvanceSecAgg(/*at_deadline=*/true, out);
    return out;
  }
  StopWaitingFor(node_id, "was revoked", out);
  return out;
}

void RoundEngine::StopWaitingFor(const std::string& node_id, const std::string& why,
                                 std::vector<Output>& out) {
  if (phase_ != Phase::kRoundOpen || secagg_ || buffered() || !IsSelected(node_id) ||
      accepted_.contains(node_id)) {
    return;
  }
  selected_.erase(std::find(selected_.begin(), selected_.end(), node_id));
  earlier_selected_.insert(node_id);  // its late messages are "late", not "not selected"
  if (accepted_.size() < selected_.size()) return;
  if (accepted_.size() >= static_cast<size_t>(options_.min_clients)) {
    CloseRound(out);
  } else {
    RetryOrGiveUp(out, "node " + node_id + " " + why + " and only " + Str(accepted_.size()) +
                           " of the other selected nodes answered; min_clients is " +
                           Str(options_.min_clients));
  }
}

void RoundEngine::HandleTaskFailed(const std::string& from, const wire::Message& m,
                                   const wire::Reject& r, std::vector<Output>& out) {
  if (!connected(from)) return;
  const uint64_t round = m.header.round;
  auto report = [&](bool evaluation, uint64_t next_round = 0) {
    ++tasks_failed_;
    out.push_back(TaskFailed{round, from, r.text, evaluation, next_round});
  };
  if (eval_ && eval_->round() == round) {
    report(/*evaluation=*/true);
    eval_->Forget(from);
    if (eval_->complete()) CloseEval(out);
    return;
  }
  // Only the node's own open task: a stale or repeated report changes nothing.
  if (phase_ != Phase::kRoundOpen || round != round_ || !IsSelected(from) || accepted_.contains(from))
    return;
  report(/*evaluation=*/false, BackOff(from));
  if (secagg_) {
    // Before it advertised keys it simply leaves the round; later, SecAgg+ treats it as a
    // dropout at the stage's deadline.
    if (secagg_->Withdraw(from) && secagg_->StageComplete()) AdvanceSecAgg(/*at_deadline=*/false, out);
    return;
  }
  StopWaitingFor(from, "failed its task (" + r.text + ")", out);
}

uint64_t RoundEngine::BackOff(const std::string& node_id) {
  NodeInfo& node = nodes_[node_id];
  ++node.failures_in_a_row;
  if (options_.failure_backoff_max_rounds <= 0 || options_.secure_selection) return 0;
  const uint64_t cap = static_cast<uint64_t>(options_.failure_backoff_max_rounds);
  const uint64_t skip = node.failures_in_a_row > 20 ? cap : std::min<uint64_t>(cap, uint64_t{1} << (node.failures_in_a_row - 1));
  node.backoff_until_round = round_ + 1 + skip;
  return node.backoff_until_round;
}

}  // namespace fedmesh
