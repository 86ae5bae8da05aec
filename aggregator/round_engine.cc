// RoundEngine (aggregator/round_engine.h): options, creation and restore, message dispatch,
// timers, rounds (selection, tasks, accepting updates, closing, retries). Its other parts:
// round_engine_departures.cc (disconnect, revocation, failed tasks), round_engine_secagg.cc,
// round_engine_eval.cc (federated evaluation), round_engine_stats.cc (federated statistics).
#include "aggregator/round_engine.h"

#include <sodium.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "aggregator/weighted_average.h"
#include "core/check.h"
#include "crypto/sodium.h"
#include "core/codec/payload.h"
#include "core/codec/update_prediction.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {

// The wire's identifier rules (wire_codec.cc CheckId), so the engine never builds a header
// the codec would refuse.
constexpr size_t kMaxIdBytes = 256;
constexpr size_t kMaxRejectText = 1024;

Status CheckId(const std::string& value, std::string_view field) {
  if (value.empty()) return Status::InvalidArgument(std::string(field) + " is empty; set it");
  if (value.size() > kMaxIdBytes) {
    return Status::InvalidArgument(std::string(field) + " is " + std::to_string(value.size()) +
                                   " bytes; the limit is " + std::to_string(kMaxIdBytes));
  }
  for (char c : value) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x21 || b > 0x7E) {
      return Status::InvalidArgument(std::string(field) + " \"" + value +
                                     "\" must be printable ASCII without spaces");
    }
  }
  return Status::OK();
}

