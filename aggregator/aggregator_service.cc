#include "aggregator/aggregator_service.h"

#include <filesystem>

#include "config/config_loader.h"
#include "aggregator/eval_lines.h"
#include "aggregator/site_table.h"
#include "aggregator/stats_report.h"
#include "aggregator/upload_limits.h"

#include "core/builtin_graph.h"
#include "core/graph/graph_model.h"
#include "core/graph/input_normalization.h"
#include "core/stats/normalization_constants.h"
#include "core/onnx/onnx_reader.h"
#include "core/onnx/onnx_writer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <type_traits>
#include <utility>
#include <variant>

#include <spdlog/spdlog.h>

#include "aggregator/strategy.h"
#include "core/data/data_source.h"
#include "core/json_line.h"
#include "core/model_zoo.h"
#include "core/wire/wire_codec.h"
#include "crypto/key_files.h"
#include "crypto/update_signature.h"

namespace fedmesh {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};

// The store's control entry holding the federation's feature means that sites impute
// missing cells with (FitTask::impute_values): kept so a restarted aggregator still sends
// them. Text: the values in %.17g, comma-separated (exact round trip).
constexpr char kImputeControl[] = "impute_values";

std::string ImputeValuesText(const std::vector<double>& values) {
  std::string out;
  char b[32];
  for (double v : values) {
    std::snprintf(b, sizeof b, "%.17g", v);
    out += (out.empty() ? "" : ",") + std::string(b);
  }
  return out;
}

Result<std::vector<double>> ParseImputeValues(const std::string& text, const std::string& db) {
  std::vector<double> out;
  size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string cell = text.substr(at, end - at);
    char* stop = nullptr;
    const double v = std::strtod(cell.c_str(), &stop);
    if (cell.empty() || stop != cell.c_str() + cell.size() || !std::isfinite(v)) {
      return Status::FailedPrecondition("the store " + db + " holds a damaged " + kImputeControl +
                                        " entry: value " + std::to_string(out.size()) + " is \"" + cell + "\"");
    }
    out.push_back(v);
    at = end + 1;
  }
  return out;
}
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

uint64_t WallNowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// The [eval] dataset, for a model with `num_classes` classes: the model fixes the class
// count, so an eval file that lacks the top class still fits it.
Result<Dataset> LoadEvalData(const AggregatorConfig& config, int num_classes) {
  DataSourceSpec spec;
  spec.train = config.eval_dataset;
  spec.test = config.eval_dataset;
  spec.label_column = config.eval_label_column;
  spec.num_classes = num_classes;
  return LoadDataSource(spec, DataSplit::kTest);
}

}  // namespace

