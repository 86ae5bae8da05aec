// RoundEngine (aggregator/round_engine.h): message dispatch, timers, rounds (selection,
// tasks, accepting updates, closing, retries). Its other parts: round_engine_create.cc
// (options, construction, restore), round_engine_departures.cc (disconnect, revocation,
// failed tasks), round_engine_secagg.cc, round_engine_eval.cc (federated evaluation),
// round_engine_stats.cc (federated statistics).
#include "aggregator/round_engine.h"

#include <sodium.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "aggregator/weighted_average.h"
#include "core/check.h"
#include "crypto/sodium.h"
#include "core/codec/payload.h"
#include "core/codec/update_prediction.h"
#include "core/to_text.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {

constexpr size_t kMaxRejectText = 1024;

}  // namespace

std::string_view RejectCauseName(RejectCause cause) {
  switch (cause) {
    case RejectCause::kWrongFederation:
      return "wrong_federation";
    case RejectCause::kUnknownNode:
      return "unknown_node";
    case RejectCause::kMalformed:
      return "malformed";
    case RejectCause::kWrongRound:
      return "wrong_round";
    case RejectCause::kLate:
      return "late";
    case RejectCause::kNotSelected:
      return "not_selected";
    case RejectCause::kDuplicate:
      return "duplicate";
    case RejectCause::kWrongShape:
      return "wrong_shape";
    case RejectCause::kNonFinite:
      return "non_finite";
  }
  return "unknown";
}

wire::RejectReason ToWireReason(RejectCause cause) {
  using R = wire::RejectReason;
  switch (cause) {
    case RejectCause::kWrongFederation:
      return R::kUnknownFederation;
    case RejectCause::kUnknownNode:
      return R::kNotEnrolled;
    case RejectCause::kMalformed:
      return R::kMalformed;
    case RejectCause::kWrongRound:
      return R::kWrongRound;
    case RejectCause::kLate:
      return R::kLate;
    case RejectCause::kNotSelected:
      return R::kUnspecified;
    case RejectCause::kDuplicate:
      return R::kDuplicate;
    case RejectCause::kWrongShape:
      return R::kWrongShape;
    case RejectCause::kNonFinite:
      return R::kNonFinite;
  }
  return R::kUnspecified;
}


std::vector<RoundEngine::Output> RoundEngine::Start() {
  FM_CHECK(!started_);
  started_ = true;
  std::vector<Output> out;
  const double now = env_->NowSeconds();
  round_started_s_ = now;
  if (phase_ == Phase::kRoundOpen) {  // restored mid-round
    deadline_s_ = now + options_.timeout_s;
    fit_task_ = BuildFitTask();
    out.push_back(SetTimer{deadline_s_});
    if (RoundFull()) CloseRound(out);
  } else if (phase_ == Phase::kWaitingForNodes) {
    if (Status can = strategy_->CanRunAnotherRound(); !can.ok()) {
      Finish(Status::OK(), out, can.message());
    }
  }
  return out;
}

