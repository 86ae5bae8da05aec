#include "node/federated_client.h"

#include "config/config_loader.h"
#include "core/hex.h"

#include <csignal>
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <variant>

#include "core/codec/payload.h"
#include "core/data/data_source.h"
#include "core/data/impute.h"
#include "core/data/partition.h"
#include "core/graph/graph_model.h"
#include "core/graph/input_normalization.h"
#include "core/onnx/onnx_reader.h"
#include "core/json_line.h"
#include "core/model_zoo.h"
#include "core/stats/site_statistics.h"
#include "core/trainer.h"
#include "core/wire/wire_codec.h"
#include "crypto/key_files.h"
#include "crypto/update_signature.h"
#include "crypto/secagg/secure_random.h"
#include "node/fit_task_runner.h"
#include "node/site_model.h"

namespace fedmesh {
namespace {

using Clock = std::chrono::steady_clock;

Status CheckFederationId(const std::string& id) {
  if (id.empty()) {
    return Status::InvalidArgument(
        "the federation id is empty: give the aggregator's [federation] id");
  }
  for (char c : id) {
    if (c <= ' ' || c > '~') {
      return Status::InvalidArgument("federation id \"" + id +
                                     "\" must be printable ASCII without spaces");
    }
  }
  return Status::OK();
}

std::string RejectReasonName(wire::RejectReason r) {
  using R = wire::RejectReason;
  switch (r) {
    case R::kUnspecified: return "unspecified";
    case R::kUnsupportedProtocol: return "unsupported_protocol";
    case R::kUnknownFederation: return "unknown_federation";
    case R::kNotEnrolled: return "not_enrolled";
    case R::kWrongRound: return "wrong_round";
    case R::kLate: return "late";
    case R::kDuplicate: return "duplicate";
    case R::kMalformed: return "malformed";
    case R::kNonFinite: return "non_finite";
    case R::kWrongShape: return "wrong_shape";
    case R::kOverLimit: return "over_limit";
    case R::kOverloaded: return "overloaded";
    case R::kTaskFailed: return "task_failed";
  }
  return "reason " + std::to_string(static_cast<uint32_t>(r));
}

// NodeCheckpoint::tensors names of the error-feedback state.
constexpr char kResidualTensor[] = "codec/residual";
constexpr char kDgcVelocityTensor[] = "codec/dgc_velocity";
constexpr char kLocalTensor[] = "model/local";  // the site's own values of [model] local
// NodeCheckpoint::attributes names of an adopted graph model (hex ONNX bytes, its hash).
constexpr char kModelGraphAttribute[] = "model/graph_hex";
constexpr char kModelShaAttribute[] = "model/graph_sha256";


int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

FederatedClient::FederatedClient(NodeConfig config, FederatedClientOptions options, Env* env,
                                 Identity identity, std::function<void(const std::string&)> log)
    : config_(std::move(config)),
      options_(std::move(options)),
      env_(env),
      identity_(std::move(identity)),
      log_(std::move(log)) {}

FederatedClient::~FederatedClient() = default;

Result<std::unique_ptr<FederatedClient>> FederatedClient::Create(
    const NodeConfig& config, const FederatedClientOptions& options, Env* env,
    std::function<void(const std::string&)> log) {
  FM_RETURN_IF_ERROR(CheckFederationId(options.federation_id));
  FM_RETURN_IF_ERROR(ValidateLocalTrainingOptions(config.training));
  if (options.poll_interval_ms < 1) {
    return Status::InvalidArgument("poll_interval_ms must be >= 1, got " +
                                   std::to_string(options.poll_interval_ms));
  }
  if (options.reregister_after_silence_ms < 0) {
    return Status::InvalidArgument("reregister_after_silence_ms must be >= 0 (0 = never)");
  }
  if (config.aggregator_endpoint.empty()) {
    return Status::InvalidArgument("[aggregator] endpoint is empty: set it to e.g. tcp://aggregator.example:5555");
  }

  // Keys first: the cheapest check, and the most likely mistake on a fresh site.
  FM_ASSIGN_OR_RETURN(Identity identity, FromKey(ReadIdentity(config.key_path), config.config_path, "node", "key"));
  if (identity.name() != config.node_id) {
    return Status::InvalidArgument("key file '" + config.key_path + "' belongs to site '" +
                                   identity.name() + "' but [node] id is '" + config.node_id +
                                   "'; the aggregator knows a site by its key's name, so set "
                                   "[node] id to '" + identity.name() + "'");
  }
  FM_ASSIGN_OR_RETURN(PublicIdentity server,
                      FromKey(ReadPublicIdentity(config.aggregator_public_key_path), config.config_path,
                              "aggregator", "public_key"));

  std::unique_ptr<FederatedClient> c(
      new FederatedClient(config, options, env, std::move(identity), std::move(log)));
  c->server_key_ = server.curve_public;
  c->options_.transport.federation_id = options.federation_id;
  c->options_.transport.node_id = config.node_id;
  c->options_.transport.send_chunk_bytes = config.upload_chunk_bytes;
  c->options_.transport.limits.payload_digest = config.payload_digest;

  // This node's share of the data, loaded once; nothing of it ever leaves the node.
  const LocalTrainingOptions& t = config.training;
  // Held-out data for federated evaluation: [data] test, this site's share of the source's
  // own test split (partitioned like the training data), or the rows test_fraction held
  // out. None: evaluation tasks are refused.
  // An external trainer holds the site's data itself: the node loads none.
  const bool external = config.external.enabled();
  SiteModel site;
  if (external) {
    if (IsOnnxModelName(t.model.name)) {
      FM_ASSIGN_OR_RETURN(site, LoadSiteModelWithoutData(t));
    } else {
      FM_ASSIGN_OR_RETURN(site.backend, MakeBackend(t.device, t.threads));  // model: the aggregator's
    }
  } else {
    FM_ASSIGN_OR_RETURN(site, LoadSiteModel(t, /*with_test=*/true, /*impute_locally=*/false, /*own_loss=*/false));
  }
  c->train_ = std::move(site.train);
  c->test_ = std::move(site.test);
  if (!external && t.data.train == "fashion-mnist" && t.data.test.empty() && t.partition.num_partitions > 1) {
    FM_ASSIGN_OR_RETURN(auto indices, PartitionFor(c->test_.labels, c->test_.num_classes,
                                                   t.partition, t.index));
    c->test_ = c->test_.Subset(indices);
  }
  c->backend_ = std::move(site.backend);
  c->model_ = std::move(site.model);
  c->needs_imputation_ = HasMissing(c->train_) || HasMissing(c->test_);

  FM_ASSIGN_OR_RETURN(c->default_chain_, codec::Chain::Parse(config.codec_chain));
  FM_ASSIGN_OR_RETURN(auto feedback, codec::ErrorFeedback::Create(c->default_chain_, config.error_feedback));
  c->carry_.feedback.emplace(std::move(feedback));

  if (!config.secagg_allow_dir.empty()) {
    FM_ASSIGN_OR_RETURN(c->secagg_allow_,
                        FromKey(ReadAllowlist(config.secagg_allow_dir), config.config_path, "secagg", "allow"));
  }
  FM_ASSIGN_OR_RETURN(c->store_, NodeStore::Open(config.db_path));
  if (config.training.privacy.enabled()) {
    FM_ASSIGN_OR_RETURN(RecordPrivacyLedger ledger, RecordPrivacyLedger::Create(config.training.privacy));
    FM_ASSIGN_OR_RETURN(const auto attributes, c->store_->LoadAttributes());
    FM_RETURN_IF_ERROR(ledger.FromAttributes(attributes).WithContext(config.db_path));
    FM_RETURN_IF_ERROR(c->model_ == nullptr ? Status::OK() : c->model_->SupportsPerExampleClipping());
    c->privacy_.emplace(std::move(ledger));
  }
  FM_ASSIGN_OR_RETURN(auto checkpoint, c->store_->LoadCheckpoint());
  if (checkpoint.has_value()) {
    // A model adopted from the aggregator before the restart: rebuild it first, so the
    // checkpoint's sizes are checked against the model the node trains.
    if (auto it = checkpoint->attributes.find(kModelGraphAttribute);
        it != checkpoint->attributes.end()) {
      auto sha = checkpoint->attributes.find(kModelShaAttribute);
      auto bytes = FromHex(it->second);
      if (sha == checkpoint->attributes.end() || !bytes)
        return Status::Corruption("the checkpoint in '" + config.db_path +
                                  "' holds an unreadable model graph; move the old db file away");
      FM_RETURN_IF_ERROR(c->AdoptModel(sha->second, *bytes)
                             .WithContext("the model graph in " + config.db_path));
    }
    if (c->model_ == nullptr) {
      return Status::FailedPrecondition("the checkpoint in '" + config.db_path +
                                        "' is of a built-in model, which an external trainer cannot "
                                        "train; move the old db file away");
    }
    const size_t n = c->model_->num_params();
    if (checkpoint->model.size() != n ||
        (!checkpoint->velocity.empty() && checkpoint->velocity.size() != n)) {
      return Status::FailedPrecondition(
          "the checkpoint in '" + config.db_path + "' holds a model of " +
          std::to_string(checkpoint->model.size()) + " parameters but this model has " +
          std::to_string(n) + "; the model settings changed: move the old db file away");
    }
    FM_RETURN_IF_ERROR(c->model_->SetParams(checkpoint->model));
    c->carry_.velocity = std::move(checkpoint->velocity);
    std::vector<float> residual, dgc_velocity;
    if (auto it = checkpoint->tensors.find(kResidualTensor); it != checkpoint->tensors.end()) {
      residual = std::move(it->second);
    }
    if (auto it = checkpoint->tensors.find(kDgcVelocityTensor); it != checkpoint->tensors.end()) {
      dgc_velocity = std::move(it->second);
    }
    for (const auto* state : {&residual, &dgc_velocity}) {
      if (!state->empty() && state->size() != n) {
        return Status::FailedPrecondition("the checkpoint in '" + config.db_path +
                                          "' holds codec state of " +
                                          std::to_string(state->size()) +
                                          " values but the model has " + std::to_string(n) +
                                          "; move the old db file away");
      }
    }
    FM_RETURN_IF_ERROR(c->carry_.feedback->Restore(std::move(residual), std::move(dgc_velocity))
                           .WithContext("checkpoint in " + config.db_path));
    if (auto it = checkpoint->tensors.find(kLocalTensor); it != checkpoint->tensors.end()) {
      c->carry_.local_values = std::move(it->second);
    }
    c->model_version_ = checkpoint->model_version;
    c->last_round_served_ = checkpoint->last_round_served;
    c->Log("resumed from checkpoint in " + config.db_path + ": model version " +
           std::to_string(c->model_version_) + ", last round served " +
           (c->last_round_served_ ? std::to_string(*c->last_round_served_) : "none"));
  }
  FM_RETURN_IF_ERROR(c->ComputeLocalRanges().WithContext("[model] local"));
  if (!config.metrics_listen.empty()) {
    FM_ASSIGN_OR_RETURN(c->exporter_, MetricsExporter::Start(config.metrics_listen));
    c->prom_ = std::make_unique<NodeMetrics>(c->exporter_->registry());
    if (c->privacy_) c->prom_->PrivacySpent(c->privacy_->epsilon(), static_cast<uint64_t>(c->privacy_->steps()));
    c->Log("Prometheus metrics on " + c->exporter_->url());
  }
  if (external) {
    const ExternalTrainerOptions& x = config.external;
    ExternalTrainerOptions o = x;
    o.log = c->log_;
    FM_ASSIGN_OR_RETURN(c->external_, ExternalTrainer::Create(std::move(o)));
    c->Log("training is done by the site's trainer " +
           (x.argv.empty() ? "that connects to " + c->external_->endpoint()
                           : "'" + x.argv[0] + "' (launch " + (x.per_task ? "per_task" : "once") + ")") +
           "; model " + (c->model_ ? c->model_->name() : "from the aggregator's first task") +
           "; update codec " + c->default_chain_.name());
    return c;
  }
  // In aggregator mode the aggregator's graph model replaces a built-in one at the first
  // task (AdoptModel logs it): say so rather than suggest this is what will train.
  c->Log("model " + c->model_->name() + " (" + std::to_string(c->model_->num_params()) +
         " parameters" +
         (c->model_->graph_model() == nullptr ? ", unless the aggregator sends a graph model" : "") +
         ") on " + c->backend_->name() + "; partition " + std::to_string(t.index) +
         "/" + std::to_string(t.partition.num_partitions) + " = " +
         std::to_string(c->train_.size()) + " samples; update codec " +
         c->default_chain_.name() + ", error feedback " +
         std::string(codec::FeedbackModeName(c->carry_.feedback->mode())));
  return c;
}

void FederatedClient::Log(const std::string& line) const {
  if (log_) log_(line);
}

void FederatedClient::Progress(const std::string& line) const {
  if (options_.progress) options_.progress(line);
}

const std::vector<float>& FederatedClient::residual() const { return carry_.feedback->residual(); }


Status FederatedClient::AppendRoundMetrics(uint64_t round, const EpochStats& last,
                                           uint64_t num_examples, uint64_t bytes_raw,
                                           uint64_t bytes, double wall_s) {
  const std::string& path = config_.training.metrics_path;
  if (path.empty()) return Status::OK();
  double residual_sq = 0.0;
  for (float r : carry_.feedback->residual()) residual_sq += static_cast<double>(r) * r;
  JsonLine line;
  line.Add("node", identity_.name())
      .Add("round", static_cast<int64_t>(round))
      .Add("train_loss", static_cast<double>(last.mean_loss))
      .Add("num_examples", static_cast<int64_t>(num_examples))
      .Add("codec", carry_.feedback->chain().name())
      .Add("bytes_up_raw", static_cast<int64_t>(bytes_raw))
      .Add("bytes_up", static_cast<int64_t>(bytes))
      .Add("compression_ratio", bytes > 0 ? static_cast<double>(bytes_raw) / bytes : 0.0)
      .Add("residual_norm", std::sqrt(residual_sq))
      .Add("wall_s", wall_s);
  if (privacy_) {
    line.Add("epsilon", privacy_->epsilon())
        .Add("delta", privacy_->options().delta)
        .Add("dp_steps", privacy_->steps());
  }
  return AppendJsonLine(path, line);
}

wire::Header FederatedClient::OutHeader(uint64_t round) {
  wire::Header h;
  h.federation_id = options_.federation_id;
  h.sender_id = identity_.name();
  h.round = round;
  h.model_version = model_version_;
  h.message_id = next_message_id_++;
  return h;
}

Status FederatedClient::SendRegister() {
  wire::Register r;
  r.node_id = identity_.name();
  // An external trainer's count comes with its hello (0 = not known yet: the aggregator
  // then weighs by what each update reports, up to [rounds] max_examples_per_node).
  r.num_examples = external_ ? external_->hello_examples().value_or(0) : train_.size();
  r.capabilities = {"codec:none", "codec:topk", "codec:randk", "codec:fp16", "codec:bf16",
                    "codec:int8", "codec:qsgd", "codec:zstd",
                    std::string("device:") + (backend_->name().rfind("cuda", 0) == 0 ? "cuda" : "cpu")};
  return transport_->Send({OutHeader(0), std::move(r)});
}

Status FederatedClient::Run(std::atomic<bool>* stop) {
  FM_ASSIGN_OR_RETURN(transport_, ZmqClient::Create(options_.transport, &identity_));
  FM_RETURN_IF_ERROR(transport_->Connect(config_.aggregator_endpoint, server_key_));
  Log("connecting to " + config_.aggregator_endpoint + " (federation " + options_.federation_id + ")");

  if (external_ && external_->launches()) {
    // Its example count goes into the Register; a trainer that does not come is retried
    // with each task.
    auto hello = external_->Connect([stop] { return stop->load(); });
    if (!hello.ok() && !stop->load()) Log("the site's trainer is not ready: " + hello.status().message());
  }
  bool registered = false;
  int attempt = 0;
  Clock::time_point next_register = Clock::now();
  Clock::time_point last_heard = Clock::now();
  int consecutive_poll_errors = 0;

  while (!stop->load()) {
    const Clock::time_point now = Clock::now();
    if (registered && options_.reregister_after_silence_ms > 0 &&
        now - last_heard > std::chrono::milliseconds(options_.reregister_after_silence_ms)) {
      Log("nothing heard from the aggregator for " +
          std::to_string(options_.reregister_after_silence_ms) + " ms; registering again");
      registered = false;
      attempt = 0;
      next_register = now;
    }
    if (!registered && now >= next_register) {
      // libzmq does not retry a connection the aggregator refused (e.g. not enrolled yet):
      // start a fresh one before every re-sent Register.
      if (attempt > 0) {
        Status rs = transport_->Reconnect();
        if (!rs.ok()) Log("reconnect failed: " + rs.message());
      }
      Status s = SendRegister();
      if (!s.ok()) Log("sending Register failed (will retry): " + s.message());
      const auto delay = RegisterRetryDelay(attempt, options_.transport, env_->rng().Uniform());
      ++attempt;
      next_register = Clock::now() + delay;
      continue;  // re-check stop before waiting
    }

    int wait_ms = options_.poll_interval_ms;
    if (!registered) {
      const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next_register - now).count();
      wait_ms = static_cast<int>(std::clamp<int64_t>(until, 0, wait_ms));
    }
    auto polled = transport_->Poll(wait_ms);
    if (!polled.ok()) {
      if (stop->load()) break;  // e.g. EINTR from the stop signal itself
      // A frame that failed decoding; the transport stays usable. Many in a row without a
      // single good message means it is broken.
      Log("dropped a bad frame from the aggregator: " + polled.status().message());
      if (++consecutive_poll_errors >= 1000) return polled.status();
      continue;
    }
    consecutive_poll_errors = 0;
    if (transport_->resumes() != resumes_logged_) {
      // The transport acted on a TransferResume (zmq_client.h): say what it cost.
      resumes_logged_ = transport_->resumes();
      Log("resumed an upload cut by a lost connection: " +
          std::to_string(transport_->bytes_resent()) + " bytes re-sent in " +
          std::to_string(resumes_logged_) + " resumption(s) so far");
    }
    if (!polled->has_value()) continue;
    const wire::Message& m = **polled;
    last_heard = Clock::now();
    if (m.header.federation_id != options_.federation_id) {
      Log("ignored a message for federation \"" + m.header.federation_id + "\"");
      continue;
    }

    if (const auto* ack = std::get_if<wire::RegisterAck>(&m.body)) {
      if (!registered) {
        Log("registered with the aggregator (heartbeat every " +
            std::to_string(ack->heartbeat_interval_ms) + " ms)");
      }
      if (!registered) Progress("registered with the aggregator · waiting for a task");
      // Beat as often as the aggregator expects, or it takes an idle node for dead.
      transport_->SetHeartbeatInterval(
          static_cast<int>(std::min<uint64_t>(ack->heartbeat_interval_ms, 86400000)));
      registered = true;
      attempt = 0;
      ++stats_.registrations;
      if (prom_) prom_->Registered();
    } else if (const auto* task = std::get_if<wire::FitTask>(&m.body)) {
      FM_RETURN_IF_ERROR(HandleFitTask(m, *task, stop));
      last_heard = Clock::now();  // training time is not the aggregator's silence
    } else if (IsSecAggServerMessage(m.body)) {
      FM_RETURN_IF_ERROR(HandleSecAgg(m));
    } else if (const auto* rej = std::get_if<wire::Reject>(&m.body)) {
      ++stats_.rejects;
      if (prom_) prom_->RejectReceived();
      Log("the aggregator rejected message " + std::to_string(rej->rejected_message_id) + " (" +
          RejectReasonName(rej->reason) + "): " + rej->text);
      if (rej->reason == wire::RejectReason::kNotEnrolled) {
        // It forgot us (restart, or a disconnect it noticed): register again.
        registered = false;
        attempt = 0;
        next_register = Clock::now();
      }
    }
    // Register, FitResult and Heartbeat are node-to-aggregator messages: ignored.
  }
  Log("stopping");
  return Status::OK();
}

Status FederatedClient::ComputeLocalRanges() {
  local_ranges_.clear();
  if (config_.local_patterns.empty() || model_ == nullptr) return Status::OK();
  const graph::GraphModel* g = model_->graph_model();
  if (!g) {
    // A built-in model now; the aggregator's graph model may replace it with the first task.
    return Status::OK();
  }
  FM_ASSIGN_OR_RETURN(local_ranges_, graph::MatchTensors(*g, config_.local_patterns));
  return Status::OK();
}

Status FederatedClient::AdoptModel(const std::string& sha256, const std::string& graph_bytes,
                                   const std::string& task_loss) {
  if (const graph::GraphModel* g = model_ ? model_->graph_model() : nullptr; g && g->hash() == sha256) {
    return Status::OK();
  }
  onnx::ReaderLimits limits;
  limits.absent_weights_as_zeros = true;
  auto g = onnx::ParseOnnx(graph_bytes, limits);
  if (!g.ok()) return g.status().WithContext("the aggregator's model graph");
  const std::string actual = graph::CanonicalHash(*g);
  if (actual != sha256) {
    return Status::InvalidArgument("the aggregator's model graph hashes to " + actual +
                                   ", not to the sha256 " + sha256 + " it came with");
  }
  if (!config_.expect_model_sha256.empty() && sha256 != config_.expect_model_sha256) {
    // The pinned model with the federation's input normalization in front ([data]
    // normalize = "federated") is still the pinned model.
    auto base = graph::RemoveInputNormalization(*g);
    const bool pinned_plus_normalization =
        graph::HasInputNormalization(*g) && base.ok() &&
        graph::CanonicalHash(*base) == config_.expect_model_sha256;
    if (!pinned_plus_normalization) {
      return Status::FailedPrecondition(
          "the aggregator's model has graph sha256 " + sha256 + " but [model] expect_sha256 is " +
          config_.expect_model_sha256 +
          ": this site trains no other architecture. Inspect the federation's model with "
          "fedmesh-model inspect and set expect_sha256 to its hash once it is approved");
    }
    Log("the aggregator's model is the pinned one (expect_sha256) with the federation's input "
        "normalization in front");
  }
  auto m = Model::CreateFromGraph("graph:" + sha256.substr(0, 12), backend_.get(), std::move(*g));
  if (!m.ok()) return m.status().WithContext("the aggregator's model graph");
  // The data is checked against the loss the federation trains with: a one-logit model
  // takes labels 0 and 1 (bce_with_logits) where cross_entropy would want two outputs.
  LossOptions check = config_.training.trainer.loss;
  check.class_weights.clear();
  if (auto kind = ParseLossKind(task_loss); !task_loss.empty() && kind.ok()) {
    check.kind = *kind;
  } else if ((*m)->num_classes() == 1 && !IsRegression(check.kind)) {
    check.kind = LossKind::kBceWithLogits;  // restored from a checkpoint: no task to say
  }
  FM_RETURN_IF_ERROR((*m)->SetLoss(check));
  // An external trainer's data is its own business: it answers for the fit itself.
  if (!external_) FM_RETURN_IF_ERROR((*m)->CheckCompatible(train_).WithContext(
      "this site's data does not fit the aggregator's model (graph " + sha256.substr(0, 12) + ")"));
  model_ = std::move(*m);
  carry_.local_values.clear();
  FM_RETURN_IF_ERROR(ComputeLocalRanges());
  model_graph_ = graph_bytes;
  model_sha256_ = sha256;
  carry_.velocity.clear();
  FM_ASSIGN_OR_RETURN(auto feedback, codec::ErrorFeedback::Create(default_chain_, config_.error_feedback));
  carry_.feedback.emplace(std::move(feedback));
  Log("training the aggregator's model: graph sha256 " + sha256 + ", " +
      std::to_string(model_->graph_model()->num_trainable()) + " parameters + " +
      std::to_string(model_->graph_model()->num_state()) + " state values");
  return Status::OK();
}

FitContext FederatedClient::MakeContext(std::atomic<bool>* stop) {
  FitContext ctx;
  ctx.model = model_.get();
  ctx.train = &train_;
  ctx.trainer = config_.training.trainer;
  ctx.default_chain = &default_chain_;
  ctx.feedback = config_.error_feedback;
  ctx.local = local_ranges_;
  ctx.node_id = identity_.name();
  ctx.seed = config_.training.seed;
  ctx.clock = env_;
  ctx.first_global = &first_global_;
  ctx.external = external_.get();
  ctx.privacy = privacy_ ? &*privacy_ : nullptr;
  if (stop != nullptr) ctx.stop = [stop] { return stop->load(); };
  return ctx;
}

Status FederatedClient::RefuseTask(const wire::Message& m, const std::string& what,
                                   const std::string& why) {
  ++stats_.tasks_refused;
  if (prom_) prom_->TaskRefused();
  Log("refused " + what + ": " + why);
  wire::Reject reject;
  reject.reason = wire::RejectReason::kTaskFailed;
  // One sentence of printable text within the wire's limit.
  for (char ch : why.substr(0, 1000))  // the wire allows 1024 bytes by default
    reject.text.push_back(ch >= 0x20 && ch < 0x7f ? ch : ' ');
  reject.rejected_message_id = m.header.message_id;
  if (transport_ != nullptr) {
    if (Status s = transport_->Send(wire::Message{OutHeader(m.header.round), std::move(reject)}); !s.ok())
      Log("telling the aggregator failed: " + s.message());
  }
  return Status::OK();
}

Status FederatedClient::HandleEvalTask(const wire::Message& m, const wire::FitTask& task) {
  const std::string round = "round " + std::to_string(task.round);
  auto refuse = [&](const std::string& why) {
    return RefuseTask(m, "to evaluate the model of " + round, why);
  };
  if (task.round != m.header.round) {
    return refuse("its round differs from the header's round " + std::to_string(m.header.round));
  }
  if (std::string why = ImputeMissingCells(task); !why.empty()) return refuse(why);
  if (!task.model_sha256.empty()) {
    FM_RETURN_IF_ERROR(AdoptModel(task.model_sha256, task.model_graph, task.loss));
  }
  if (model_ == nullptr) return refuse("the aggregator sent no graph model, which an external trainer needs");
  FitContext ctx = MakeContext(nullptr);
  FM_ASSIGN_OR_RETURN(FitOutcome eval, RunEvalTask(ctx, task, carry_, test_));
  if (!eval.refused.empty()) return refuse(eval.refused);
  if (task.collect_local_models && config_.share_local_model && !eval.local_model.empty()) {
    // This site agreed ([eval] share_local_model) to let its local-only model be scored at
    // the other sites (--cross-eval).
    eval.result.local_model = true;
    eval.result.update = wire::FloatPayload(eval.local_model);
    eval.result.bytes_before_codec = eval.result.update.bytes.size();
    eval.result.bytes_after_codec = eval.result.update.bytes.size();
    Log("sharing this site's local-only model for cross-evaluation");
  }
  const auto acc = eval.result.metrics.find("accuracy");
  Log((task.candidate.empty() ? round : "candidate " + task.candidate + " (" + round + ")") +
      " evaluated on " + std::to_string(eval.result.num_examples) + " held-out samples: loss " +
      std::to_string(eval.result.train_loss) +
      (acc == eval.result.metrics.end() ? "" : ", accuracy " + std::to_string(acc->second)));
  if (Status s = transport_->Send(wire::Message{OutHeader(task.round), std::move(eval.result)});
      !s.ok()) {
    Log("sending the evaluation of " + round + " failed: " + s.message());
  }
  return Status::OK();
}

Status FederatedClient::HandleStatsTask(const wire::Message& m, const wire::FitTask& task) {
  if (external_) {
    return RefuseTask(m, "the statistics request",
                      "this site's data is held by its external trainer, which computes no "
                      "federated statistics");
  }
  if (task.secagg) return HandleSecureStatsTask(m, task);
  // The noise that pushes min/max outward must not be predictable by the aggregator.
  uint64_t seed = 0;
  SodiumRandom().Fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(&seed), sizeof seed));
  Rng noise(seed);
  auto stats = SummarizeSite(train_, *task.statistics, config_.stats_policy, noise);
  if (!stats.ok()) {
    ++stats_.tasks_refused;
    Log("refused the statistics request: " + stats.status().message());
    return Status::OK();
  }
  Log("statistics phase " + std::to_string(task.statistics->phase) +
      (stats->released ? " released over " + std::to_string(stats->rows) + " rows" : " withheld") +
      (stats->withheld.empty() ? "" : " (" + stats->withheld + ")"));
  wire::FitResult r;
  r.round = m.header.round;
  r.num_examples = stats->rows;
  r.update = wire::FloatPayload({});
  r.statistics = std::move(*stats);
  if (Status s = transport_->Send(wire::Message{OutHeader(m.header.round), std::move(r)}); !s.ok()) {
    Log("sending the statistics failed: " + s.message());
  }
  return Status::OK();
}