Result<std::unique_ptr<AggregatorService>> AggregatorService::Create(
    const AggregatorConfig& config, Env* env, AggregatorServiceOptions options) {
  if (env == nullptr) return Status::InvalidArgument("AggregatorService needs an Env");
  std::unique_ptr<AggregatorService> s(new AggregatorService());
  s->config_ = config;
  s->env_ = env;
  s->options_ = std::move(options);
  s->options_.transport.deliver_heartbeats = true;  // see ZmqServerOptions
  s->options_.transport.limits.payload_digest = config.payload_digest;
  s->register_limiter_ = PeerRateLimiter(s->options_.register_limit);
  s->reject_limiter_ = PeerRateLimiter(s->options_.reject_limit);
  if (s->options_.progress && config.rounds.total_rounds > 0) {
    s->progress_ = std::make_unique<RoundProgress>(config.rounds.total_rounds, s->options_.progress);
  }
  s->options_.transport.heartbeat_interval_ms =
      static_cast<int>(std::min<uint64_t>(config.rounds.heartbeat_interval_ms, 86400000));

  FM_ASSIGN_OR_RETURN(Identity identity,
                      FromKey(ReadIdentity(config.key_path), config.config_path, "aggregator", "key"));
  FM_ASSIGN_OR_RETURN(std::vector<PublicIdentity> allowlist,
                      FromKey(ReadAllowlist(config.allow_dir), config.config_path, "aggregator", "allow"));
  if (allowlist.empty()) {
    spdlog::warn("allowlist directory {} holds no .pub files: no node can connect until one is "
                 "enrolled and the aggregator reloads (SIGHUP)",
                 config.allow_dir);
  }
  s->SetAllowlist(allowlist);
  // Secure aggregation checks every node's advertised keys against these identities. A
  // SIGHUP reloads the ZAP allowlist; the secure aggregation one is read at start.
  if (s->config_.rounds.secagg.enabled) s->config_.rounds.secagg.allowlist = allowlist;
  // Its ZmqServer takes a chunk's data as its own ZeroMQ part (transport/zmq/multipart.h).
  s->config_.rounds.chunk_data_parts = true;

  // The model fixes its input shape and class count ([model] input_shape / num_classes, or
  // the ONNX file); the eval data must fit it, never the other way round.
  const ModelSpec& spec = config.model;
  s->backend_ = MakeCpuBackend(s->options_.eval_threads);
  FM_ASSIGN_OR_RETURN(s->model_, BuildModel(spec, s->backend_.get()));
  if (config.normalize == "federated" && s->model_->graph_model() == nullptr) {
    // The normalization is graph nodes in front of the model, so a built-in model is
    // trained as its graph (core/builtin_graph.h): same layers, same initial weights.
    s->model_->InitParams(config.model_seed);
    BuiltinGraphOptions graph_options;
    graph_options.training_dropout = true;
    FM_ASSIGN_OR_RETURN(graph::Graph g,
                        BuiltinModelGraph(spec, s->model_->GetParams(), graph_options));
    FM_ASSIGN_OR_RETURN(s->model_, Model::CreateFromGraph(spec.name, s->backend_.get(), std::move(g)));
    spdlog::info("[data] normalize = \"federated\": the built-in '{}' is trained as its ONNX graph, "
                 "with the federation's input normalization in front from round 1",
                 spec.name);
  }
  if (s->options_.eval_data) {
    s->eval_data_ = std::move(s->options_.eval_data);
    s->options_.eval_data.reset();
  } else if (!config.eval_dataset.empty()) {
    const int classes = IsRegression(config.loss.kind) ? 0 : s->model_->num_classes();
    auto data = LoadEvalData(config, classes);
    if (!data.ok()) return data.status().WithContext("[eval] dataset");
    s->eval_data_ = std::move(data).value();
  }
  if (const graph::GraphModel* g = s->model_->graph_model()) {
    // Sites build the model from the FitTask, so they need no model file.
    FM_ASSIGN_OR_RETURN(s->config_.rounds.model_graph, onnx::SerializeArchitecture(g->graph()));
    s->config_.rounds.model_sha256 = g->hash();
    spdlog::info("model {}: graph sha256 {}, {} trainable parameters + {} state values",
                 spec.name, g->hash(), g->num_trainable(), g->num_state());
  }
  if (config.normalize == "federated") {
    s->base_graph_ = s->model_->graph_model()->graph();
    const graph::Dims& in = s->base_graph_->inputs.empty() ? graph::Dims{} : s->base_graph_->inputs[0].dims;
    const auto constants = static_cast<size_t>(in.size() == 2 || in.size() == 4 ? std::max<int64_t>(in[1], 0) : 0);
    const std::vector<double> zeros(constants, 0.0), ones(constants, 1.0);
    FM_RETURN_IF_ERROR(graph::AddInputNormalization(*s->base_graph_, zeros, ones)
                           .status()
                           .WithContext("[data] normalize = \"federated\""));
    AggregatorService* self = s.get();
    s->config_.rounds.model_after_stats = [self](const FederationStatistics& stats) {
      return self->NormalizeModel(stats);
    };
  }
  FM_RETURN_IF_ERROR(s->model_->SetLoss(config.loss).WithContext("[train] loss"));
  if (s->eval_data_) {
    FM_RETURN_IF_ERROR(s->model_->CheckCompatible(*s->eval_data_)
                           .WithContext("[eval] dataset " + config.eval_dataset +
                                        " does not fit the model ([model] input_shape, "
                                        "num_classes)"));
    TrainerOptions topt;
    topt.loss = config.loss;
    s->trainer_ = std::make_unique<Trainer>(s->model_.get(), topt, env);
  }

  FM_ASSIGN_OR_RETURN(s->store_, AggregatorStore::Open(config.db_path));
  // fedmesh-admin abort is final for this store: a restart (systemd's, an operator's) must
  // not quietly carry on.
  FM_ASSIGN_OR_RETURN(std::optional<std::string> aborted, s->store_->Control("aborted"));
  if (aborted) {
    return Status::FailedPrecondition("the federation in " + config.db_path + " was aborted " +
                                      *aborted + "; start another with a new [aggregator] db");
  }
  {
    FM_ASSIGN_OR_RETURN(std::optional<StoredGraph> stored, s->store_->ModelGraph());
    // A built-in model is remembered by its spec, so fedmesh-model can export it as ONNX.
    const std::string sha =
        s->config_.rounds.model_sha256.empty() ? kBuiltinModelGraph : s->config_.rounds.model_sha256;
    if (stored && stored->sha256 != sha && s->base_graph_) {
      // A restart after the statistics: the stored model is the configured one with the
      // federation's input normalization in front; train that one.
      onnx::ReaderLimits limits;
      limits.absent_weights_as_zeros = true;
      auto g = onnx::ParseOnnx(stored->onnx, limits);
      auto base = g.ok() ? graph::RemoveInputNormalization(*g) : g.status();
      if (g.ok() && base.ok() && graph::HasInputNormalization(*g) && graph::CanonicalHash(*base) == sha) {
        FM_RETURN_IF_ERROR(s->ReplaceModel(std::move(*g), /*keep_params=*/false));
        s->config_.rounds.model_sha256 = stored->sha256;
        s->config_.rounds.model_graph = stored->onnx;
        spdlog::info("the store's model is the configured one with the federation's input "
                     "normalization (graph sha256 {})", stored->sha256);
      }
    }
    if (stored && stored->sha256 != s->config_.rounds.model_sha256 && stored->sha256 != sha) {
      return Status::FailedPrecondition(
          "the store " + config.db_path + " belongs to a model with graph sha256 " +
          stored->sha256 + " but the configured model " +
          (sha == kBuiltinModelGraph ? "is the built-in '" + spec.name + "'" : "has " + sha) +
          ": use the model this store was created with, or a new [aggregator] db");
    }
    if (!stored) {
      FM_RETURN_IF_ERROR(s->store_->SaveModelGraph(
          sha, sha == kBuiltinModelGraph ? SpecToText(spec) : s->config_.rounds.model_graph));
    }
  }
  FM_RETURN_IF_ERROR(s->InitEngine());

  ZmqServerOptions& t = s->options_.transport;
  t.limits = UploadLimits(t.limits, s->model_->num_params());
  t.max_pending_upload_bytes =
      UploadBudget(t.limits, config.max_pending_upload_bytes, config.rounds.clients_per_round);
  t.upload_idle_timeout_ms =
      static_cast<int>(std::llround(std::max(config.upload_idle_timeout_s, 0.001) * 1000.0));
  spdlog::info("upload limits: {} bytes per message, {} bytes of partial uploads in all, idle "
               "uploads dropped after {} s",
               t.limits.max_payload_bytes, t.max_pending_upload_bytes, config.upload_idle_timeout_s);
  FM_ASSIGN_OR_RETURN(s->server_, ZmqServer::Create(t, &identity, allowlist));
  FM_ASSIGN_OR_RETURN(s->endpoint_, s->server_->Bind(config.listen));
  spdlog::info("listening on {} (federation {}, {} enrolled sites, store {})", s->endpoint_,
               config.federation_id, allowlist.size(), config.db_path);
  if (!config.metrics_listen.empty()) {
    FM_ASSIGN_OR_RETURN(s->exporter_, MetricsExporter::Start(config.metrics_listen));
    s->prom_ = std::make_unique<AggregatorMetrics>(s->exporter_->registry());
    spdlog::info("Prometheus metrics on {}", s->exporter_->url());
  }

  FM_RETURN_IF_ERROR(s->StartOperations(identity));
  if (!config.upstream.endpoint.empty()) FM_RETURN_IF_ERROR(s->StartUpstream());

  if (!s->finished_) FM_RETURN_IF_ERROR(s->Handle(s->engine_->Start()));
  s->PublishStatus(true);
  return s;
}