std::vector<RoundEngine::Output> RoundEngine::OnMessage(const std::string& from,
                                                        const wire::Message& m) {
  FM_CHECK(started_);
  std::vector<Output> out;
  if (m.header.federation_id != options_.federation_id) {
    Reject(from, m, RejectCause::kWrongFederation,
           "federation \"" + m.header.federation_id + "\" is not this aggregator's (\"" +
               options_.federation_id + "\")",
           out);
    return out;
  }
  if (m.header.sender_id != from) {
    Reject(from, m, RejectCause::kMalformed,
           "header sender_id \"" + m.header.sender_id + "\" differs from the authenticated peer",
           out);
    return out;
  }
  if (const auto* reg = std::get_if<wire::Register>(&m.body)) {
    HandleRegister(from, m, *reg, out);
  } else if (const auto* fit = std::get_if<wire::FitResult>(&m.body)) {
    HandleFitResult(from, m, *fit, out);
  } else if (std::holds_alternative<wire::SecAggAdvertiseKeys>(m.body) ||
             std::holds_alternative<wire::SecAggShareKeys>(m.body) ||
             std::holds_alternative<wire::SecAggMaskedInput>(m.body) ||
             std::holds_alternative<wire::SecAggUnmaskShares>(m.body)) {
    HandleSecAgg(from, m, out);
  } else if (std::holds_alternative<wire::Heartbeat>(m.body)) {
    if (!connected(from)) {
      Reject(from, m, RejectCause::kUnknownNode, "heartbeat from a node that is not registered",
             out);
    }
  } else if (const auto* rej = std::get_if<wire::Reject>(&m.body)) {
    // Never answered with a Reject (that could loop). TASK_FAILED: the node will not
    // answer its task, so its round stops waiting; other reasons are only logged by the
    // driver.
    if (rej->reason == wire::RejectReason::kTaskFailed) HandleTaskFailed(from, m, *rej, out);
  } else {
    Reject(from, m, RejectCause::kMalformed,
           "nodes do not send " + std::string(wire::MessageTypeName(wire::TypeOf(m.body))), out);
  }
  return out;
}

std::vector<RoundEngine::Output> RoundEngine::OnTimer(double now) {
  FM_CHECK(started_);
  std::vector<Output> out;
  if (eval_ && now >= eval_->deadline_s()) CloseEval(out);
  if (stats_ && now >= stats_->deadline_s()) {
    if (stats_secagg_) {
      AdvanceStatsSecAgg(/*at_deadline=*/true, out);
    } else {
      AdvanceStats(out);
    }
  }
  if (phase_ != Phase::kRoundOpen || now < deadline_s_) return out;  // stale or early
  if (secagg_) {
    AdvanceSecAgg(/*at_deadline=*/true, out);
  } else if (accepted_.size() >= static_cast<size_t>(options_.min_clients)) {
    CloseRound(out);
  } else {
    RetryOrGiveUp(out);
  }
  return out;
}

size_t RoundEngine::SecureUniform(size_t n) {
  FM_CHECK(n > 0 && n <= UINT32_MAX);
  return static_cast<size_t>(::randombytes_uniform(static_cast<uint32_t>(n)));
}

// ---- Message handling --------------------------------------------------------------------

void RoundEngine::HandleRegister(const std::string& from, const wire::Message& m,
                                 const wire::Register& r, std::vector<Output>& out) {
  if (r.node_id != from) {
    Reject(from, m, RejectCause::kMalformed,
           "Register node_id \"" + r.node_id + "\" differs from the authenticated peer", out);
    return;
  }
  NodeInfo& node = nodes_[from];
  node.num_examples = r.num_examples;
  node.capabilities = r.capabilities;
  if (!node.connected) ++connected_;
  node.connected = true;

  wire::Message ack{OutHeader(), wire::RegisterAck{from, options_.heartbeat_interval_ms}};
  out.push_back(Send{from, std::move(ack), std::nullopt});

  if (phase_ == Phase::kRoundOpen) {
    // A selected node that (re)connects before answering gets its task (again): it may have
    // restarted, or the aggregator may have.
    if (IsSelected(from) && !accepted_.contains(from)) SendFitTask(from, out);
  } else if (phase_ == Phase::kWaitingForNodes) {
    TryOpenRound(out);
  }
}

