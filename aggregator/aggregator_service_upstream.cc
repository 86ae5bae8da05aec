// AggregatorService, hierarchy: a regional aggregator ([upstream] endpoint) serves each task
// of its top aggregator with one regional round (RoundEngine::GrantRound) and answers it
// with the round's result (aggregator/upstream_link.h). What survives a restart is in the
// store: the granted upstream model as a model version, and two control entries, the grant
// (round, its model's version there, the top's settings) and the last answer (round,
// result version, examples), so a restarted region resumes the granted round, and answers a
// task the top re-sends for a round it had already closed from the stored result.
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include <spdlog/spdlog.h>

#include "aggregator/aggregator_service.h"
#include "config/config_loader.h"
#include "crypto/key_files.h"

namespace fedmesh {

namespace {

constexpr char kGrantControl[] = "upstream_grant";
constexpr char kAnswerControl[] = "upstream_answer";

// "round base_version upstream_version epochs batch lr momentum [codec]"
std::string GrantText(const UpstreamTask& t, uint64_t base_version) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %d %d %.17g %.17g", t.round,
                base_version, t.model_version, t.settings.local_epochs, t.settings.batch_size,
                t.settings.learning_rate, t.settings.momentum);
  return std::string(buf) + (t.update_codec.empty() ? "" : " " + t.update_codec);
}

}  // namespace

Status AggregatorService::StartUpstream() {
  const AggregatorConfig::Upstream& u = config_.upstream;
  FM_ASSIGN_OR_RETURN(Identity identity, FromKey(ReadIdentity(u.key), config_.config_path, "upstream", "key"));
  FM_ASSIGN_OR_RETURN(PublicIdentity top,
                      FromKey(ReadPublicIdentity(u.public_key), config_.config_path, "upstream", "public_key"));
  UpstreamLinkOptions o;
  o.endpoint = u.endpoint;
  o.federation_id = u.federation_id;
  o.model_sha256 = config_.rounds.model_sha256;
  o.num_params = model_->num_params();
  FM_ASSIGN_OR_RETURN(upstream_, UpstreamLink::Create(std::move(o), std::move(identity),
                                                      top.curve_public, env_));
  return Status::OK();
}

Status AggregatorService::PollUpstream() {
  // A few messages per step at most: the regional event loop must keep serving its sites.
  for (int i = 0; i < 8; ++i) {
    FM_ASSIGN_OR_RETURN(std::optional<UpstreamTask> task, upstream_->Poll(0));
    if (!task) return Status::OK();
    FM_RETURN_IF_ERROR(HandleUpstreamTask(std::move(*task)));
  }
  return Status::OK();
}

Status AggregatorService::HandleUpstreamTask(UpstreamTask task) {
  if (upstream_answer_ && upstream_answer_->round == task.round) {
    // Our answer was lost (the top restarted, or we did): send it again from the store.
    auto result = store_->LoadModel(upstream_answer_->model_version);
    if (!result.ok()) {
      return upstream_->Refuse(task.round, task.message_id,
                               "the regional result of round " + std::to_string(task.round) +
                                   " is no longer stored: " + result.status().message());
    }
    spdlog::info("upstream re-sent the task of round {}: answering it again from the store", task.round);
    return upstream_->SendResult(task, *result, upstream_answer_->num_examples,
                                 upstream_answer_->train_loss);
  }
  if (engine_->granted()) {
    if (engine_->round() == task.round) {  // re-sent: the round is under way
      if (!upstream_task_) upstream_task_ = std::move(task);
      return Status::OK();
    }
    return upstream_->Refuse(task.round, task.message_id,
                             "this region is still running round " + std::to_string(engine_->round()) +
                                 "; it takes a new task once that round closes");
  }
  const uint64_t base_version = engine_->model_version() + 1;
  auto granted = engine_->GrantRound(task.round, task.global, task.settings);
  if (!granted.ok()) return upstream_->Refuse(task.round, task.message_id, granted.status().message());
  // The grant is durable before the round it opens: a restart resumes it.
  FM_RETURN_IF_ERROR(store_->SaveModel(base_version, task.global)
                         .WithContext("storing the upstream model of round " + std::to_string(task.round)));
  FM_RETURN_IF_ERROR(store_->SetControl(kGrantControl, GrantText(task, base_version)));
  spdlog::info("upstream round {}: training the top's model (version {} there, {} here) with this "
               "region's sites", task.round, task.model_version, base_version);
  upstream_task_ = std::move(task);
  return Handle(std::move(granted).value());
}