AggregatorService::~AggregatorService() = default;

Status AggregatorService::ReplaceModel(graph::Graph g, bool keep_params) {
  FM_ASSIGN_OR_RETURN(auto m, Model::CreateFromGraph(config_.model.name, backend_.get(), std::move(g)));
  if (keep_params) FM_RETURN_IF_ERROR(m->SetParams(model_->GetParams()));
  FM_RETURN_IF_ERROR(m->SetLoss(config_.loss).WithContext("[train] loss"));
  model_ = std::move(m);
  if (trainer_) {
    TrainerOptions topt;
    topt.loss = config_.loss;
    trainer_ = std::make_unique<Trainer>(model_.get(), topt, env_);
  }
  return Status::OK();
}

Result<std::pair<std::string, std::string>> AggregatorService::NormalizeModel(
    const FederationStatistics& stats) {
  FM_ASSIGN_OR_RETURN(NormalizationConstants c,
                      NormalizationConstantsFor(stats, base_graph_->inputs.at(0).dims));
  FM_ASSIGN_OR_RETURN(graph::Graph g, graph::AddInputNormalization(*base_graph_, c.mean, c.stddev));
  const std::string sha = graph::CanonicalHash(g);
  FM_ASSIGN_OR_RETURN(std::string bytes, onnx::SerializeArchitecture(g));
  // Constants are not parameters: the weights carry over unchanged.
  FM_RETURN_IF_ERROR(ReplaceModel(std::move(g), /*keep_params=*/true));
  FM_RETURN_IF_ERROR(store_->SaveModelGraph(sha, bytes));
  spdlog::info("input normalization from the federation's statistics ({} {}) in front of the "
               "model: graph sha256 {}", c.mean.size(),
               base_graph_->inputs.at(0).dims.size() == 4 ? "channels" : "features", sha);
  return std::make_pair(sha, bytes);
}