template <typename T>
std::string Str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Status Validate(const RoundEngineOptions& o) {
  FM_RETURN_IF_ERROR(CheckId(o.federation_id, "federation_id"));
  FM_RETURN_IF_ERROR(CheckId(o.aggregator_id, "aggregator_id"));
  auto bad = [](std::string_view field, const auto& value, std::string_view rule) {
    return Status::InvalidArgument(std::string(field) + " is " + Str(value) + "; it must be " +
                                   std::string(rule));
  };
  if (o.total_rounds < 1) return bad("total_rounds", o.total_rounds, ">= 1");
  if (o.rounds_on_demand) {
    auto refuse = [](std::string_view what) {
      return Status::InvalidArgument("rounds_on_demand (a regional aggregator) " + std::string(what));
    };
    if (o.mode != RoundMode::kSynchronous) return refuse("runs synchronous rounds only");
    if (o.federated_stats.enabled) return refuse("has no federated statistics of its own");
    if (o.update_prediction != 0.0) return refuse("does not predict updates (update_prediction)");
  }
  if (o.federated_eval.enabled) {
    const FederatedEvalSettings& e = o.federated_eval;
    if (e.every < 1) return bad("federated_eval.every", e.every, ">= 1");
    if (e.min_sites < 1) return bad("federated_eval.min_sites", e.min_sites, ">= 1");
    if (!(std::isfinite(e.timeout_s) && e.timeout_s > 0))
      return bad("federated_eval.timeout_s", e.timeout_s, "finite and > 0");
    if (e.cross_eval && e.local_only_epochs == 0)
      return bad("federated_eval.local_only_epochs", e.local_only_epochs,
                 "> 0 with cross_eval: the sites' local-only models are its candidates");
    if (e.finetune_epochs > wire::kMaxEvalEpochs || e.local_only_epochs > wire::kMaxEvalEpochs)
      return bad("federated_eval.finetune_epochs", e.finetune_epochs, "<= " + Str(wire::kMaxEvalEpochs));
  }
  if (o.model_after_stats && !o.federated_stats.enabled) {
    return Status::InvalidArgument("model_after_stats is set but federated_stats is off: it would never run");
  }
  if (o.federated_stats.enabled) {
    const FederatedStatsSettings& st = o.federated_stats;
    if (st.bins > wire::kMaxStatsBins) {
      return bad("federated_stats.bins", st.bins, "<= " + Str(wire::kMaxStatsBins));
    }
    if (st.min_sites < 1) return bad("federated_stats.min_sites", st.min_sites, ">= 1");
    if (!(std::isfinite(st.timeout_s) && st.timeout_s > 0))
      return bad("federated_stats.timeout_s", st.timeout_s, "finite and > 0");
    if (st.quantiles.size() > 100) return bad("federated_stats.quantiles", st.quantiles.size(), "<= 100 levels");
    for (double q : st.quantiles) {
      if (!(q >= 0 && q <= 1)) return bad("federated_stats.quantiles", q, "in [0, 1]");
    }
  }
  if (o.clients_per_round < 1) return bad("clients_per_round", o.clients_per_round, ">= 1");
  if (o.min_clients < 1) return bad("min_clients", o.min_clients, ">= 1");
  if (o.min_clients > o.clients_per_round) {
    return Status::InvalidArgument("min_clients (" + Str(o.min_clients) +
                                   ") exceeds clients_per_round (" + Str(o.clients_per_round) +
                                   "); a round could never reach its quorum");
  }
  if (o.min_available_clients != 0 && o.min_available_clients < o.min_clients) {
    return Status::InvalidArgument("min_available_clients (" + Str(o.min_available_clients) +
                                   ") is below min_clients (" + Str(o.min_clients) +
                                   "); set it to 0 to use min_clients");
  }
  if (!std::isfinite(o.timeout_s) || o.timeout_s <= 0) {
    return bad("timeout_s", o.timeout_s, "finite and > 0");
  }
  if (o.max_retries < 0) return bad("max_retries", o.max_retries, ">= 0");
  if (o.secagg.enabled) {
    if (o.mode != RoundMode::kSynchronous) {
      return Status::InvalidArgument("secagg: secure aggregation needs synchronous rounds, "
                                     "not buffered ones");
    }
    if (!std::isfinite(o.secagg.stage_timeout_s) || o.secagg.stage_timeout_s <= 0) {
      return bad("secagg.stage_timeout_s", o.secagg.stage_timeout_s, "finite and > 0");
    }
    if (!std::isfinite(o.secagg.clip) || o.secagg.clip <= 0) {
      return bad("secagg.clip", o.secagg.clip, "finite and > 0");
    }
    if (o.secagg.bits < 2 || o.secagg.bits > 32) return bad("secagg.bits", o.secagg.bits, "in [2, 32]");
  }
  if (o.mode == RoundMode::kBuffered) {
    if (o.buffer_size < o.min_clients || o.buffer_size > o.clients_per_round) {
      return Status::InvalidArgument(
          "buffer_size (" + Str(o.buffer_size) + ") must be in [min_clients, clients_per_round] = [" +
          Str(o.min_clients) + ", " + Str(o.clients_per_round) +
          "]: each selected node adds at most one update to a buffer");
    }
    if (o.max_staleness < 0) return bad("max_staleness", o.max_staleness, ">= 0");
  }
  if (o.local_epochs < 1) return bad("local_epochs", o.local_epochs, ">= 1");
  if (o.batch_size < 1) return bad("batch_size", o.batch_size, ">= 1");
  if (!std::isfinite(o.learning_rate) || o.learning_rate <= 0) {
    return bad("learning_rate", o.learning_rate, "finite and > 0");
  }
  if (!(o.momentum >= 0 && o.momentum < 1)) return bad("momentum", o.momentum, "in [0, 1)");
  if (o.heartbeat_interval_ms < 1) {
    return bad("heartbeat_interval_ms", o.heartbeat_interval_ms, ">= 1");
  }
  if (!o.update_codec.empty()) {
    FM_RETURN_IF_ERROR(codec::Chain::Parse(o.update_codec).status().WithContext("update_codec"));
  }
  auto downlink = codec::Chain::Parse(o.downlink_codec);
  FM_RETURN_IF_ERROR(downlink.status().WithContext("downlink_codec"));
  if (downlink->has_sparsifier()) {
    return Status::InvalidArgument("downlink_codec \"" + o.downlink_codec +
                                   "\" sparsifies; the global model is sent whole, so use "
                                   "fp16, bf16, int8, qsgd and/or zstd");
  }
  if (!(o.update_prediction >= 0 && o.update_prediction <= 1)) {
    return bad("update_prediction", o.update_prediction, "in [0, 1]");
  }
  if (o.update_prediction > 0 && o.mode != RoundMode::kSynchronous) {
    return Status::InvalidArgument(
        "update_prediction needs synchronous rounds: a buffered update was trained from an "
        "older model than the prediction describes");
  }
  if (o.update_prediction > 0 && o.secagg.enabled) {
    return Status::InvalidArgument(
        "update_prediction does not work with secagg: set it to 0 for secure aggregation");
  }
  return Status::OK();
}

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

// ---- Construction ------------------------------------------------------------------------

RoundEngine::RoundEngine(RoundEngineOptions options, Env* env, std::unique_ptr<Strategy> strategy,
                         std::vector<float> global, Evaluator evaluator)
    : options_(std::move(options)),
      env_(env),
      strategy_(std::move(strategy)),
      evaluator_(std::move(evaluator)),
      global_(std::move(global)) {
  // Validated by CheckCommon: the names parse. Keep them canonical, as nodes will echo them.
  downlink_chain_ = *codec::Chain::Parse(options_.downlink_codec);
  options_.downlink_codec = downlink_chain_.name();
  if (!options_.update_codec.empty()) {
    options_.update_codec = codec::Chain::Parse(options_.update_codec)->name();
  }
}

