#include "aggregator/upstream_link.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/codec/codec.h"
#include "core/codec/payload.h"
#include "crypto/update_signature.h"

namespace fedmesh {

namespace {

using Clock = std::chrono::steady_clock;

std::string Printable(const std::string& text) {
  std::string out;
  for (char ch : text.substr(0, 1000)) out.push_back(ch >= 0x20 && ch < 0x7f ? ch : ' ');
  return out;
}

}  // namespace

UpstreamLink::UpstreamLink(UpstreamLinkOptions options, Identity identity, Env* env)
    : options_(std::move(options)), identity_(std::move(identity)), env_(env) {}

UpstreamLink::~UpstreamLink() = default;

Result<std::unique_ptr<UpstreamLink>> UpstreamLink::Create(UpstreamLinkOptions options,
                                                           Identity identity,
                                                           std::array<uint8_t, 32> server_key,
                                                           Env* env) {
  if (options.endpoint.empty()) return Status::InvalidArgument("[upstream] endpoint is empty");
  if (options.federation_id.empty()) return Status::InvalidArgument("[upstream] federation is empty");
  if (options.num_params == 0) return Status::InvalidArgument("the regional model has no parameters");
  if (env == nullptr) return Status::InvalidArgument("env is null");
  std::unique_ptr<UpstreamLink> link(new UpstreamLink(std::move(options), std::move(identity), env));
  ZmqClientOptions& t = link->options_.transport;
  t.federation_id = link->options_.federation_id;
  t.node_id = link->identity_.name();
  FM_ASSIGN_OR_RETURN(link->transport_, ZmqClient::Create(t, &link->identity_));
  FM_RETURN_IF_ERROR(link->transport_->Connect(link->options_.endpoint, server_key));
  link->next_register_ = Clock::now();
  link->last_heard_ = Clock::now();
  spdlog::info("upstream: connecting to {} as site {} (federation {})", link->options_.endpoint,
               link->identity_.name(), link->options_.federation_id);
  return link;
}

wire::Header UpstreamLink::OutHeader(uint64_t round, uint64_t model_version) {
  wire::Header h;
  h.federation_id = options_.federation_id;
  h.sender_id = identity_.name();
  h.round = round;
  h.model_version = model_version;
  h.message_id = next_message_id_++;
  return h;
}

Status UpstreamLink::SendRegister() {
  wire::Register r;
  r.node_id = identity_.name();
  r.num_examples = 0;  // not known: the region's sites come and go (see the header)
  r.capabilities = {"codec:none", "codec:fp16", "codec:bf16", "codec:int8", "codec:zstd",
                    "role:regional-aggregator"};
  return transport_->Send({OutHeader(0, 0), std::move(r)});
}

Result<std::optional<UpstreamTask>> UpstreamLink::Poll(int timeout_ms) {
  const Clock::time_point now = Clock::now();
  if (registered_ && options_.reregister_after_silence_ms > 0 &&
      now - last_heard_ > std::chrono::milliseconds(options_.reregister_after_silence_ms)) {
    spdlog::warn("upstream: nothing heard for {} ms; registering again", options_.reregister_after_silence_ms);
    registered_ = false;
    register_attempt_ = 0;
    next_register_ = now;
  }
  if (!registered_ && now >= next_register_) {
    // libzmq does not retry a refused connection (not enrolled yet): a fresh one first.
    if (register_attempt_ > 0) {
      if (Status rs = transport_->Reconnect(); !rs.ok()) spdlog::warn("upstream: reconnect failed: {}", rs.message());
    }
    if (Status s = SendRegister(); !s.ok()) spdlog::warn("upstream: Register failed (will retry): {}", s.message());
    next_register_ = Clock::now() + RegisterRetryDelay(register_attempt_, options_.transport, env_->rng().Uniform());
    ++register_attempt_;
  }
  auto polled = transport_->Poll(timeout_ms);
  if (!polled.ok()) {
    spdlog::warn("upstream: dropped a bad frame: {}", polled.status().message());
    return std::optional<UpstreamTask>();
  }
  if (!polled->has_value()) return std::optional<UpstreamTask>();
  const wire::Message& m = **polled;
  last_heard_ = Clock::now();
  if (m.header.federation_id != options_.federation_id) {
    spdlog::warn("upstream: ignored a message for federation \"{}\"", m.header.federation_id);
    return std::optional<UpstreamTask>();
  }
  if (const auto* ack = std::get_if<wire::RegisterAck>(&m.body)) {
    // Beat as often as the top expects, or it takes an idle region for dead.
    transport_->SetHeartbeatInterval(static_cast<int>(std::min<uint64_t>(ack->heartbeat_interval_ms, 86400000)));
    if (!registered_) spdlog::info("upstream: registered with {} as {}", options_.endpoint, identity_.name());
    registered_ = true;
    register_attempt_ = 0;
    ++stats_.registrations;
  } else if (const auto* rej = std::get_if<wire::Reject>(&m.body)) {
    ++stats_.rejects;
    spdlog::warn("upstream rejected message {}: {}", rej->rejected_message_id, rej->text);
    if (rej->reason == wire::RejectReason::kNotEnrolled) {
      registered_ = false;
      register_attempt_ = 0;
      next_register_ = Clock::now();
    }
  } else if (const auto* task = std::get_if<wire::FitTask>(&m.body)) {
    auto checked = CheckTask(m, *task);
    if (!checked.ok()) {
      FM_RETURN_IF_ERROR(Refuse(task->round, m.header.message_id, checked.status().message()));
      return std::optional<UpstreamTask>();
    }
    ++stats_.tasks;
    return std::optional<UpstreamTask>(std::move(checked).value());
  }  // anything else (e.g. secure aggregation traffic: regions never mask) is ignored
  return std::optional<UpstreamTask>();
}

Result<UpstreamTask> UpstreamLink::CheckTask(const wire::Message& m, const wire::FitTask& task) const {
  auto refuse = [](const std::string& why) { return Status::FailedPrecondition(why); };
  if (task.round != m.header.round) {
    return refuse("its round " + std::to_string(task.round) + " differs from the header's " +
                  std::to_string(m.header.round));
  }
  if (task.statistics || task.evaluate_only) {
    return refuse("a regional aggregator holds no data: run federated evaluation and statistics "
                  "at the regions, not across them");
  }
  if (task.secagg) return refuse("a regional aggregator does not take part in secure aggregation among regions");
  if (task.with_prediction) return refuse("a regional aggregator does not take update predictions");
  if (task.model_sha256 != options_.model_sha256) {
    return refuse("the task's model has graph sha256 \"" + task.model_sha256 +
                  "\" but this region trains \"" + options_.model_sha256 +
                  "\" (empty = a built-in model): configure the same [model] at both levels");
  }
  if (task.prox_mu != 0.0) return refuse("a regional aggregator passes no proximal term (FedProx) on");
  auto global = codec::DecodePayload(task.global_model);
  if (!global.ok()) return refuse("its model does not decode: " + global.status().message());
  if (global->size() != options_.num_params) {
    return refuse("its model has " + std::to_string(global->size()) + " parameters; this region's has " +
                  std::to_string(options_.num_params));
  }
  if (!task.update_codec.empty()) {
    if (auto chain = codec::Chain::Parse(task.update_codec); !chain.ok()) {
      return refuse("its update codec \"" + task.update_codec + "\" is unknown here");
    }
  }
  UpstreamTask t;
  t.round = task.round;
  t.model_version = m.header.model_version;
  t.global = std::move(global).value();
  t.settings.local_epochs = static_cast<int>(task.local_epochs);
  t.settings.batch_size = static_cast<int>(task.batch_size);
  t.settings.learning_rate = task.learning_rate;
  t.settings.momentum = task.momentum;
  t.update_codec = task.update_codec;
  t.digest_kind = wire::KindOf(task.global_model.digest);
  t.message_id = m.header.message_id;
  return t;
}

Status UpstreamLink::Refuse(uint64_t round, uint64_t message_id, const std::string& why) {
  ++stats_.tasks_refused;
  spdlog::warn("upstream: refused the task of round {}: {}", round, why);
  wire::Reject reject;
  reject.reason = wire::RejectReason::kTaskFailed;
  reject.text = Printable(why);
  reject.rejected_message_id = message_id;
  if (Status s = transport_->Send(wire::Message{OutHeader(round, 0), std::move(reject)}); !s.ok()) {
    spdlog::warn("upstream: telling the top failed: {}", s.message());
  }
  return Status::OK();
}

Status UpstreamLink::SendResult(const UpstreamTask& task, std::span<const float> result,
                                uint64_t num_examples, double train_loss) {
  if (result.size() != task.global.size()) {
    return Status::InvalidArgument("the regional result has " + std::to_string(result.size()) +
                                   " parameters, the upstream model " + std::to_string(task.global.size()));
  }
  std::vector<float> change(result.size());
  for (size_t i = 0; i < change.size(); ++i) change[i] = result[i] - task.global[i];
  wire::FitResult r;
  r.round = task.round;
  r.num_examples = num_examples;
  r.train_loss = std::isfinite(train_loss) ? train_loss : 0.0;
  if (task.update_codec.empty() || task.update_codec == wire::kCodecNone) {
    r.update = wire::FloatPayload(change);
  } else {
    FM_ASSIGN_OR_RETURN(codec::Chain chain, codec::Chain::Parse(task.update_codec));
    FM_ASSIGN_OR_RETURN(r.update, codec::EncodePayload(chain, change, env_->rng().NextU64()));
  }
  r.bytes_before_codec = 4 * static_cast<uint64_t>(change.size());
  r.bytes_after_codec = r.update.bytes.size();
  wire::Header header = OutHeader(task.round, task.model_version);
  FM_RETURN_IF_ERROR(SignUpdate(identity_, header.federation_id, header.model_version, &r,
                                task.digest_kind)
                         .WithContext("signing the regional update of round " + std::to_string(task.round)));
  if (Status s = transport_->Send(wire::Message{std::move(header), std::move(r)}); !s.ok()) {
    spdlog::warn("upstream: sending the result of round {} failed: {}", task.round, s.message());
    return Status::OK();
  }
  ++stats_.results_sent;
  spdlog::info("upstream: sent the result of round {} ({} examples from this region's sites)",
               task.round, num_examples);
  return Status::OK();
}

}  // namespace fedmesh