Status AggregatorService::InitEngine() {
  FM_ASSIGN_OR_RETURN(auto strategy, MakeStrategy(config_.strategy, config_.strategy_options));
  Evaluator evaluator;
  if (trainer_) evaluator = [this](std::span<const float> g) { return Evaluate(g); };

  // Moved out of the Result rather than bound with FM_ASSIGN_OR_RETURN: GCC 12 reports a
  // false maybe-uninitialized on the optional otherwise.
  auto latest_result = store_->LatestModel();
  if (!latest_result.ok()) return latest_result.status();
  std::optional<StoredModel>& latest = latest_result.value();
  FM_ASSIGN_OR_RETURN(std::optional<OpenRoundState> open, store_->LoadOpenRound());
  FM_ASSIGN_OR_RETURN(std::vector<RoundMetrics> closed, store_->Metrics());
  const uint64_t rounds_closed = closed.empty() ? 0 : closed.back().round;

  if (!latest) {
    // A new federation: the global model from the configured seed, stored as version 0.
    model_->InitParams(config_.model_seed);
    std::vector<float> init = model_->GetParams();
    FM_RETURN_IF_ERROR(store_->SaveModel(0, init));
    auto engine = RoundEngine::Create(config_.rounds, env_, std::move(strategy), std::move(init),
                                      std::move(evaluator));
    if (!engine.ok()) return engine.status();
    engine_.emplace(std::move(engine).value());
    spdlog::info("new federation: model {} ({} parameters, seed {}) stored as version 0",
                 config_.model.name, model_->num_params(), config_.model_seed);
    return Status::OK();
  }
  if (latest->params.size() != model_->num_params()) {
    return Status::FailedPrecondition(
        "the store " + config_.db_path + " holds a model of " +
        std::to_string(latest->params.size()) + " parameters but the configured model '" +
        config_.model.name + "' has " + std::to_string(model_->num_params()) +
        ": use the config this store was created with, or a new [aggregator] db");
  }

  RoundEngine::RestoredState state;
  state.model_version = latest->version;
  state.global = std::move(latest->params);
  // The server optimiser's moments as committed with this model: the restart continues
  // with the same momentum instead of a cold start.
  FM_ASSIGN_OR_RETURN(state.strategy_state, store_->StrategyState(state.model_version));
  if (open) {
    state.round = open->round;
    state.attempt = open->attempt;
    state.selected = open->selected;
    std::sort(state.selected.begin(), state.selected.end());
    for (AcceptedUpdate& u : open->updates) {
      RoundEngine::RestoredUpdate r;
      r.update.node_id = u.node;
      r.update.num_examples = u.num_examples;
      r.update.params = std::move(u.params);
      r.train_loss = u.train_loss;
      state.accepted.push_back(std::move(r));
    }
    open_round_ = open->round;
    spdlog::info("resuming round {} attempt {} with {} accepted update(s) of {} selected",
                 state.round, state.attempt, state.accepted.size(), state.selected.size());
  } else {
    if (rounds_closed >= config_.rounds.total_rounds) {
      finished_ = true;
      finish_status_ = Status::OK();
      spdlog::info("the store already holds all {} rounds (model version {}): nothing to do",
                   config_.rounds.total_rounds, state.model_version);
    }
    state.round = std::min<uint64_t>(rounds_closed + 1, config_.rounds.total_rounds);
    state.attempt = 1;
    if (!config_.rounds.rounds_on_demand) {
      spdlog::info("continuing from model version {} at round {}", state.model_version,
                   state.round);
    }
  }
  if (config_.rounds.rounds_on_demand) {
    FM_RETURN_IF_ERROR(RestoreUpstreamState(open.has_value(), rounds_closed, &state));
  }
  FM_ASSIGN_OR_RETURN(std::optional<std::string> impute, store_->Control(kImputeControl));
  if (impute && !impute->empty()) {
    FM_ASSIGN_OR_RETURN(state.impute_values, ParseImputeValues(*impute, config_.db_path));
    spdlog::info("restored the federation's feature means for imputation ({} features)",
                 state.impute_values.size());
  }
  auto engine = RoundEngine::Restore(config_.rounds, env_, std::move(strategy),
                                     std::move(evaluator), std::move(state));
  if (!engine.ok()) return engine.status().WithContext("restoring from " + config_.db_path);
  engine_.emplace(std::move(engine).value());
  return Status::OK();
}

void AggregatorService::SetAllowlist(const std::vector<PublicIdentity>& allowlist) {
  allowlist_ = allowlist;
  name_of_key_.clear();
  identity_of_key_.clear();
  for (const PublicIdentity& p : allowlist) {
    name_of_key_[p.curve_public_z85()] = p.name;
    identity_of_key_.emplace(p.curve_public_z85(), p);
  }
}

std::optional<std::string> AggregatorService::SiteOfKey(const std::string& key_z85) const {
  auto it = name_of_key_.find(key_z85);
  if (it == name_of_key_.end()) return std::nullopt;
  return it->second;
}

Status AggregatorService::ReloadAllowlist() {
  FM_ASSIGN_OR_RETURN(std::vector<PublicIdentity> allowlist, ReadAllowlist(config_.allow_dir));
  std::map<std::string, std::string> sites;
  for (const PublicIdentity& p : allowlist) sites[p.curve_public_z85()] = p.name;
  FM_RETURN_IF_ERROR(CheckSiteKeysApart(sites));
  const std::map<std::string, std::string> before = name_of_key_;
  server_->Reload(allowlist);
  SetAllowlist(allowlist);
  if (!kicked_.empty()) {
    spdlog::info("the reload re-admits the kicked site(s) still enrolled");
    kicked_.clear();
  }
  spdlog::info("allowlist reloaded from {}: {} enrolled sites", config_.allow_dir,
               allowlist.size());
  // Revocation takes effect now, not at the next handshake: the connection is closed, the
  // engine forgets the node (the open round stops waiting for it) and nothing more is sent.
  for (const auto& [key, name] : before) {
    if (name_of_key_.contains(key)) continue;
    const bool was_connected = server_->Disconnect(key);
    if (auto k = key_of_name_.find(name); k != key_of_name_.end() && k->second == key) {
      key_of_name_.erase(k);
    }
    spdlog::warn("site {} revoked (key {}): {}", name, key,
                 was_connected ? "its connection is closed" : "it was not connected");
    FM_RETURN_IF_ERROR(Handle(engine_->OnRevoke(name)));
  }
  return Status::OK();
}

EvalResult AggregatorService::Evaluate(std::span<const float> global) {
  EvalResult r{std::nan(""), std::nan(""), {}};
  Status s = model_->SetParams(global);
  if (!s.ok()) {
    spdlog::warn("evaluation skipped: {}", s.ToString());
    return r;
  }
  auto stats = trainer_->Evaluate(*eval_data_);
  if (!stats.ok()) {
    spdlog::warn("evaluation failed: {}", stats.status().ToString());
    return r;
  }
  r.accuracy = stats->accuracy;
  r.loss = stats->loss;
  r.metrics = stats->metrics;
  return r;
}

