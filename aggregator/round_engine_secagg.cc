// RoundEngine's secure aggregation (SecAgg+, aggregator/secagg_round.h): the nodes'
// SecAgg messages for the open round, and closing each stage when every expected message
// came or at the deadline. The rest of the engine is in round_engine.cc.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "aggregator/round_engine.h"
#include "crypto/secagg/secagg_messages.h"

namespace fedmesh {
namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

}  // namespace

void RoundEngine::HandleSecAgg(const std::string& from, const wire::Message& m,
                               std::vector<Output>& out) {
  auto reject = [&](RejectCause cause, std::string text) {
    Reject(from, m, cause, std::move(text), out);
  };
  const std::string claimed = "secure aggregation message for round " + Str(m.header.round);
  if (!connected(from)) {
    return reject(RejectCause::kUnknownNode,
                  "node is not registered (or disconnected since); send Register first");
  }
  if (stats_secagg_) return HandleStatsSecAgg(from, m, out);
  if (m.header.round < round_ || phase_ == Phase::kFinished) {
    return reject(RejectCause::kLate, claimed + ", which has closed");
  }
  if (m.header.round > round_) {
    return reject(RejectCause::kWrongRound, claimed + ", which has not started");
  }
  if (!secagg_ || phase_ != Phase::kRoundOpen) {
    return reject(RejectCause::kLate, claimed + ": no secure aggregation is open");
  }
  if (!IsSelected(from)) return reject(RejectCause::kNotSelected, "node was not selected");
  if (Status s = secagg_->OnMessage(from, m.body); !s.ok()) {
    const RejectCause cause = s.code() == StatusCode::kAlreadyExists        ? RejectCause::kDuplicate
                              : s.code() == StatusCode::kFailedPrecondition ? RejectCause::kLate
                                                                            : RejectCause::kMalformed;
    return reject(cause, s.message());
  }
  if (secagg_->StageComplete()) AdvanceSecAgg(/*at_deadline=*/false, out);
}

void RoundEngine::AdvanceSecAgg(bool at_deadline, std::vector<Output>& out) {
  auto step = secagg_->Close();
  if (!step.ok()) {
    // Early: more may still come before the deadline. At the deadline: the attempt failed.
    if (at_deadline) {
      RetryOrGiveUp(out, "secure aggregation stage " +
                             std::string(SecAggStageName(secagg_->stage())) +
                             " could not close: " + step.status().message());
    }
    return;
  }
  for (auto& [to, body] : step->sends) {
    if (!nodes_.contains(to)) continue;  // revoked: nothing more is sent to it
    out.push_back(Send{to, wire::Message{OutHeader(), std::move(body)}, std::nullopt});
  }
  if (!step->result) {
    deadline_s_ = env_->NowSeconds() + options_.secagg.stage_timeout_s;
    out.push_back(SetTimer{deadline_s_});
    return;
  }
  // The strategy gets the contributors' mean change as the round's one update.
  const SecAggResult& r = *step->result;
  const double n = static_cast<double>(r.contributors.size());
  // Its weight is what the contributors registered (a regional aggregator reports it
  // upstream); 1 each for nodes that registered none.
  uint64_t examples = 0;
  for (const std::string& id : r.contributors) {
    const auto it = nodes_.find(id);
    examples += it != nodes_.end() && it->second.num_examples > 0 ? it->second.num_examples : 1;
    if (it != nodes_.end()) it->second.Trained();
  }
  ClientUpdate mean{"secure-aggregate", std::max<uint64_t>(examples, 1), global_};
  for (size_t i = 0; i < mean.params.size(); ++i) {
    mean.params[i] = static_cast<float>(global_[i] + static_cast<double>(r.decoded_sum[i]) / n);
  }
  accepted_.clear();
  accepted_.emplace(mean.node_id, Accepted{std::move(mean), std::nan(""), 0, std::nullopt});
  secagg_contributors_ = static_cast<uint32_t>(r.contributors.size());
  CloseRound(out);
}

}  // namespace fedmesh