namespace {

Status CheckCommon(const RoundEngineOptions& options, const Env* env, const Strategy* strategy,
                   const std::vector<float>& global) {
  FM_RETURN_IF_ERROR(Validate(options));
  if (env == nullptr) return Status::InvalidArgument("env is null");
  if (strategy == nullptr) return Status::InvalidArgument("strategy is null");
  if (options.secure_selection) FM_RETURN_IF_ERROR(InitSodium());
  // Checked here, not in Validate: a config is validated before the service reads the
  // enrolled identities into it.
  if (options.secagg.enabled && options.secagg.allowlist.empty()) {
    return Status::InvalidArgument("secagg.allowlist is empty: secure aggregation checks every "
                                   "node's signature against the enrolled identities");
  }
  if (global.empty()) return Status::InvalidArgument("the global model has no parameters");
  if (size_t i = FirstNonFinite(global); i != global.size()) {
    return Status::InvalidArgument("the global model holds " + Str(global[i]) + " at index " +
                                   Str(i));
  }
  return Status::OK();
}

}  // namespace

Result<RoundEngine> RoundEngine::Create(RoundEngineOptions options, Env* env,
                                        std::unique_ptr<Strategy> strategy,
                                        std::vector<float> initial_global, Evaluator evaluator) {
  FM_RETURN_IF_ERROR(CheckCommon(options, env, strategy.get(), initial_global));
  return RoundEngine(std::move(options), env, std::move(strategy), std::move(initial_global),
                     std::move(evaluator));
}

Result<RoundEngine> RoundEngine::Restore(RoundEngineOptions options, Env* env,
                                         std::unique_ptr<Strategy> strategy, Evaluator evaluator,
                                         RestoredState state) {
  FM_RETURN_IF_ERROR(
      CheckCommon(options, env, strategy.get(), state.global).WithContext("restored state"));
  auto bad = [](std::string m) { return Status::InvalidArgument("restored state: " + m); };
  if (state.round < 1 || state.round > options.total_rounds) {
    return bad("round " + Str(state.round) +
               " is outside [1, total_rounds = " + Str(options.total_rounds) + "]");
  }
  if (state.attempt < 1) return bad("attempt is 0; attempts count from 1");
  if (state.attempt > static_cast<uint64_t>(options.max_retries) + 1) {
    return bad("attempt " + Str(state.attempt) +
               " exceeds max_retries + 1 = " + Str(options.max_retries + 1));
  }
  std::vector<std::string> selected = state.selected;
  std::sort(selected.begin(), selected.end());
  for (size_t i = 0; i < selected.size(); ++i) {
    FM_RETURN_IF_ERROR(CheckId(selected[i], "restored state: selected node id"));
    if (i > 0 && selected[i] == selected[i - 1]) {
      return bad("node " + selected[i] + " is selected twice");
    }
  }
  std::map<std::string, Accepted> accepted;
  for (RestoredUpdate& restored : state.accepted) {
    ClientUpdate& u = restored.update;
    if (!std::binary_search(selected.begin(), selected.end(), u.node_id)) {
      return bad("accepted update from " + u.node_id + ", which is not among the selected");
    }
    if (u.num_examples == 0) return bad("accepted update from " + u.node_id + " has 0 examples");
    if (u.params.size() != state.global.size()) {
      return bad("accepted update from " + u.node_id + " has " + Str(u.params.size()) +
                 " elements; the model has " + Str(state.global.size()));
    }
    if (size_t i = FirstNonFinite(u.params); i != u.params.size()) {
      return bad("accepted update from " + u.node_id + " holds " + Str(u.params[i]) + " at index " +
                 Str(i));
    }
    std::string id = u.node_id;
    if (!accepted.emplace(id, Accepted{std::move(u), restored.train_loss}).second) {
      return bad("node " + id + " has two accepted updates");
    }
  }

  FM_RETURN_IF_ERROR(strategy->RestoreState(state.strategy_state, state.global.size())
                         .WithContext("restored state"));
  RoundEngine e(std::move(options), env, std::move(strategy), std::move(state.global),
                std::move(evaluator));
  e.round_ = state.round;
  e.rounds_completed_ = state.round - 1;
  if (e.options_.rounds_on_demand) {
    e.granted_ = state.granted || !selected.empty();
    e.last_closed_round_ = state.last_closed_round;
    if (e.granted_ && state.last_closed_round >= state.round) {
      return bad("granted round " + Str(state.round) + " is not after the last closed round " +
                 Str(state.last_closed_round));
    }
    e.stats_done_ = true;
  }
  for (size_t i = 0; i < state.impute_values.size(); ++i) {
    if (!std::isfinite(state.impute_values[i])) return bad("impute value " + Str(i) + " is not finite");
  }
  e.impute_values_ = std::move(state.impute_values);
  e.model_version_ = state.model_version;
  e.total_retries_ = state.attempt - 1;
  // Statistics precede round 1's first attempt; a restart after it does not repeat them.
  e.stats_done_ = state.round > 1 || state.attempt > 1 || !selected.empty();
  if (selected.empty()) {
    // No attempt was open: the next one is a fresh selection, numbered after the restored.
    e.attempt_ = state.attempt - 1;
    e.phase_ = Phase::kWaitingForNodes;
  } else {
    e.attempt_ = state.attempt;
    e.selected_ = std::move(selected);
    e.accepted_ = std::move(accepted);
    e.phase_ = Phase::kRoundOpen;
  }
  return e;
}