Result<bool> AggregatorService::Step(int max_wait_ms) {
  if (finished_) return true;
  FM_RETURN_IF_ERROR(PollAdmin());
  if (upstream_) FM_RETURN_IF_ERROR(PollUpstream());
  PublishStatus(false);
  if (finished_) return true;  // aborted
  const double now = env_->NowSeconds();
  if (!timers_.empty() && *timers_.begin() <= now) {
    timers_.erase(timers_.begin(), timers_.upper_bound(now));
    FM_RETURN_IF_ERROR(Handle(engine_->OnTimer(now)));
    return finished_;
  }
  int wait = std::max(0, max_wait_ms);
  if (!timers_.empty()) {
    const double until_ms = std::ceil((*timers_.begin() - now) * 1000.0);
    wait = static_cast<int>(std::clamp(until_ms, 0.0, static_cast<double>(wait)));
  }
  FM_ASSIGN_OR_RETURN(std::optional<ServerEvent> event, server_->Poll(wait));
  if (event) FM_RETURN_IF_ERROR(HandleEvent(std::move(*event)));
  if (prom_) prom_->NodesConnected(engine_->connected_count());
  return finished_;
}

Status AggregatorService::Run(std::atomic<bool>* stop, std::atomic<bool>* reload) {
  while (!finished_) {
    if (stop != nullptr && stop->load()) {
      spdlog::info("stopping at round {} (state is in {}; a restart resumes it)",
                   engine_->round(), config_.db_path);
      return Status::OK();
    }
    if (reload != nullptr && reload->exchange(false)) {
      Status s = ReloadAllowlist();
      if (!s.ok()) spdlog::error("allowlist reload failed, keeping the old one: {}", s.ToString());
    }
    // Short waits so that stop and reload are seen promptly.
    FM_ASSIGN_OR_RETURN(bool done, Step(200));
    (void)done;
  }
  return finish_status_;
}

Status AggregatorService::HandleEvent(ServerEvent event) {
  return std::visit(
      Overloaded{
          [&](Received& r) -> Status {
            auto name = SiteOfKey(r.peer);
            if (!name || kicked_.contains(*name)) {
              spdlog::warn("message from key {} that is no longer enrolled: ignored", r.peer);
              return Status::OK();
            }
            activity_[*name].last_seen_unix = static_cast<double>(WallNowMs()) / 1000.0;
            const double now = env_->NowSeconds();
            const bool is_register = std::holds_alternative<wire::Register>(r.message.body);
            if (!reject_limiter_.HasToken(*name, now) ||
                (is_register && !register_limiter_.Allow(*name, now))) {
              // Logged at the 1st, 2nd, 4th, 8th... drop: bounded volume under a flood.
              if (++throttled_; (throttled_ & (throttled_ - 1)) == 0) {
                spdlog::warn("dropped {} from {}: over its rate of {} ({} dropped in all)",
                             wire::MessageTypeName(wire::TypeOf(r.message.body)), *name,
                             is_register ? "registrations" : "rejected messages", throttled_);
              }
              return Status::OK();
            }
            if (auto* fit = std::get_if<wire::FitResult>(&r.message.body);
                fit != nullptr && !fit->evaluation && !fit->statistics) {
              // An update is checked against the site's enrolled Ed25519 key before the
              // engine sees it, and its signature kept to be stored with it.
              const PublicIdentity& who = identity_of_key_.at(r.peer);
              const uint64_t version = r.message.header.model_version;
              if (Status v = VerifyUpdate(who, config_.federation_id, version, *fit); !v.ok()) {
                ++bad_signatures_;
                (void)reject_limiter_.Allow(*name, now);
                spdlog::warn("refused an update from {}: {} ({} refused in all)", *name,
                             v.message(), bad_signatures_);
                return Status::OK();
              }
              const wire::PayloadDigest digest = UpdateDigest(*fit);
              verified_[*name] = UpdateSignatureRecord{
                  fit->round, *name,
                  UpdateSigningBytes(config_.federation_id, *name, version, *fit, digest),
                  fit->signature};
            }
            key_of_name_[*name] = r.peer;
            if (is_register) {
              Status s = store_->UpsertNode(*name, r.peer, env_->NowSeconds());
              if (!s.ok()) return s.WithContext("recording node " + *name);
              spdlog::info("node {} registered", *name);
            }
            return Handle(engine_->OnMessage(*name, r.message));
          },
          [&](RejectedInput& r) -> Status {
            auto name = SiteOfKey(r.peer);
            spdlog::warn("dropped undecodable input from {}: {}", name ? *name : r.peer,
                         r.reason.ToString());
            return Status::OK();
          },
          [&](PeerDead& d) -> Status {
            auto name = SiteOfKey(d.peer);
            if (!name) return Status::OK();
            spdlog::warn("node {} silent for {} ms: disconnected", *name, d.silent_ms);
            return Handle(engine_->OnDisconnect(*name));
          },
      },
      event);
}