void RoundEngine::HandleFitResult(const std::string& from, const wire::Message& m,
                                  const wire::FitResult& r, std::vector<Output>& out) {
  auto reject = [&](RejectCause cause, std::string text) {
    Reject(from, m, cause, std::move(text), out);
  };
  const std::string claimed = "round " + ToText(r.round);
  if (!connected(from)) {
    return reject(RejectCause::kUnknownNode,
                  "node is not registered (or disconnected since); send Register first");
  }
  if (r.round != m.header.round) {
    return reject(RejectCause::kMalformed, "FitResult round " + ToText(r.round) +
                                               " differs from header round " + ToText(m.header.round));
  }
  if (r.evaluation) return HandleEvalResult(from, m, r, out);
  if (r.statistics) return HandleStatsResult(from, m, r, out);
  if (phase_ == Phase::kFinished) {
    return reject(RejectCause::kLate, "update for " + claimed + " after the federation finished");
  }
  if (secagg_ && r.round == round_) {
    return reject(RejectCause::kMalformed, claimed + " aggregates securely: send the SecAgg "
                                           "messages, not a FitResult update");
  }
  // A buffered round takes updates trained from earlier models, up to max_staleness.
  double staleness_weight = 1.0;
  if (r.round < round_ && buffered()) {
    const uint64_t tau = round_ - r.round;
    if (tau > static_cast<uint64_t>(options_.max_staleness)) {
      return reject(RejectCause::kLate, "update for " + claimed + " is " + ToText(tau) +
                                            " models old; max_staleness is " +
                                            ToText(options_.max_staleness));
    }
    if (nodes_[from].task_round != r.round) {
      return reject(RejectCause::kLate, "update for " + claimed +
                                            ", a task the node no longer holds (superseded)");
    }
    staleness_weight = 1.0 / std::sqrt(1.0 + static_cast<double>(tau));
  } else if (r.round < round_) {
    return reject(
        RejectCause::kLate,
        "update for " + claimed + ", which has closed; the current round is " + ToText(round_));
  }
  if (r.round > round_) {
    return reject(
        RejectCause::kWrongRound,
        "update for " + claimed + ", which has not started; the current round is " + ToText(round_));
  }
  if (phase_ != Phase::kRoundOpen) {
    return reject(RejectCause::kLate,
                  "update for " + claimed + ", whose attempt closed; waiting for nodes to retry");
  }
  if (env_->NowSeconds() >= deadline_s_) {
    return reject(RejectCause::kLate, "update for " + claimed + " after its deadline");
  }
  if (accepted_.contains(from)) {
    return reject(RejectCause::kDuplicate, "second update for " + claimed);
  }
  if (!IsSelected(from)) {
    if (earlier_selected_.contains(from)) {
      return reject(RejectCause::kLate, "update for an earlier attempt of " + claimed +
                                            ", which timed out; now at attempt " + ToText(attempt_));
    }
    return reject(RejectCause::kNotSelected, "node was not selected for " + claimed);
  }
  if (r.num_examples == 0) {
    return reject(RejectCause::kMalformed, "update reports 0 training examples");
  }
  // The weight is bounded by the registration (0: not known) and the configured cap.
  uint64_t weight = r.num_examples;
  if (const uint64_t registered = nodes_[from].num_examples; registered > 0) {
    weight = std::min(weight, registered);
  }
  if (options_.max_examples_per_node > 0) weight = std::min(weight, options_.max_examples_per_node);
  const uint64_t claimed_examples = weight < r.num_examples ? r.num_examples : 0;
  if (claimed_examples > 0) ++weight_violations_;
  if (!std::isfinite(r.train_loss)) {
    return reject(RejectCause::kNonFinite, "train_loss is " + ToText(r.train_loss));
  }
  if (!options_.update_codec.empty()) {
    auto used = codec::Chain::Parse(r.update.codec);
    if (!used.ok() || used->name() != options_.update_codec) {
      return reject(RejectCause::kMalformed, "update codec \"" + r.update.codec +
                                                 "\" is not the prescribed \"" +
                                                 options_.update_codec + "\"");
    }
  }
  // Shape first: it bounds what decoding allocates.
  if (r.update.element_count != global_.size()) {
    return reject(RejectCause::kWrongShape, "update has " + ToText(r.update.element_count) +
                                                " elements; the model has " + ToText(global_.size()));
  }
  // Codec "none" carries raw floats, so a NaN there is the node's (kNonFinite below); other
  // chains' decoders refuse non-finite results as malformed bytes.
  Result<std::vector<float>> params = r.update.codec == wire::kCodecNone
                                          ? wire::PayloadFloats(r.update)
                                          : codec::DecodePayload(r.update);
  if (!params.ok()) {
    return reject(RejectCause::kMalformed, "update payload: " + params.status().message());
  }
  if (size_t i = FirstNonFinite(*params); i != params->size()) {
    return reject(RejectCause::kNonFinite,
                  "update holds " + ToText((*params)[i]) + " at index " + ToText(i));
  }
  if (r.applied_prediction && sent_prediction_.size() != global_.size()) {
    return reject(RejectCause::kMalformed,
                  "update applied an update prediction but round " + ToText(round_) +
                      "'s FitTask carried none (the aggregator may have restarted since)");
  }
  // The update is the node's change to the global model: its new weights are global + it
  // (a buffered round's stale change weighted by s(tau)), plus the prediction it subtracted.
  for (size_t i = 0; i < global_.size(); ++i) {
    const double change = r.applied_prediction
                              ? static_cast<double>((*params)[i]) + sent_prediction_[i]
                              : static_cast<double>((*params)[i]);
    (*params)[i] = static_cast<float>(global_[i] + staleness_weight * change);
  }
  if (size_t i = FirstNonFinite(*params); i != params->size()) {
    return reject(RejectCause::kNonFinite,
                  "global + update overflows to " + ToText((*params)[i]) + " at index " + ToText(i));
  }

  out.push_back(UpdateAccepted{round_, from, weight, r.train_loss,
                               options_.report_update_params ? *params : std::vector<float>{},
                               claimed_examples});
  nodes_[from].Trained();
  accepted_.emplace(from, Accepted{ClientUpdate{from, weight, std::move(*params)},
                                   r.train_loss, r.update.bytes.size(), r.record_privacy});
  nodes_[from].task_round = 0;  // buffered: idle until the buffer closes
  if (RoundFull()) CloseRound(out);
}

