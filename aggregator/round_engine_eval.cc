// RoundEngine's federated evaluation (RoundEngineOptions::federated_eval): the evaluation
// after a round, the last one's comparisons, and cross-evaluation's candidate models one
// after the other. The rest of the engine is in round_engine.cc.
#include <set>
#include <string>
#include <vector>

#include "aggregator/round_engine.h"
#include "aggregator/weighted_average.h"
#include "core/codec/payload.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

}  // namespace

void RoundEngine::MaybeStartEval(std::vector<Output>& out) {
  const FederatedEvalSettings& e = options_.federated_eval;
  if (!e.enabled) return;
  const bool last = round_ >= options_.total_rounds || !strategy_->CanRunAnotherRound().ok();
  if (round_ % e.every != 0 && !last) return;
  if (eval_) CloseEval(out);  // the previous one ran out of time: report what it has
  std::set<std::string> asked;
  for (const auto& [id, node] : nodes_)
    if (node.connected) asked.insert(id);
  const double now = env_->NowSeconds();
  eval_.emplace(round_, model_version_, asked, now, now + e.timeout_s, e.min_sites);
  eval_is_final_ = last;
  if (asked.empty()) {
    CloseEval(out);
    return;
  }
  wire::FitTask task;
  task.round = round_;
  auto encoded = codec::EncodePayload(downlink_chain_, global_, env_->rng().NextU64());
  task.global_model = encoded.ok() ? std::move(*encoded) : wire::FloatPayload(global_);
  SetTaskSettings(task);
  task.evaluate_only = true;
  if (last) {
    task.finetune_epochs = e.finetune_epochs;
    task.local_only_epochs = e.local_only_epochs;
    task.collect_local_models = e.cross_eval;
  }
  for (const std::string& id : asked)
    out.push_back(Send{id, wire::Message{OutHeader(), task}, eval_->deadline_s()});
  out.push_back(SetTimer{eval_->deadline_s()});
}

void RoundEngine::HandleEvalResult(const std::string& from, const wire::Message& m,
                                   const wire::FitResult& r, std::vector<Output>& out) {
  if (!eval_ || eval_->round() != r.round) {
    Reject(from, m, RejectCause::kLate,
           "evaluation of round " + Str(r.round) + ", which is not being evaluated (closed, or "
           "never asked for)",
           out);
    return;
  }
  std::vector<float> local_model;
  if (r.local_model) {
    if (!eval_is_final_ || !options_.federated_eval.cross_eval || !eval_->candidate().empty()) {
      Reject(from, m, RejectCause::kMalformed, "a local model nobody asked for", out);
      return;
    }
    auto w = wire::PayloadFloats(r.update);
    if (!w.ok() || w->size() != global_.size() || FirstNonFinite(*w) != w->size()) {
      Reject(from, m, RejectCause::kWrongShape,
             "the shared local model is not " + Str(global_.size()) + " finite values", out);
      return;
    }
    local_model = std::move(*w);
  }
  if (std::string why = eval_->Accept(from, r); !why.empty()) {
    Reject(from, m, why.find("already") != std::string::npos ? RejectCause::kDuplicate
                                                             : RejectCause::kMalformed,
           why, out);
    return;
  }
  if (!local_model.empty()) cross_models_[from] = std::move(local_model);
  if (eval_->complete()) CloseEval(out);
}

void RoundEngine::StartCandidateEval(std::vector<Output>& out) {
  const std::string candidate = cross_queue_.front();
  cross_queue_.erase(cross_queue_.begin());
  const FederatedEvalSettings& e = options_.federated_eval;
  std::set<std::string> asked;
  for (const auto& [id, node] : nodes_)
    if (node.connected) asked.insert(id);
  const double now = env_->NowSeconds();
  eval_.emplace(round_, model_version_, asked, now, now + e.timeout_s, e.min_sites);
  eval_->set_candidate(candidate);
  eval_is_final_ = false;
  if (asked.empty()) {
    CloseEval(out);
    return;
  }
  wire::FitTask task;
  task.round = round_;
  task.global_model = wire::FloatPayload(cross_models_.at(candidate));  // exact: a site's model
  SetTaskSettings(task);
  task.evaluate_only = true;
  task.candidate = candidate;
  for (const std::string& id : asked)
    out.push_back(Send{id, wire::Message{OutHeader(), task}, eval_->deadline_s()});
  out.push_back(SetTimer{eval_->deadline_s()});
}

void RoundEngine::CloseEval(std::vector<Output>& out) {
  if (!eval_) return;
  out.push_back(EvalClosed{eval_->Close(env_->NowSeconds())});
  eval_.reset();
  // Cross-evaluation: after the last evaluation, every shared local model in turn.
  if (pending_finish_ && eval_is_final_ && options_.federated_eval.cross_eval) {
    eval_is_final_ = false;
    for (const auto& [site, w] : cross_models_) cross_queue_.push_back(site);
  }
  if (pending_finish_ && !cross_queue_.empty()) {
    StartCandidateEval(out);
    return;
  }
  if (pending_finish_) {
    auto [status, stopped] = std::move(*pending_finish_);
    pending_finish_.reset();
    Finish(std::move(status), out, std::move(stopped));
  }
}

}  // namespace fedmesh