Status AggregatorService::SendMessage(RoundEngine::Send& send) {
  if (auto* task = std::get_if<wire::FitTask>(&send.message.body)) {
    if (send.deadline_s) {
      const double left_s = std::max(0.0, *send.deadline_s - env_->NowSeconds());
      task->deadline_unix_ms = WallNowMs() + static_cast<uint64_t>(std::llround(left_s * 1000.0));
    }
    // Evaluation tasks are the evaluation's cost, not the round's.
    (task->evaluate_only ? eval_bytes_down_ : bytes_down_) += task->global_model.bytes.size();
    if (!task->evaluate_only) bytes_down_raw_ += 4 * task->global_model.element_count;
  }
  auto key = key_of_name_.find(send.to);
  if (key == key_of_name_.end()) {
    spdlog::warn("cannot send {} to {}: never heard from it",
                 wire::MessageTypeName(wire::TypeOf(send.message.body)), send.to);
    return Status::OK();
  }
  Status s = server_->Send(key->second, send.message);
  // A node that is gone is the engine's business (deadline, retry), not a failure here.
  if (!s.ok()) {
    spdlog::warn("sending {} to {} failed: {}",
                 wire::MessageTypeName(wire::TypeOf(send.message.body)), send.to, s.ToString());
  }
  return Status::OK();
}