Status AggregatorService::AnswerUpstream(const RoundEngine::RoundClosed& c) {
  if (!upstream_task_ || upstream_task_->round != c.round) return Status::OK();
  const uint64_t examples = c.metrics.num_examples;
  const double loss = c.metrics.train_loss;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %.17g", c.round, c.model_version,
                examples, loss);
  FM_RETURN_IF_ERROR(store_->SetControl(kAnswerControl, buf));
  upstream_answer_ = UpstreamAnswer{c.round, c.model_version, examples, loss};
  Status s = upstream_->SendResult(*upstream_task_, c.global, examples, loss);
  upstream_task_.reset();
  return s;
}

Status AggregatorService::AbandonUpstreamRound(const RoundEngine::RoundRetried& r) {
  spdlog::warn("round {} gave up after attempt {} ({} update(s)): {}; waiting for the top's next task",
               r.round, r.failed_attempt, r.received, r.reason);
  FM_RETURN_IF_ERROR(store_->AbandonRound(r.round).WithContext("giving up round " + std::to_string(r.round)));
  FM_RETURN_IF_ERROR(store_->SetControl(kGrantControl, "none"));
  open_round_.reset();
  if (!upstream_task_ || upstream_task_->round != r.round) return Status::OK();
  const uint64_t message_id = upstream_task_->message_id;
  upstream_task_.reset();
  return upstream_->Refuse(r.round, message_id,
                           "the regional round failed after " + std::to_string(r.failed_attempt) +
                               " attempt(s): " + r.reason);
}

Status AggregatorService::RestoreUpstreamState(bool round_open, uint64_t rounds_closed,
                                               RoundEngine::RestoredState* state) {
  state->last_closed_round = rounds_closed;
  FM_ASSIGN_OR_RETURN(std::optional<std::string> answer, store_->Control(kAnswerControl));
  if (answer) {
    std::istringstream in(*answer);
    UpstreamAnswer a;
    if (in >> a.round >> a.model_version >> a.num_examples >> a.train_loss) upstream_answer_ = a;
  }
  FM_ASSIGN_OR_RETURN(std::optional<std::string> grant, store_->Control(kGrantControl));
  std::optional<std::pair<UpstreamTask, uint64_t>> granted;  // the task and its base version
  if (grant && *grant != "none") {  // "none": the last grant's round was given up
    std::istringstream in(*grant);
    UpstreamTask t;
    uint64_t base = 0;
    if (in >> t.round >> base >> t.model_version >> t.settings.local_epochs >> t.settings.batch_size >>
        t.settings.learning_rate >> t.settings.momentum) {
      in >> t.update_codec;  // optional
      granted.emplace(std::move(t), base);
    } else {
      spdlog::warn("ignoring an unreadable upstream grant in the store: \"{}\"", *grant);
    }
  }
  const bool resumes = granted && granted->first.round > rounds_closed &&
                       (round_open ? state->round == granted->first.round
                                   : state->model_version == granted->second);
  if (resumes) {
    UpstreamTask& t = granted->first;
    FM_ASSIGN_OR_RETURN(t.global, store_->LoadModel(granted->second));
    config_.rounds.local_epochs = t.settings.local_epochs;
    config_.rounds.batch_size = t.settings.batch_size;
    config_.rounds.learning_rate = t.settings.learning_rate;
    config_.rounds.momentum = t.settings.momentum;
    state->round = t.round;
    state->granted = true;
    spdlog::info("resuming upstream round {} (its model is version {} here)", t.round, granted->second);
    upstream_task_ = std::move(t);
  } else if (!round_open) {
    state->round = std::max<uint64_t>(rounds_closed, 1);
    state->granted = false;
    spdlog::info("regional aggregator: {} round(s) closed; waiting for the top's next task", rounds_closed);
  }
  return Status::OK();
}

}  // namespace fedmesh