std::string FederatedClient::ImputeMissingCells(const wire::FitTask& task) {
  if (!needs_imputation_) return "";
  if (task.impute_values.empty()) {
    return "this site's data has missing cells to impute with the federation's means ([data] "
           "missing = \"impute_mean\") and the aggregator sent none: it needs [stats] enabled, "
           "and a value of every feature at some site (its statistics report gives each "
           "feature's count)";
  }
  auto a = ImputeMissing(train_, task.impute_values);
  auto b = a.ok() ? ImputeMissing(test_, task.impute_values) : a;
  if (!a.ok() || !b.ok()) return "imputing missing cells: " + (a.ok() ? b : a).status().message();
  needs_imputation_ = false;
  Log("imputed " + std::to_string(*a + *b) + " missing cells with the federation's feature means");
  return "";
}

Status FederatedClient::HandleSecureStatsTask(const wire::Message& m, const wire::FitTask& task) {
  auto refuse = [&](const std::string& why) {
    ++stats_.tasks_refused;
    Log("refused the secure statistics request: " + why);
    return Status::OK();
  };
  if (secagg_allow_.empty()) {
    return refuse("this site has no [secagg] allow to check the other sites' keys with");
  }
  auto sums = SiteSecureSums(train_, *task.statistics, config_.stats_policy);
  if (!sums.ok()) return refuse(sums.status().message());
  const SecureSumLayout layout{task.statistics->bin_lo.size(), task.statistics->bins,
                               task.statistics->classes};
  auto words = EncodeSecureSums(*sums, layout);
  if (!words.ok()) return refuse(words.status().message());
  auto participant = SecAggParticipant::StartEncoded(m.header, task, identity_, secagg_allow_,
                                                     std::move(*words), config_.secagg_floors,
                                                     &masked_rounds_);
  if (!participant.ok()) return refuse(participant.status().message());
  secagg_.emplace(std::move(*participant));
  Log("statistics phase 2: summing " + std::string(sums->rows > 0 ? "this site's" : "zero (withheld)") +
      " counts, sums and histograms under secure aggregation");
  if (Status s = transport_->Send(wire::Message{OutHeader(task.round), secagg_->advertisement()});
      !s.ok()) {
    Log("sending the secure aggregation keys failed: " + s.message());
    secagg_.reset();
  }
  return Status::OK();
}