Status AggregatorService::Handle(std::vector<RoundEngine::Output> outputs) {
  for (RoundEngine::Output& output : outputs) {
    Status s = std::visit(
        Overloaded{
            [&](RoundEngine::Send& send) { return SendMessage(send); },
            [&](RoundEngine::SetTimer& t) {
              timers_.insert(t.at_seconds);
              return Status::OK();
            },
            [&](RoundEngine::RoundOpened& o) -> Status {
              Status st = o.attempt > 1
                              ? store_->RetryRound(o.round, o.attempt, o.selected, o.deadline_s)
                              : store_->OpenRound(o.round, o.attempt, o.selected, o.deadline_s);
              if (!st.ok()) return st.WithContext("persisting round " + std::to_string(o.round));
              open_round_ = o.round;
              if (prom_) prom_->RoundOpened(o.round, o.selected.size());
              spdlog::info("round {} attempt {} opened with {} node(s), model version {}", o.round,
                           o.attempt, o.selected.size(), o.model_version);
              if (progress_) progress_->Opened(o.round, o.attempt, o.selected.size(), env_->NowSeconds());
              return Status::OK();
            },
            [&](RoundEngine::UpdateAccepted& a) -> Status {
              auto sig = verified_.find(a.node_id);
              Status st = store_->AcceptUpdate(a.round, a.node_id, a.num_examples, a.params,
                                               a.train_loss,
                                               sig != verified_.end() ? &sig->second : nullptr);
              if (sig != verified_.end()) verified_.erase(sig);
              if (!st.ok()) {
                return st.WithContext("persisting the update of " + a.node_id + " for round " +
                                      std::to_string(a.round));
              }
              if (a.claimed_examples > 0) {
                spdlog::warn("round {}: {} claimed {} examples; weighted as {} (its registration "
                             "or [rounds] max_examples_per_node); {} capped claim(s) so far",
                             a.round, a.node_id, a.claimed_examples, a.num_examples,
                             engine_->weight_violations());
              }
              if (prom_) prom_->UpdateAccepted();
              SiteActivity& act = activity_[a.node_id];
              act.last_round = a.round;
              act.last_examples = a.num_examples;
              ++act.updates;
              spdlog::info("round {}: accepted update from {} ({} examples, loss {:.4f})",
                           a.round, a.node_id, a.num_examples, a.train_loss);
              if (progress_) progress_->Accepted(env_->NowSeconds());
              return Status::OK();
            },
            [&](RoundEngine::UpdateRejected& r) -> Status {
              (void)reject_limiter_.Allow(r.node_id, env_->NowSeconds());
              if (prom_) prom_->Rejected(RejectCauseName(r.cause));
              spdlog::warn("round {}: rejected {} from {} ({}): {}", r.round,
                           wire::MessageTypeName(r.type), r.node_id, RejectCauseName(r.cause),
                           r.text);
              if (!open_round_ || *open_round_ != r.round) return Status::OK();
              Status st = store_->RecordRejection(r.round, r.node_id,
                                                  std::string(RejectCauseName(r.cause)));
              if (!st.ok()) return st.WithContext("persisting a rejection");
              return Status::OK();
            },
            [&](RoundEngine::RoundRetried& r) -> Status {
              if (r.abandoned) return AbandonUpstreamRound(r);
              spdlog::warn("round {} attempt {} failed with {} update(s): {}; retrying", r.round,
                           r.failed_attempt, r.received, r.reason);
              return Status::OK();
            },
            [&](RoundEngine::RoundClosed& c) -> Status {
              RoundMetrics m;
              m.round = c.round;
              m.model_version = c.model_version;
              if (c.metrics.test_accuracy) m.test_accuracy = *c.metrics.test_accuracy;
              if (c.metrics.test_loss) m.test_loss = *c.metrics.test_loss;
              m.selected = c.metrics.selected;
              m.received = c.metrics.received;
              m.rejected = c.metrics.rejected;
              m.attempt = c.metrics.attempts;
              m.bytes_up = c.metrics.update_bytes;
              m.bytes_up_raw = c.metrics.update_bytes_raw;
              m.bytes_down = bytes_down_;
              m.bytes_down_raw = bytes_down_raw_;
              m.wall_s = c.metrics.duration_s;
              if (c.metrics.privacy) m.epsilon = c.metrics.privacy->epsilon;
              Status st = store_->CloseRound(c.round, c.model_version, c.global, m, c.strategy_state);
              if (!st.ok()) return st.WithContext("persisting round " + std::to_string(c.round));
              open_round_.reset();
              rounds_.push_back({m, c.metrics.train_loss});
              if (prom_) {
                uint64_t bytes = 0;
                for (const char* suffix : {"", "-wal"}) {
                  std::error_code ec;
                  const auto size = std::filesystem::file_size(config_.db_path + suffix, ec);
                  if (!ec) bytes += size;
                }
                prom_->RoundClosed(m, bytes);
              }
              // Retention is housekeeping: on failure the versions wait for the next round's call.
              if (auto pruned = store_->PruneModels(config_.keep_models); !pruned.ok()) {
                spdlog::error("[storage] keep_models: {}", pruned.status().ToString());
              } else if (!pruned->empty()) {
                spdlog::info("pruned {} old model version(s) ([storage] keep_models = {})",
                             pruned->size(), config_.keep_models);
              }
              spdlog::info(
                  "round {} closed: model version {}, {}/{} updates, test accuracy {:.4f}, "
                  "test loss {:.4f}, {:.2f} s",
                  c.round, c.model_version, m.received, m.selected, m.test_accuracy, m.test_loss,
                  m.wall_s);
              if (c.metrics.privacy || c.metrics.record_privacy) {
                std::string text = "round " + std::to_string(c.round) + " privacy:";
                if (const auto& p = c.metrics.privacy) {
                  text += fmt::format(" site-level (this aggregator's DP) epsilon {:.4g} at delta {:.3g};",
                                      p->epsilon, p->delta);
                } else {
                  text += " no site-level DP at the aggregator;";
                }
                if (const auto& r = c.metrics.record_privacy) {
                  text += fmt::format(" record-level (DP-SGD at {} of {} sites) epsilon up to {:.4g} at delta {:.3g}",
                                      r->sites, m.received, r->epsilon_max, r->delta);
                } else {
                  text += " no site reported record-level DP-SGD";
                }
                spdlog::info("{}", text);
              }
              if (progress_) progress_->Closed(c.round, m.wall_s, env_->NowSeconds());
              Status line = AppendMetricsLine(c, m);
              if (!line.ok()) spdlog::error("metrics line not written: {}", line.ToString());
              bytes_down_ = 0;
              bytes_down_raw_ = 0;
              return Status::OK();
            },
            [&](RoundEngine::EvalClosed& e) { return RecordFederatedEval(e.report); },
            [&](RoundEngine::TaskFailed& f) -> Status {
              if (prom_) prom_->TaskFailed();
              spdlog::warn("{} failed its {} task of round {}: {}{}", f.node_id,
                           f.evaluation ? "evaluation" : "training", f.round, f.reason,
                           f.next_round > 0 ? "; not selected again before round " + std::to_string(f.next_round)
                                            : std::string());
              // Kept with the round's rejections: who dropped out, and the reason given.
              Status st = store_->RecordRejection(f.round, f.node_id, "task_failed: " + f.reason);
              if (!st.ok()) spdlog::error("recording the failed task: {}", st.ToString());
              return Status::OK();
            },
            [&](RoundEngine::StatsClosed& e) -> Status {
              const FederatedStatsReport& r = e.report;
              size_t released = 0;
              for (const auto& [id, st] : r.sites) {
                released += st.released ? 1 : 0;
                if (!st.withheld.empty()) spdlog::info("statistics from {}: {}", id, st.withheld);
              }
              if (r.total) {
                spdlog::info("federated statistics: {}/{} site(s) released, {} rows, {} features{}, "
                             "report {}", released, r.asked, r.total->rows, r.total->features.size(),
                             r.secure ? " (sums under secure aggregation)" : "", config_.stats_report);
              } else {
                spdlog::warn("federated statistics: no federation figures ({})", r.error);
              }
              Status w = WriteStatsReport(r, config_.stats_report);
              if (!w.ok()) spdlog::error("statistics report: {}", w.ToString());
              if (r.total) {
                // What the engine now sends for imputation; a restart must send the same.
                std::vector<double> means;
                for (const FeatureStatistics& f : r.total->features) means.push_back(f.mean);
                FM_RETURN_IF_ERROR(store_->SetControl(kImputeControl, ImputeValuesText(means))
                                       .WithContext("saving the federation's feature means"));
              }
              return Status::OK();
            },
            [&](RoundEngine::Finished& f) -> Status {
              finished_ = true;
              if (!f.stopped_early.empty()) {
                control_message_ = f.stopped_early;
              } else if (!f.status.ok()) {
                control_message_ = f.status.message();
              }
              if (const std::string m = CrossEvalTable(cross_reports_); cross_reports_.size() > 1) {
                spdlog::info("cross-evaluation: every model scored at every site (held-out rows)\n{}", m);
              }
              finish_status_ = f.status;
              PublishStatus(true);
              if (progress_) progress_->Finished();
              if (f.status.ok() && !f.stopped_early.empty()) {
                spdlog::warn("federation stopped after {} rounds: {}", f.rounds_completed,
                             f.stopped_early);
              } else if (f.status.ok()) {
                spdlog::info("federation finished: {} rounds", f.rounds_completed);
              } else {
                spdlog::error("federation failed after {} rounds: {}", f.rounds_completed,
                              f.status.ToString());
              }
              return Status::OK();
            },
        },
        output);
    FM_RETURN_IF_ERROR(s);
    if (const auto* c = std::get_if<RoundEngine::RoundClosed>(&output); c && upstream_) {
      FM_RETURN_IF_ERROR(AnswerUpstream(*c));
    }
  }
  return Status::OK();
}