void RoundEngine::Reject(const std::string& to, const wire::Message& m, RejectCause cause,
                         std::string text, std::vector<Output>& out) {
  if (text.size() > kMaxRejectText) text.resize(kMaxRejectText);
  ++rejected_[static_cast<size_t>(cause)];
  ++rejected_in_round_;
  wire::Message reply{OutHeader(), wire::Reject{ToWireReason(cause), text, m.header.message_id}};
  out.push_back(Send{to, std::move(reply), std::nullopt});
  out.push_back(UpdateRejected{round_, to, wire::TypeOf(m.body), cause, std::move(text)});
}

// ---- Rounds ------------------------------------------------------------------------------

void RoundEngine::TryOpenRound(std::vector<Output>& out) {
  if (pending_finish_) return;  // the last round closed; only its evaluation is open
  if (paused_ || (options_.rounds_on_demand && !granted_)) {
    phase_ = Phase::kWaitingForNodes;
    return;
  }
  const int needed = std::max(options_.min_clients, options_.min_available_clients);
  // Counted first: listing a million registered nodes at every registration would be
  // quadratic while the engine waits for them.
  if (connected_ < static_cast<size_t>(needed)) {
    phase_ = Phase::kWaitingForNodes;
    return;
  }
  if (options_.federated_stats.enabled && !stats_done_) {
    if (!stats_) StartStats(out);  // round 1 opens when the statistics close
    return;
  }
  std::vector<std::string> candidates;
  size_t backing_off = 0;
  for (const auto& [id, node] : nodes_) {
    if (!node.connected) continue;
    // Sorted: std::map order. Busy buffered nodes keep their place.
    if (node.backoff_until_round > round_ && node.task_round == 0) {
      ++backing_off;
      continue;
    }
    candidates.push_back(id);
  }
  if (backing_off > 0 && candidates.size() < static_cast<size_t>(needed)) {
    // Too few without them: nodes that failed lately are selected rather than none.
    candidates.clear();
    for (const auto& [id, node] : nodes_) {
      if (node.connected) candidates.push_back(id);
    }
  }
  // Partial Fisher-Yates: the first k positions become a uniform sample without
  // replacement. Candidates are sorted first, so the draw depends only on the rng state and
  // the set of connected nodes, not on registration order.
  if (buffered()) {
    candidates = SelectBuffered(std::move(candidates));
  } else {
    const size_t k = std::min(candidates.size(), static_cast<size_t>(options_.clients_per_round));
    Rng& rng = env_->rng();
    for (size_t i = 0; i < k; ++i) {
      const size_t left = candidates.size() - i;
      const size_t j =
          i + (options_.secure_selection ? SecureUniform(left) : rng.UniformInt(left));
      std::swap(candidates[i], candidates[j]);
    }
    candidates.resize(k);
  }
  std::sort(candidates.begin(), candidates.end());

  const double now = env_->NowSeconds();
  if (attempt_ == 0) round_started_s_ = now;
  ++attempt_;
  phase_ = Phase::kRoundOpen;
  selected_ = std::move(candidates);
  accepted_.clear();
  deadline_s_ = now + options_.timeout_s;

  secagg_.reset();
  if (options_.secagg.enabled) {
    auto opened = SecAggRound::Open(options_.secagg, options_.federation_id, round_, global_.size(),
                                    static_cast<size_t>(options_.min_clients), selected_);
    if (!opened.ok()) {
      Finish(opened.status().WithContext("opening secure aggregation for round " + ToText(round_)), out);
      return;
    }
    secagg_.emplace(std::move(opened).value());
  }
  fit_task_ = BuildFitTask();

  out.push_back(RoundOpened{round_, attempt_, model_version_, selected_, deadline_s_});
  for (const std::string& id : selected_) {
    // Buffered: a node still training on an earlier model keeps its task.
    if (!buffered() || nodes_[id].task_round == 0) SendFitTask(id, out);
  }
  out.push_back(SetTimer{deadline_s_});
}