Status FederatedClient::HandleFitTask(const wire::Message& m, const wire::FitTask& task,
                                      std::atomic<bool>* stop) {
  if (task.statistics) return HandleStatsTask(m, task);
  if (task.evaluate_only) return HandleEvalTask(m, task);
  const std::string round = "round " + std::to_string(task.round);
  auto refuse = [&](const std::string& why) { return RefuseTask(m, "the FitTask for " + round, why); };
  if (task.round != m.header.round) {
    return refuse("its round differs from the header's round " + std::to_string(m.header.round));
  }
  if (task.deadline_unix_ms != 0 && NowUnixMs() >= static_cast<int64_t>(task.deadline_unix_ms)) {
    return refuse("its deadline has already passed");
  }
  if (sent_update_ && !task.secagg && sent_update_->round == task.round &&
      sent_update_->model_version == m.header.model_version) {
    // The same task again: the aggregator lost our connection before it had the whole
    // update. Its transport says which chunks it lacks; nothing is trained again.
    if (Status s = transport_->QueryRetained(); s.ok()) {
      Log(round + ": the task came again; resuming the upload of the update already trained");
      return Status::OK();
    } else {
      Log(round + ": cannot resume the upload (" + s.message() + "); training again");
    }
  }
  if (std::string why = ImputeMissingCells(task); !why.empty()) return refuse(why);
  if (last_round_served_ && task.round <= *last_round_served_) {
    Log(round + " was served before (checkpoint says " + std::to_string(*last_round_served_) +
        "); training it again, the aggregator drops duplicates");
  }
  if (!task.model_sha256.empty()) {
    // Errors stop the node: it could never train this federation's model.
    FM_RETURN_IF_ERROR(AdoptModel(task.model_sha256, task.model_graph, task.loss));
  }
  if (model_ == nullptr) return refuse("the aggregator sent no graph model, which an external trainer needs");
  if (!config_.local_patterns.empty() && model_->graph_model() == nullptr) {
    return Status::FailedPrecondition("[model] local names tensors of a graph model, but this "
                                      "federation trains the built-in '" + model_->name() + "'");
  }
  FitContext ctx = MakeContext(stop);
  const auto t0 = Clock::now();
  if (task.secagg && secagg_allow_.empty()) {
    return refuse("it asks for secure aggregation and this site has no [secagg] allow to "
                  "check the other sites' keys with");
  }
  // Under secure aggregation the change is masked, not codec-encoded: train for it raw.
  wire::FitTask effective = task;
  if (task.secagg) effective.update_codec = "none";
  const int64_t dp_steps_before = privacy_ ? privacy_->steps() : 0;
  Progress(round + ": training on " + std::to_string(ctx.train->size()) + " examples · " +
           std::to_string(stats_.rounds_served) + " round(s) trained so far");
  Result<FitOutcome> trained = RunFitTask(ctx, effective, carry_);
  // What DP-SGD spent is durable before anything trained on this data leaves the site.
  if (privacy_ && privacy_->steps() != dp_steps_before) {
    FM_RETURN_IF_ERROR(store_->SaveAttributes(privacy_->ToAttributes())
                           .WithContext("saving the privacy ledger after " + round));
    if (prom_) prom_->PrivacySpent(privacy_->epsilon(), static_cast<uint64_t>(privacy_->steps()));
  }
  // A model that fails to train this task (an op that cannot take this batch, say) fails
  // the task, not the site: the aggregator is told why and the next task starts afresh.
  if (!trained.ok()) return refuse("training failed: " + trained.status().ToString());
  FitOutcome fit = std::move(trained).value();
  if (!fit.refused.empty()) return refuse(fit.refused);
  if (m.header.model_version == 0 && first_global_.empty()) first_global_ = fit.global;
  if (fit.stopped) {
    Log("stopped during " + round + "; no result sent");
    return Status::OK();
  }
  const EpochStats& last = fit.last_epoch;
  wire::FitResult r = std::move(fit.result);
  const uint64_t r_examples = r.num_examples;
  uint64_t bytes_raw = r.bytes_before_codec, bytes_sent = r.bytes_after_codec;
  model_version_ = m.header.model_version;
  std::vector<float> secagg_input;
  if (task.secagg) {
    auto delta = wire::PayloadFloats(r.update);
    if (!delta.ok()) return delta.status().WithContext("the update of " + round);
    secagg_input = *delta;
    auto participant = SecAggParticipant::Start(m.header, task, identity_, secagg_allow_,
                                                std::move(*delta), config_.secagg_floors,
                                                &masked_rounds_);
    if (!participant.ok()) return refuse("secure aggregation: " + participant.status().message());
    secagg_.emplace(std::move(*participant));
    wire::Message out{OutHeader(task.round), secagg_->advertisement()};
    if (Status s = transport_->Send(out); !s.ok()) {
      Log("sending the secure aggregation keys for " + round + " failed: " + s.message());
      secagg_.reset();
      return Status::OK();
    }
    bytes_sent = 0;  // the masked input goes later, in its own message
    fit.chain_name = "secure aggregation";
  } else {
    // Signed, so the aggregator can check and keep who sent it (crypto/update_signature.h).
    wire::Header header = OutHeader(task.round);
    // In the digest kind the task came with (crypto/update_signature.h).
    FM_RETURN_IF_ERROR(SignUpdate(identity_, header.federation_id, header.model_version, &r,
                                  wire::KindOf(task.global_model.digest))
                           .WithContext("signing the update of " + round));
    wire::Message out{std::move(header), std::move(r)};
    // Kept by the transport, so that a re-sent task resumes the upload (see above).
    sent_update_ = SentUpdate{task.round, m.header.model_version};
    // Moved, not copied: with chunk data parts the payload leaves straight from here.
    if (Status s = transport_->SendResumable(std::move(out), task.chunk_data_parts); !s.ok()) {
      Log("sending the FitResult for " + round + " failed: " + s.message());
      return Status::OK();  // the aggregator re-sends the task when we register again
    }
  }
  ++stats_.rounds_served;
  Progress(round + (task.secagg ? ": masked update under way" : ": update sent") + " · " +
           std::to_string(stats_.rounds_served) + " round(s) trained · waiting for the next task");
  stats_.bytes_up_raw += bytes_raw;
  stats_.bytes_up += bytes_sent;
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (prom_) prom_->RoundServed(task.round, bytes_sent, bytes_raw, wall_s);
  char line[300];
  if (task.secagg) {
    // The masked input leaves later, in the SecAgg messages: no byte count to report yet.
    std::snprintf(line, sizeof(line),
                  "%s: trained %u epoch(s) on %zu samples, loss %.4f, %.1fs; the change goes "
                  "masked under secure aggregation",
                  round.c_str(), task.local_epochs, static_cast<size_t>(r_examples), last.mean_loss, wall_s);
  } else {
    std::snprintf(line, sizeof(line),
                  "%s: trained %u epoch(s) on %zu samples, loss %.4f, %.1fs; sent %llu bytes "
                  "(%s, %.1fx smaller than float32)",
                  round.c_str(), task.local_epochs, static_cast<size_t>(r_examples), last.mean_loss, wall_s,
                  static_cast<unsigned long long>(bytes_sent), fit.chain_name.c_str(),
                  static_cast<double>(bytes_raw) / static_cast<double>(std::max<uint64_t>(1, bytes_sent)));
  }
  std::string privacy_note;
  if (privacy_) {
    char text[160];
    std::snprintf(text, sizeof(text), "; dp-sgd epsilon %.4f (delta %g) after %lld steps",
                  privacy_->epsilon(), privacy_->options().delta,
                  static_cast<long long>(privacy_->steps()));
    privacy_note = text;
  }
  Log(line + privacy_note);
  if (Status ms = AppendRoundMetrics(task.round, last, r_examples, bytes_raw, bytes_sent, wall_s); !ms.ok()) {
    Log("metrics line not written: " + ms.message());
  }

  last_round_served_ = task.round;
  NodeCheckpoint cp;
  cp.model_version = model_version_;
  cp.model = std::move(fit.global);
  cp.velocity = carry_.velocity;
  cp.last_round_served = last_round_served_;
  if (!carry_.feedback->residual().empty()) cp.tensors[kResidualTensor] = carry_.feedback->residual();
  if (!carry_.feedback->velocity().empty()) cp.tensors[kDgcVelocityTensor] = carry_.feedback->velocity();
  if (!secagg_input.empty()) cp.tensors[kSecAggInputTensor] = std::move(secagg_input);
  if (!carry_.local_values.empty()) cp.tensors[kLocalTensor] = carry_.local_values;
  if (!model_graph_.empty()) {
    cp.attributes[kModelGraphAttribute] = ToHex(model_graph_);
    cp.attributes[kModelShaAttribute] = model_sha256_;
  }
  if (privacy_) cp.attributes.merge(privacy_->ToAttributes());
  if (Status s = store_->SaveCheckpoint(cp); !s.ok()) {
    return Status(s.code(), "saving the checkpoint after " + round + " failed: " + s.message());
  }
  return Status::OK();
}