namespace {

// {"accuracy": 0.91, ...}: a site's metrics as one JSON object.
std::string MetricsJson(const std::map<std::string, double>& metrics) {
  JsonLine j;
  for (const auto& [name, value] : metrics) j.Add(name, value);
  return j.str();
}

}  // namespace

Status AggregatorService::RecordFederatedEval(const FederatedEvalReport& r) {
  std::vector<SiteEvalRow> rows;
  auto row = [&](const std::string& site, const SiteEval& e) {
    return SiteEvalRow{r.round, r.model_version, site, e.num_examples, e.loss, MetricsJson(e.metrics)};
  };
  if (r.total) rows.push_back(row("*", *r.total));
  for (const auto& [site, e] : r.sites) rows.push_back(row(site, e));
  // The global model's evaluation after the last round and every cross-evaluation
  // candidate's, for the matrix logged when the federation finishes. Candidates go to the
  // metrics lines (with "candidate"), not to site_eval, which holds the global models'.
  if (config_.rounds.federated_eval.cross_eval) {
    if (r.candidate.empty()) cross_reports_.clear();
    cross_reports_.push_back(r);
  }
  if (!rows.empty() && r.candidate.empty()) {
    Status st = store_->SaveSiteEval(r.round, r.model_version, rows);
    if (!st.ok()) return st.WithContext("persisting the federated evaluation of round " + std::to_string(r.round));
  }
  if (r.total) {
    const auto acc = r.total->metrics.find("accuracy");
    spdlog::info("round {} federated evaluation{}: {}/{} site(s), {} examples, loss {:.4f}{}", r.round,
                 r.candidate.empty() ? std::string() : " of " + r.candidate + "'s local model",
                 r.sites.size(), r.asked, r.total->num_examples, r.total->loss,
                 acc == r.total->metrics.end() ? std::string()
                                               : fmt::format(", accuracy {:.4f}", acc->second));
  } else {
    spdlog::warn("round {} federated evaluation: {}/{} site(s) answered, below [eval] min_sites {}; "
                 "no federated metrics", r.round, r.sites.size(), r.asked,
                 config_.rounds.federated_eval.min_sites);
  }
  if (const std::string table = SiteComparisonTable(r); !table.empty()) {
    spdlog::info("round {}: did federation help each site? (held-out rows of each site)\n{}", r.round, table);
  }
  if (config_.metrics_path.empty()) {
    eval_bytes_down_ = 0;
    return Status::OK();
  }
  // One line for the federation, one per site, each with the round and "site" ("*": all).
  const auto lines = FederatedEvalLines(r, r.sites.size(), [&](JsonLine& total) {
    total.Add("wall_s", r.duration_s).Add("bytes_down", static_cast<int64_t>(eval_bytes_down_));
  });
  eval_bytes_down_ = 0;
  for (const JsonLine& line : lines) FM_RETURN_IF_ERROR(AppendJsonLine(config_.metrics_path, line));
  return Status::OK();
}

Status AggregatorService::AppendMetricsLine(const RoundEngine::RoundClosed& c,
                                            const RoundMetrics& m) {
  if (config_.metrics_path.empty()) return Status::OK();
  JsonLine line;
  line.Add("round", static_cast<int64_t>(c.round))
      .Add("model_version", static_cast<int64_t>(c.model_version))
      .Add("attempts", static_cast<int64_t>(c.metrics.attempts))
      .Add("test_accuracy", m.test_accuracy)
      .Add("test_loss", m.test_loss)
      .Add("train_loss", c.metrics.train_loss)
      .Add("selected", static_cast<int64_t>(m.selected))
      .Add("received", static_cast<int64_t>(m.received))
      .Add("rejected", static_cast<int64_t>(m.rejected))
      .Add("num_examples", static_cast<int64_t>(c.metrics.num_examples))
      .Add("bytes_up_raw", static_cast<int64_t>(m.bytes_up_raw))
      .Add("bytes_up", static_cast<int64_t>(m.bytes_up))
      .Add("compression_ratio", c.metrics.compression_ratio)
      .Add("bytes_down_raw", static_cast<int64_t>(m.bytes_down_raw))
      .Add("bytes_down", static_cast<int64_t>(m.bytes_down))
      .Add("wall_s", m.wall_s);
  for (const auto& [name, value] : c.metrics.test_metrics)
    if (name != "accuracy") line.Add("test_" + name, value);  // test_accuracy is above
  if (const auto& p = c.metrics.privacy) {
    line.Add("epsilon", p->epsilon).Add("delta", p->delta).Add("clip_norm", p->clip_norm);
  }
  if (const auto& r = c.metrics.record_privacy) {  // the sites' own DP-SGD, beside the above
    line.Add("record_epsilon_max", r->epsilon_max).Add("record_delta", r->delta)
        .Add("record_dp_sites", static_cast<int64_t>(r->sites));
  }
  return AppendJsonLine(config_.metrics_path, line);
}

}  // namespace fedmesh
