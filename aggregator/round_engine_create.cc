// RoundEngine (aggregator/round_engine.h): its options' validation, construction, and
// restore from a store's state. The rest of the engine is in round_engine.cc.
#include "aggregator/round_engine.h"

#include <cmath>
#include <utility>

#include "aggregator/weighted_average.h"
#include "core/check.h"
#include "core/codec/codec.h"
#include "core/to_text.h"
#include "crypto/sodium.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {


// The wire's identifier rules (wire_checks.cc CheckId), so the engine never builds a header
// the codec would refuse.
constexpr size_t kMaxIdBytes = 256;

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

}  // namespace

Status Validate(const RoundEngineOptions& o) {
  FM_RETURN_IF_ERROR(CheckId(o.federation_id, "federation_id"));
  FM_RETURN_IF_ERROR(CheckId(o.aggregator_id, "aggregator_id"));
  auto bad = [](std::string_view field, const auto& value, std::string_view rule) {
    return Status::InvalidArgument(std::string(field) + " is " + ToText(value) + "; it must be " +
                                   std::string(rule));
  };
  if (o.total_rounds < 1) return bad("total_rounds", o.total_rounds, ">= 1");
  if (o.failure_backoff_max_rounds < 0) return bad("failure_backoff_max_rounds", o.failure_backoff_max_rounds, ">= 0");
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
      return bad("federated_eval.finetune_epochs", e.finetune_epochs, "<= " + ToText(wire::kMaxEvalEpochs));
  }
  if (o.model_after_stats && !o.federated_stats.enabled) {
    return Status::InvalidArgument("model_after_stats is set but federated_stats is off: it would never run");
  }
  if (o.federated_stats.enabled) {
    const FederatedStatsSettings& st = o.federated_stats;
    if (st.bins > wire::kMaxStatsBins) {
      return bad("federated_stats.bins", st.bins, "<= " + ToText(wire::kMaxStatsBins));
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
    return Status::InvalidArgument("min_clients (" + ToText(o.min_clients) +
                                   ") exceeds clients_per_round (" + ToText(o.clients_per_round) +
                                   "); a round could never reach its quorum");
  }
  if (o.min_available_clients != 0 && o.min_available_clients < o.min_clients) {
    return Status::InvalidArgument("min_available_clients (" + ToText(o.min_available_clients) +
                                   ") is below min_clients (" + ToText(o.min_clients) +
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
          "buffer_size (" + ToText(o.buffer_size) + ") must be in [min_clients, clients_per_round] = [" +
          ToText(o.min_clients) + ", " + ToText(o.clients_per_round) +
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
    return Status::InvalidArgument("the global model holds " + ToText(global[i]) + " at index " +
                                   ToText(i));
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
    return bad("round " + ToText(state.round) +
               " is outside [1, total_rounds = " + ToText(options.total_rounds) + "]");
  }
  if (state.attempt < 1) return bad("attempt is 0; attempts count from 1");
  if (state.attempt > static_cast<uint64_t>(options.max_retries) + 1) {
    return bad("attempt " + ToText(state.attempt) +
               " exceeds max_retries + 1 = " + ToText(options.max_retries + 1));
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
      return bad("accepted update from " + u.node_id + " has " + ToText(u.params.size()) +
                 " elements; the model has " + ToText(state.global.size()));
    }
    if (size_t i = FirstNonFinite(u.params); i != u.params.size()) {
      return bad("accepted update from " + u.node_id + " holds " + ToText(u.params[i]) + " at index " +
                 ToText(i));
    }
    std::string id = u.node_id;
    if (!accepted.emplace(id, Accepted{std::move(u), restored.train_loss, 0, std::nullopt}).second) {
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
      return bad("granted round " + ToText(state.round) + " is not after the last closed round " +
                 ToText(state.last_closed_round));
    }
    e.stats_done_ = true;
  }
  for (size_t i = 0; i < state.impute_values.size(); ++i) {
    if (!std::isfinite(state.impute_values[i])) return bad("impute value " + ToText(i) + " is not finite");
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

}  // namespace fedmesh