Status FederatedClient::HandleSecAgg(const wire::Message& m) {
  const std::string round = "round " + std::to_string(m.header.round);
  if (!secagg_ || secagg_->round() != m.header.round) {
    Log("ignored a secure aggregation message for " + round + ": not taking part in it");
    return Status::OK();
  }
  if (std::holds_alternative<wire::SecAggUnmaskRequest>(m.body)) {
    if (const char* fault = std::getenv("FEDMESH_FAULT");
        fault != nullptr && std::string_view(fault) == "secagg-kill-before-unmask") {
      Log("fault injection: killing this process before unmasking " + round);
      std::raise(SIGKILL);
    }
  }
  // At most one masked input per round: the participant checks masked_rounds_.
  auto reply = secagg_->OnMessage(m.body);
  if (!reply.ok()) {
    Log("secure aggregation of " + round + " abandoned: " + reply.status().message());
    secagg_.reset();
    return Status::OK();
  }
  const bool masked = std::holds_alternative<wire::SecAggMaskedInput>(*reply);
  if (masked && privacy_.has_value()) std::get<wire::SecAggMaskedInput>(*reply).record_privacy = privacy_->Report();
  if (Status s = transport_->Send(wire::Message{OutHeader(m.header.round), std::move(*reply)}); !s.ok()) {
    Log("sending a secure aggregation message for " + round + " failed: " + s.message());
    secagg_.reset();
    return Status::OK();
  }
  if (masked) Log(round + ": sent the masked update");
  if (secagg_->finished()) {
    Log(round + ": sent the unmasking shares; secure aggregation done on this side");
    secagg_.reset();
  }
  return Status::OK();
}

}  // namespace fedmesh