std::vector<std::string> RoundEngine::SelectBuffered(std::vector<std::string> ids) {
  std::vector<std::string> busy, idle;
  for (std::string& id : ids) (nodes_[id].task_round != 0 ? busy : idle).push_back(std::move(id));
  // Idle nodes fill the places the busy ones leave, drawn like a synchronous selection.
  const size_t places = static_cast<size_t>(options_.clients_per_round);
  const size_t k = std::min(idle.size(), places > busy.size() ? places - busy.size() : 0);
  Rng& rng = env_->rng();
  for (size_t i = 0; i < k; ++i) {
    const size_t j = i + rng.UniformInt(idle.size() - i);
    std::swap(idle[i], idle[j]);
  }
  idle.resize(k);
  busy.insert(busy.end(), idle.begin(), idle.end());
  return busy;
}

wire::FitTask RoundEngine::BuildFitTask() {
  wire::FitTask task;
  task.round = round_;
  const uint64_t seed = env_->rng().NextU64();
  if (prediction_round_ != round_) {  // first attempt of the round
    prediction_round_ = round_;
    sent_prediction_.clear();
    prediction_payload_ = {};
    if (!next_prediction_.empty() && !secagg_) {
      auto packed = codec::PackWithPrediction(downlink_chain_, global_, next_prediction_, seed);
      if (packed.ok()) {
        prediction_payload_ = std::move(packed->payload);
        sent_prediction_ = std::move(packed->prediction);
      }
    }
  }
  if (!sent_prediction_.empty()) {
    task.global_model = prediction_payload_;
    task.with_prediction = true;
  } else {
    // A lossy downlink chain may refuse a model (fp16 beyond 65504): send it exact instead;
    // the payload names its chain, so nodes decode either.
    auto encoded = codec::EncodePayload(downlink_chain_, global_, seed);
    task.global_model = encoded.ok() ? std::move(*encoded) : wire::FloatPayload(global_);
  }
  task.update_codec = options_.update_codec;
  SetTaskSettings(task);
  task.prox_mu = strategy_->prox_mu();
  task.deadline_unix_ms = 0;  // the engine has no wall clock: see Send::deadline_s
  if (secagg_) task.secagg = secagg_->parameters();
  return task;
}