// ---- Inputs ------------------------------------------------------------------------------

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
  const std::string claimed = "round " + Str(r.round);
  if (!connected(from)) {
    return reject(RejectCause::kUnknownNode,
                  "node is not registered (or disconnected since); send Register first");
  }
  if (r.round != m.header.round) {
    return reject(RejectCause::kMalformed, "FitResult round " + Str(r.round) +
                                               " differs from header round " + Str(m.header.round));
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
      return reject(RejectCause::kLate, "update for " + claimed + " is " + Str(tau) +
                                            " models old; max_staleness is " +
                                            Str(options_.max_staleness));
    }
    if (nodes_[from].task_round != r.round) {
      return reject(RejectCause::kLate, "update for " + claimed +
                                            ", a task the node no longer holds (superseded)");
    }
    staleness_weight = 1.0 / std::sqrt(1.0 + static_cast<double>(tau));
  } else if (r.round < round_) {
    return reject(
        RejectCause::kLate,
        "update for " + claimed + ", which has closed; the current round is " + Str(round_));
  }
  if (r.round > round_) {
    return reject(
        RejectCause::kWrongRound,
        "update for " + claimed + ", which has not started; the current round is " + Str(round_));
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
                                            ", which timed out; now at attempt " + Str(attempt_));
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
    return reject(RejectCause::kNonFinite, "train_loss is " + Str(r.train_loss));
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
    return reject(RejectCause::kWrongShape, "update has " + Str(r.update.element_count) +
                                                " elements; the model has " + Str(global_.size()));
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
                  "update holds " + Str((*params)[i]) + " at index " + Str(i));
  }
  if (r.applied_prediction && sent_prediction_.size() != global_.size()) {
    return reject(RejectCause::kMalformed,
                  "update applied an update prediction but round " + Str(round_) +
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
                  "global + update overflows to " + Str((*params)[i]) + " at index " + Str(i));
  }

  out.push_back(UpdateAccepted{round_, from, weight, r.train_loss,
                               options_.report_update_params ? *params : std::vector<float>{},
                               claimed_examples});
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
  for (const auto& [id, node] : nodes_) {
    if (node.connected) candidates.push_back(id);  // sorted: std::map order
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
      Finish(opened.status().WithContext("opening secure aggregation for round " + Str(round_)), out);
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
    Finish(Status::Internal("aggregating round " + Str(round_) + " failed: " + s.ToString()), out);
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
    return Status::FailedPrecondition("round " + Str(round_) + " is granted and has not closed");
  }
  if (round <= last_closed_round_) {
    return Status::FailedPrecondition("round " + Str(round) + " is not after round " +
                                      Str(last_closed_round_) + ", the last one closed");
  }
  if (global.size() != global_.size()) {
    return Status::InvalidArgument("the granted model has " + Str(global.size()) +
                                   " parameters; this model has " + Str(global_.size()));
  }
  if (size_t i = FirstNonFinite(global); i != global.size()) {
    return Status::InvalidArgument("the granted model holds " + Str(global[i]) + " at index " + Str(i));
  }
  if (settings) {
    TrainingSettings& t = *settings;
    if (t.local_epochs < 1 || t.batch_size < 1 || !(std::isfinite(t.learning_rate) && t.learning_rate > 0) ||
        !(t.momentum >= 0.0 && t.momentum < 1.0)) {
      return Status::InvalidArgument("the granted training settings are out of range (epochs " +
                                     Str(t.local_epochs) + ", batch " + Str(t.batch_size) + ", lr " +
                                     Str(t.learning_rate) + ", momentum " + Str(t.momentum) + ")");
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
                                    : "only " + Str(received) + " of " + Str(selected_.size()) +
                                          " selected nodes answered by the deadline; min_clients is " +
                                          Str(options_.min_clients);
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
    Finish(Status::DeadlineExceeded("round " + Str(round_) + " failed after " + Str(attempt_) +
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
