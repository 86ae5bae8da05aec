// RoundEngine's federated statistics before round 1 (RoundEngineOptions::federated_stats):
// the two phases, secure aggregation of the sums, and the model hook and imputation values
// they feed. The rest of the engine is in round_engine.cc.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "aggregator/round_engine.h"
#include "core/wire/wire_codec.h"
#include "core/wire/wire_stats.h"

namespace fedmesh {

void RoundEngine::StartStats(std::vector<Output>& out) {
  std::set<std::string> asked;
  for (const auto& [id, node] : nodes_)
    if (node.connected) asked.insert(id);
  stats_.emplace(options_.federated_stats, std::move(asked), env_->NowSeconds(),
                 /*secure=*/options_.secagg.enabled);
  SendStatsRequests(out);
}

void RoundEngine::SendStatsRequests(std::vector<Output>& out) {
  wire::FitTask task;
  task.round = round_;
  task.global_model = wire::FloatPayload({});
  task.statistics = stats_->request();
  if (stats_secagg_) task.secagg = stats_secagg_->parameters();
  for (const std::string& id : stats_->asked())
    out.push_back(Send{id, wire::Message{OutHeader(), task}, stats_->deadline_s()});
  out.push_back(SetTimer{stats_->deadline_s()});
}

void RoundEngine::HandleStatsResult(const std::string& from, const wire::Message& m,
                                    const wire::FitResult& r, std::vector<Output>& out) {
  if (!stats_) {
    Reject(from, m, RejectCause::kLate, "statistics when none are being collected", out);
    return;
  }
  if (std::string why = stats_->Accept(from, *r.statistics); !why.empty()) {
    Reject(from, m, why.find("already") != std::string::npos ? RejectCause::kDuplicate
                                                             : RejectCause::kMalformed,
           why, out);
    return;
  }
  if (stats_->complete()) AdvanceStats(out);
}

void RoundEngine::AdvanceStats(std::vector<Output>& out) {
  if (!stats_->Advance(env_->NowSeconds())) {
    CloseStats(out);
    return;
  }
  if (stats_->secure_phase()) {
    OpenStatsSecAgg(out);
    return;
  }
  SendStatsRequests(out);
}

void RoundEngine::CloseStats(std::vector<Output>& out) {
  FederatedStatsReport report = stats_->Close(env_->NowSeconds());
  Status model_status = Status::OK();
  if (options_.model_after_stats) {
    if (!report.total) {
      model_status = Status::FailedPrecondition(
          "the model needs the federation's statistics ([data] normalize = \"federated\") and "
          "there are none: " + report.error);
    } else if (auto model = options_.model_after_stats(*report.total); !model.ok()) {
      model_status = model.status().WithContext("applying the federation's statistics to the model");
    } else {
      options_.model_sha256 = std::move(model->first);
      options_.model_graph = std::move(model->second);
    }
  }
  if (report.total) {
    // Sites that impute missing cells use the federation's means (FitTask::impute_values).
    // None when a feature has no value at any site: it has no mean, and a made-up 0 would be
    // trained on; a site that must impute then refuses its tasks, saying so.
    impute_values_.clear();
    const bool all_observed =
        std::all_of(report.total->features.begin(), report.total->features.end(),
                    [](const FeatureStatistics& f) { return f.count > 0; });
    if (all_observed) {
      for (const FeatureStatistics& f : report.total->features) impute_values_.push_back(f.mean);
    }
  }
  out.push_back(StatsClosed{std::move(report)});
  stats_.reset();
  stats_secagg_.reset();
  stats_done_ = true;
  if (!model_status.ok()) {
    Finish(std::move(model_status), out);
    return;
  }
  TryOpenRound(out);
}

void RoundEngine::OpenStatsSecAgg(std::vector<Output>& out) {
  // Exact integer words (core/stats/secure_sums.h), not clipped floats: 16-bit limbs, no
  // DP noise (the statistics are not the model).
  SecAggSettings settings = options_.secagg;
  settings.clip = 1.0;
  settings.bits = 16;
  settings.noise_stddev = 0.0;
  const std::vector<std::string> members(stats_->asked().begin(), stats_->asked().end());
  // The secure sum hides each site among at least the rounds' quorum, as a model update is
  // (sites refuse a smaller roster: [secagg] min_clients on the node, default 3).
  const size_t min_sites = std::max<size_t>(
      {2, static_cast<size_t>(options_.federated_stats.min_sites),
       static_cast<size_t>(options_.min_clients)});
  auto opened = members.size() > kMaxSecureSumSites
                    ? Result<SecAggRound>(Status::InvalidArgument("more sites than secure sums take"))
                    : SecAggRound::Open(settings, options_.federation_id, round_,
                                        wire::SecureStatsWords(stats_->request()), min_sites, members);
  if (!opened.ok()) {
    stats_->Fail("secure aggregation of the statistics could not open: " + opened.status().message());
    CloseStats(out);
    return;
  }
  stats_secagg_.emplace(std::move(opened).value());
  SendStatsRequests(out);
}

void RoundEngine::HandleStatsSecAgg(const std::string& from, const wire::Message& m,
                                    std::vector<Output>& out) {
  if (m.header.round != round_ || !stats_->asked().contains(from)) {
    Reject(from, m, RejectCause::kNotSelected,
           "secure aggregation message outside the statistics collection", out);
    return;
  }
  if (Status s = stats_secagg_->OnMessage(from, m.body); !s.ok()) {
    const RejectCause cause = s.code() == StatusCode::kAlreadyExists        ? RejectCause::kDuplicate
                              : s.code() == StatusCode::kFailedPrecondition ? RejectCause::kLate
                                                                            : RejectCause::kMalformed;
    Reject(from, m, cause, s.message(), out);
    return;
  }
  if (stats_secagg_->StageComplete()) AdvanceStatsSecAgg(/*at_deadline=*/false, out);
}

void RoundEngine::AdvanceStatsSecAgg(bool at_deadline, std::vector<Output>& out) {
  auto step = stats_secagg_->Close();
  if (!step.ok()) {
    if (at_deadline) {
      stats_->Fail("secure aggregation of the statistics: stage " +
                   std::string(SecAggStageName(stats_secagg_->stage())) +
                   " could not close: " + step.status().message());
      CloseStats(out);
    }
    return;
  }
  for (auto& [to, body] : step->sends) {
    if (!nodes_.contains(to)) continue;  // revoked: nothing more is sent to it
    out.push_back(Send{to, wire::Message{OutHeader(), std::move(body)}, std::nullopt});
  }
  if (!step->result) {
    stats_->set_deadline(env_->NowSeconds() + options_.secagg.stage_timeout_s);
    out.push_back(SetTimer{stats_->deadline_s()});
    return;
  }
  stats_->FinishSecure(step->result->sum, step->result->contributors);
  CloseStats(out);
}

}  // namespace fedmesh