void RoundEngine::SetTaskSettings(wire::FitTask& task) const {
  task.model_sha256 = options_.model_sha256;
  task.model_graph = options_.model_graph;
  task.loss = options_.loss;
  task.class_weights = options_.class_weights;
  task.pos_weight = options_.pos_weight;
  task.local_epochs = static_cast<uint32_t>(options_.local_epochs);
  task.batch_size = static_cast<uint32_t>(options_.batch_size);
  task.learning_rate = options_.learning_rate;
  task.momentum = options_.momentum;
  task.impute_values = impute_values_;
  task.chunk_data_parts = options_.chunk_data_parts;
}

void RoundEngine::SendFitTask(const std::string& to, std::vector<Output>& out) {
  FM_CHECK(fit_task_.has_value());
  if (buffered()) nodes_[to].task_round = round_;
  out.push_back(Send{to, wire::Message{OutHeader(), *fit_task_}, deadline_s_});
}

void RoundEngine::CloseRound(std::vector<Output>& out) {
  std::vector<ClientUpdate> updates;
  updates.reserve(accepted_.size());
  RoundMetrics metrics;
  double loss_sum = 0.0, loss_weight = 0.0;
  auto note_record_privacy = [&metrics](const wire::RecordPrivacyReport& r) {
    auto& s = metrics.record_privacy;
    if (!s) s.emplace();
    ++s->sites;
    if (s->sites == 1 || r.epsilon > s->epsilon_max) {
      s->epsilon_max = r.epsilon;
      s->delta = r.delta;
    }
  };
  for (auto& [id, a] : accepted_) {
    if (a.record_privacy) note_record_privacy(*a.record_privacy);
    metrics.num_examples += a.update.num_examples;
    if (a.encoded_bytes > 0) {
      metrics.update_bytes += a.encoded_bytes;
      metrics.update_bytes_raw += 4 * static_cast<uint64_t>(a.update.params.size());
    }
    if (std::isfinite(a.train_loss)) {
      loss_sum += static_cast<double>(a.update.num_examples) * a.train_loss;
      loss_weight += static_cast<double>(a.update.num_examples);
    }
    updates.push_back(std::move(a.update));
    // FedBuff averages the (staleness-weighted) changes with equal weights.
    if (buffered()) updates.back().num_examples = 1;
  }
  std::vector<float> next(global_.size());
  Status s = strategy_->Aggregate(global_, updates, next);
  if (!s.ok()) {
    // Every update was validated on arrival, so this is a bug in the strategy or engine.
    Finish(Status::Internal("aggregating round " + ToText(round_) + " failed: " + s.ToString()), out);
    return;
  }
  next_prediction_.clear();
  if (options_.update_prediction > 0) {
    next_prediction_ = codec::PredictUpdate(global_, next, options_.update_prediction);
  }
  global_ = std::move(next);
  ++model_version_;
  ++rounds_completed_;

  metrics.selected = static_cast<uint32_t>(selected_.size());
  metrics.received = static_cast<uint32_t>(updates.size());
  if (secagg_) {  // one aggregate update stands for the contributors' masked inputs
    metrics.received = secagg_contributors_;
    metrics.update_bytes = secagg_->masked_bytes();
    for (const auto& [id, r] : secagg_->record_privacy()) note_record_privacy(r);
    metrics.update_bytes_raw = 4 * static_cast<uint64_t>(global_.size()) * secagg_contributors_;
  }
  metrics.rejected = rejected_in_round_;
  metrics.attempts = attempt_;
  metrics.train_loss = loss_weight > 0 ? loss_sum / loss_weight : std::nan("");
  metrics.duration_s = env_->NowSeconds() - round_started_s_;
  metrics.compression_ratio = metrics.update_bytes > 0
                                  ? static_cast<double>(metrics.update_bytes_raw) /
                                        static_cast<double>(metrics.update_bytes)
                                  : 0.0;
  if (evaluator_) {
    EvalResult eval = evaluator_(global_);
    metrics.test_accuracy = eval.accuracy;
    metrics.test_loss = eval.loss;
    metrics.test_metrics = std::move(eval.metrics);
  }
  metrics.privacy = strategy_->privacy();
  out.push_back(RoundClosed{round_, model_version_, metrics, global_, strategy_->SaveState()});
  MaybeStartEval(out);

  selected_.clear();
  earlier_selected_.clear();
  accepted_.clear();
  fit_task_.reset();
  secagg_.reset();
  secagg_contributors_ = 0;
  rejected_in_round_ = 0;
  attempt_ = 0;
  if (round_ >= options_.total_rounds) {
    Finish(Status::OK(), out);
    return;
  }
  if (Status can = strategy_->CanRunAnotherRound(); !can.ok()) {
    Finish(Status::OK(), out, can.message());
    return;
  }
  if (options_.rounds_on_demand) {
    granted_ = false;  // the next round is the upstream's to grant
    last_closed_round_ = round_;
    phase_ = Phase::kWaitingForNodes;
    return;
  }
  ++round_;
  TryOpenRound(out);
}

Result<std::vector<RoundEngine::Output>> RoundEngine::GrantRound(
    uint64_t round, std::vector<float> global, std::optional<TrainingSettings> settings) {
  if (!options_.rounds_on_demand) {
    return Status::FailedPrecondition("GrantRound needs rounds_on_demand");
  }
  if (phase_ == Phase::kFinished) return Status::FailedPrecondition("the federation has finished");
  if (granted_) {
    return Status::FailedPrecondition("round " + ToText(round_) + " is granted and has not closed");
  }
  if (round <= last_closed_round_) {
    return Status::FailedPrecondition("round " + ToText(round) + " is not after round " +
                                      ToText(last_closed_round_) + ", the last one closed");
  }
  if (global.size() != global_.size()) {
    return Status::InvalidArgument("the granted model has " + ToText(global.size()) +
                                   " parameters; this model has " + ToText(global_.size()));
  }
  if (size_t i = FirstNonFinite(global); i != global.size()) {
    return Status::InvalidArgument("the granted model holds " + ToText(global[i]) + " at index " + ToText(i));
  }
  if (settings) {
    TrainingSettings& t = *settings;
    if (t.local_epochs < 1 || t.batch_size < 1 || !(std::isfinite(t.learning_rate) && t.learning_rate > 0) ||
        !(t.momentum >= 0.0 && t.momentum < 1.0)) {
      return Status::InvalidArgument("the granted training settings are out of range (epochs " +
                                     ToText(t.local_epochs) + ", batch " + ToText(t.batch_size) + ", lr " +
                                     ToText(t.learning_rate) + ", momentum " + ToText(t.momentum) + ")");
    }
    options_.local_epochs = t.local_epochs;
    options_.batch_size = t.batch_size;
    options_.learning_rate = t.learning_rate;
    options_.momentum = t.momentum;
  }
  global_ = std::move(global);
  ++model_version_;
  round_ = round;
  attempt_ = 0;
  earlier_selected_.clear();
  granted_ = true;
  std::vector<Output> out;
  if (started_) TryOpenRound(out);
  return out;
}

void RoundEngine::RetryOrGiveUp(std::vector<Output>& out, std::string why) {
  const auto received = static_cast<uint32_t>(accepted_.size());
  std::string reason = !why.empty() ? std::move(why)
                                    : "only " + ToText(received) + " of " + ToText(selected_.size()) +
                                          " selected nodes answered by the deadline; min_clients is " +
                                          ToText(options_.min_clients);
  secagg_.reset();
  if (attempt_ > static_cast<uint32_t>(options_.max_retries) && options_.rounds_on_demand) {
    // A region gives the round up and waits for its top's next task.
    out.push_back(RoundRetried{round_, attempt_, received, std::move(reason), /*abandoned=*/true});
    ++total_retries_;
    selected_.clear();
    earlier_selected_.clear();
    accepted_.clear();
    fit_task_.reset();
    attempt_ = 0;
    granted_ = false;
    last_closed_round_ = round_;
    phase_ = Phase::kWaitingForNodes;
    return;
  }
  if (attempt_ > static_cast<uint32_t>(options_.max_retries)) {
    Finish(Status::DeadlineExceeded("round " + ToText(round_) + " failed after " + ToText(attempt_) +
                                    " attempts: " + reason),
           out);
    return;
  }
  out.push_back(RoundRetried{round_, attempt_, received, std::move(reason)});
  ++total_retries_;
  earlier_selected_.insert(selected_.begin(), selected_.end());
  selected_.clear();
  accepted_.clear();
  fit_task_.reset();
  TryOpenRound(out);
}

std::vector<RoundEngine::Output> RoundEngine::Pause() {
  paused_ = phase_ != Phase::kFinished;
  return {};
}

std::vector<RoundEngine::Output> RoundEngine::Resume() {
  std::vector<Output> out;
  if (!paused_) return out;
  paused_ = false;
  if (started_ && phase_ == Phase::kWaitingForNodes) TryOpenRound(out);
  return out;
}

std::vector<RoundEngine::Output> RoundEngine::Abort(const std::string& reason) {
  std::vector<Output> out;
  if (phase_ == Phase::kFinished) return out;
  // Everything in flight is dropped: Finish must not wait for an evaluation to close.
  eval_.reset();
  cross_queue_.clear();
  stats_.reset();
  stats_secagg_.reset();
  secagg_.reset();
  pending_finish_.reset();
  paused_ = false;
  Finish(Status::OK(), out, "aborted: " + reason);
  return out;
}

void RoundEngine::Finish(Status status, std::vector<Output>& out, std::string stopped_early) {
  if (eval_) {
    if (status.ok()) {  // the last evaluation closes first
      pending_finish_.emplace(std::move(status), std::move(stopped_early));
      phase_ = Phase::kWaitingForNodes;
      selected_.clear();
      accepted_.clear();
      fit_task_.reset();
      return;
    }
    CloseEval(out);
  }
  phase_ = Phase::kFinished;
  selected_.clear();
  accepted_.clear();
  fit_task_.reset();
  out.push_back(Finished{std::move(status), rounds_completed_, std::move(stopped_early)});
}

// ---- Helpers -----------------------------------------------------------------------------

wire::Header RoundEngine::OutHeader() {
  wire::Header h;
  h.federation_id = options_.federation_id;
  h.sender_id = options_.aggregator_id;
  h.round = round_;
  h.model_version = model_version_;
  h.message_id = next_message_id_++;
  return h;
}

bool RoundEngine::IsSelected(const std::string& node_id) const {
  return std::binary_search(selected_.begin(), selected_.end(), node_id);
}

std::vector<std::string> RoundEngine::answered() const {
  std::vector<std::string> ids;
  for (const auto& [id, a] : accepted_) ids.push_back(id);
  return ids;
}

bool RoundEngine::connected(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it != nodes_.end() && it->second.connected;
}

size_t RoundEngine::connected_count() const { return connected_; }

uint64_t RoundEngine::rejected_total() const {
  uint64_t total = 0;
  for (uint64_t n : rejected_) total += n;
  return total;
}

}  // namespace fedmesh
