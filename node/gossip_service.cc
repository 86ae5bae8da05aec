#include "node/gossip_service.h"

#include "config/config_loader.h"
#include "core/graph/graph_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <utility>
#include <variant>

#include "core/codec/codec.h"
#include "core/json_line.h"
#include "node/external_task.h"
#include "node/fit_task_runner.h"
#include "crypto/key_files.h"
#include "gossip/topology.h"

namespace fedmesh {
namespace {

uint64_t UnixMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

Result<std::vector<Seed>> ParseSeeds(const std::vector<std::string>& seeds) {
  std::vector<Seed> out;
  for (const std::string& s : seeds) {
    const size_t at = s.find('@');
    if (at == 0 || at == std::string::npos || at + 1 == s.size()) {
      return Status::InvalidArgument("[gossip] seeds: \"" + s + "\" is not site-id@endpoint");
    }
    out.push_back(Seed{s.substr(0, at), s.substr(at + 1)});
  }
  return out;
}

Result<GossipNodeOptions> NodeOptionsFrom(const NodeConfig& c) {
  const GossipConfig& g = c.gossip;
  GossipNodeOptions o;
  o.federation_id = c.federation_id;
  o.period_s = static_cast<double>(g.period_ms) / 1000.0;
  o.join_pull_timeout_s = static_cast<double>(g.join_timeout_ms) / 1000.0;
  o.membership.probe_interval_s = static_cast<double>(g.probe_interval_ms) / 1000.0;
  o.membership.probe_timeout_s = o.membership.probe_interval_s / 4;
  o.membership.suspicion_timeout_s = static_cast<double>(g.suspicion_timeout_ms) / 1000.0;
  FM_ASSIGN_OR_RETURN(o.averaging.protocol, ParseGossipProtocol(g.protocol));
  FM_ASSIGN_OR_RETURN(o.averaging.topology, ParseTopology(g.topology));
  o.averaging.fanout = static_cast<uint32_t>(g.fanout);
  o.averaging.codec = c.codec_chain;
  o.averaging.choco_gamma = g.choco_gamma;
  // An exchange not answered within two periods is not coming: the peer is dead or busy.
  o.averaging.exchange_timeout_s = 2 * o.period_s;
  o.first_sequence = UnixMicros();
  FM_RETURN_IF_ERROR(Validate(o));
  return o;
}

}  // namespace

GossipService::GossipService(NodeConfig config, Env* env, Identity identity,
                             std::function<void(const std::string&)> log)
    : config_(std::move(config)), env_(env), identity_(std::move(identity)), log_(std::move(log)) {}

GossipService::~GossipService() = default;

void GossipService::Log(const std::string& line) const {
  if (log_) log_(line);
}

Result<std::unique_ptr<GossipService>> GossipService::Create(
    const NodeConfig& config, Env* env, std::function<void(const std::string&)> log) {
  if (!config.gossip.enabled()) {
    return Status::InvalidArgument("[gossip] listen is empty: the gossip service needs it");
  }
  FM_ASSIGN_OR_RETURN(GossipNodeOptions options, NodeOptionsFrom(config));
  FM_ASSIGN_OR_RETURN(std::vector<Seed> seeds, ParseSeeds(config.gossip.seeds));
  FM_ASSIGN_OR_RETURN(Identity identity, FromKey(ReadIdentity(config.key_path), config.config_path, "node", "key"));
  if (identity.name() != config.node_id) {
    return Status::InvalidArgument("key file '" + config.key_path + "' belongs to site '" +
                                   identity.name() + "' but [node] id is '" + config.node_id +
                                   "'");
  }
  FM_ASSIGN_OR_RETURN(std::vector<PublicIdentity> allowlist,
                      FromKey(ReadAllowlist(config.gossip.allow_dir), config.config_path, "gossip", "allow"));
  std::unique_ptr<GossipService> s(
      new GossipService(config, env, std::move(identity), std::move(log)));

  const LocalTrainingOptions& t = config.training;
  if (config.external.enabled()) {
    FM_ASSIGN_OR_RETURN(s->site_, LoadSiteModelWithoutData(t));
    FM_ASSIGN_OR_RETURN(s->external_tensors_, TrainerTensors(*s->site_.model));
    ExternalTrainerOptions o = config.external;
    // Gossip tasks have no deadline of their own: a hung trainer is cut after 10 minutes.
    if (o.timeout_ms <= 0) o.timeout_ms = 600000;
    o.log = s->log_;
    FM_ASSIGN_OR_RETURN(s->external_, ExternalTrainer::Create(std::move(o)));
  } else {
    FM_ASSIGN_OR_RETURN(s->site_, LoadSiteModel(t, /*with_test=*/true));
  }
  s->trainer_ = std::make_unique<Trainer>(s->site_.model.get(), t.trainer, env);

  FM_ASSIGN_OR_RETURN(s->store_, NodeStore::Open(config.db_path));
  if (!config.metrics_listen.empty()) {
    FM_ASSIGN_OR_RETURN(s->exporter_, MetricsExporter::Start(config.metrics_listen));
    s->prom_ = std::make_unique<NodeMetrics>(s->exporter_->registry());
    s->Log("Prometheus metrics on " + s->exporter_->url());
  }
  FM_ASSIGN_OR_RETURN(std::optional<NodeCheckpoint> checkpoint, s->store_->LoadCheckpoint());
  const size_t n = s->site_.model->num_params();
  if (checkpoint && checkpoint->model.size() != n) {
    return Status::FailedPrecondition(
        "the checkpoint in '" + config.db_path + "' holds a model of " +
        std::to_string(checkpoint->model.size()) + " parameters but this model has " +
        std::to_string(n) + "; the model settings changed: move the old db file away");
  }

  ZmqServerOptions server_options;
  server_options.heartbeat_interval_ms = 60000;  // liveness is SWIM's job, not the socket's
  FM_ASSIGN_OR_RETURN(s->server_, ZmqServer::Create(server_options, &s->identity_, allowlist));
  s->allowlist_ = allowlist;
  FM_ASSIGN_OR_RETURN(s->bound_, s->server_->Bind(config.gossip.listen));
  std::string advertise = config.gossip.advertise.empty() ? s->bound_ : config.gossip.advertise;
  if (advertise.find("0.0.0.0") != std::string::npos) {
    return Status::InvalidArgument("[gossip] listen " + s->bound_ +
                                   " is not an address peers can dial: set [gossip] advertise");
  }
  if (const graph::GraphModel* g = s->site_.model->graph_model()) {
    options.model_sha256 = g->hash();
    if (!config.expect_model_sha256.empty() && g->hash() != config.expect_model_sha256) {
      return Status::FailedPrecondition("[model] onnx has graph sha256 " + g->hash() +
                                        " but [model] expect_sha256 is " +
                                        config.expect_model_sha256);
    }
  }
  // Through the backend: with [train] device = "cuda" the model lives in GPU memory.
  std::vector<float> initial = s->site_.model->GetParams();
  FM_ASSIGN_OR_RETURN(
      s->node_, GossipNode::Create(options, s->identity_, advertise, std::move(allowlist),
                                   std::move(seeds), std::move(initial), *env,
                                   checkpoint ? &*checkpoint : nullptr));
  s->Log("gossip node on " + advertise + ": protocol " + config.gossip.protocol + ", topology " +
         config.gossip.topology + ", codec " + config.codec_chain + "; model " +
         s->site_.model->name() + " (" + std::to_string(n) + " parameters), " +
         (s->external_ ? std::string("training by the site's trainer (") + s->external_->endpoint() + ")"
                       : "partition " + std::to_string(t.index) + "/" +
                             std::to_string(t.partition.num_partitions) + " = " + std::to_string(s->site_.train.size()) + " samples") +
         (checkpoint ? "; resumed at step " + std::to_string(checkpoint->model_version)
                     : "; no checkpoint: will pull a model from a neighbour"));
  return s;
}

ZmqClient* GossipService::ClientFor(const std::string& id) {
  std::optional<Address> address = node_->AddressOf(id);
  if (!address) return nullptr;
  auto it = clients_.find(id);
  if (it != clients_.end()) {
    if (it->second.endpoint == address->endpoint) return it->second.client.get();
    closed_client_bytes_ += it->second.client->bytes_sent();
    models_replaced_ += it->second.outbox.models_replaced();
    clients_.erase(it);
  }
  ZmqClientOptions o;
  o.federation_id = config_.federation_id;
  o.node_id = config_.node_id;
  o.heartbeat_interval_ms = 0;  // SWIM probes are the heartbeats
  o.send_timeout_ms = 0;        // never block the loop on a dead peer's full queue
  // What waits waits in the outbox, where membership goes first: the socket holds a few
  // frames (64 KiB chunks) and the kernel 256 KiB (enough for 40 Mbit/s at 50 ms round
  // trip, a quarter of a second at 10 Mbit/s).
  o.send_hwm = 4;
  o.send_buffer_bytes = 256 << 10;
  auto client = ZmqClient::Create(o, &identity_);
  if (!client.ok()) return nullptr;
  if (!(*client)->Connect(address->endpoint, address->curve_public).ok()) return nullptr;
  return clients_.emplace(id, PeerClient{address->endpoint, std::move(*client), GossipOutbox{}})
      .first->second.client.get();
}

void GossipService::DropClientsNotInView() {
  const std::vector<std::string> live = node_->membership().LiveIds();
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (std::binary_search(live.begin(), live.end(), it->first)) {
      ++it;
    } else {
      // Closing drops what is queued for a dead peer, so its queue cannot grow unbounded.
      closed_client_bytes_ += it->second.client->bytes_sent();
      models_replaced_ += it->second.outbox.models_replaced();
      it = clients_.erase(it);
    }
  }
}

void GossipService::Flush() {
  wire::WireLimits limits;
  limits.max_chunk_bytes = 64 << 10;  // a probe waits behind one chunk at most
  const bool replace_queued_pushes = config_.gossip.protocol == "dpsgd";
  for (GossipSend& send : node_->TakeSends()) {
    if (ClientFor(send.to) == nullptr) continue;
    auto frames = wire::Encode(send.message, limits);
    if (!frames.ok()) {
      Log("could not encode a message for " + send.to + ": " + frames.status().message());
      continue;
    }
    GossipOutbox& outbox = clients_.at(send.to).outbox;
    const auto* model = std::get_if<wire::GossipModel>(&send.message.body);
    if (model != nullptr && model->model.element_count > 0) {
      // D-PSGD mixes each neighbour's latest model: a newer push makes a queued one moot.
      outbox.PushModel(std::move(*frames), replace_queued_pushes && model->kind == wire::GossipKind::kPush);
    } else {
      outbox.PushControl(std::move(*frames));
    }
  }
  Pump();
}

void GossipService::Pump() {
  for (auto& [id, peer] : clients_) {
    while (const wire::Frame* frame = peer.outbox.Front()) {
      auto sent = peer.client->TrySendFrame(*frame);
      if (!sent.ok() || !*sent) break;  // full: the rest waits here (SWIM notices a dead peer)
      peer.outbox.PopFront();
    }
  }
}

bool GossipService::HasQueued() const {
  for (const auto& [id, peer] : clients_) {
    if (!peer.outbox.empty()) return true;
  }
  return false;
}

uint64_t GossipService::ModelsReplaced() const {
  uint64_t n = models_replaced_;
  for (const auto& [id, peer] : clients_) n += peer.outbox.models_replaced();
  return n;
}

Status GossipService::Serve(int timeout_ms) {
  // Frames waiting in outboxes: look again soon, as the sockets drain.
  for (int wait = HasQueued() ? std::min(timeout_ms, 2) : timeout_ms;; wait = 0) {
    Pump();
    FM_ASSIGN_OR_RETURN(std::optional<ServerEvent> event, server_->Poll(wait));
    if (!event) return Status::OK();
    if (auto* r = std::get_if<Received>(&*event)) {
      std::optional<std::string> id = node_->IdForCurveKey(r->peer);
      if (!id) {
        ++refused_inputs_;
        continue;
      }
      const bool was_running = node_->running();
      (void)node_->OnMessage(*id, r->message);  // drops are counted by the node
      if (!was_running && node_->running()) {
        Log("joined: pulled the current model of " + *id + " at step " +
            std::to_string(node_->step()));
      }
      Flush();
    } else if (std::holds_alternative<RejectedInput>(*event)) {
      ++refused_inputs_;
    }
  }
}

float GossipService::LearningRate(uint64_t step) const {
  const GossipConfig& g = config_.gossip;
  const float lr = config_.training.trainer.sgd.lr;
  if (g.lr_decay != "cosine" || g.max_steps <= 0) return lr;
  const double t = std::min(1.0, static_cast<double>(step) / static_cast<double>(g.max_steps));
  const double low = g.lr_min_fraction * lr;
  return static_cast<float>(low + (lr - low) * 0.5 * (1.0 + std::cos(M_PI * t)));
}

Result<std::optional<TrainerAnswer>> GossipService::RunExternal(const std::string& kind,
                                                                const std::atomic<bool>* stop) {
  const std::span<float> x = node_->params();
  trainer::TaskRequest r;
  r.kind = kind;
  r.round = node_->step();
  r.node_id = config_.node_id;
  r.epochs = 0;
  r.steps = kind == "fit" ? static_cast<uint64_t>(config_.gossip.local_steps) : 0;
  r.lr = LearningRate(node_->step());
  r.batch = static_cast<uint32_t>(config_.training.trainer.batch_size);
  r.momentum = config_.training.trainer.sgd.momentum;
  r.seed = FitSeed(config_.training.seed, config_.node_id, node_->step());
  r.tensors = external_tensors_;
  auto answer = external_->Run(std::move(r), x, [stop] { return stop != nullptr && stop->load(); });
  if (!answer.ok()) {
    Log("step " + std::to_string(node_->step()) + ": the site's trainer failed its " + kind +
        " task (" + answer.status().message() + "); gossiping on with the current model");
    return std::optional<TrainerAnswer>{};
  }
  return std::optional<TrainerAnswer>(std::move(*answer));
}

Status GossipService::TrainAndStep() {
  const std::span<float> x = node_->params();
  if (external_ && config_.gossip.local_steps > 0) {
    FM_ASSIGN_OR_RETURN(auto answer, RunExternal("fit", stop_));
    if (answer) std::copy(answer->values.begin(), answer->values.end(), x.begin());
  } else if (config_.gossip.local_steps > 0) {
    trainer_->optimizer().set_lr(LearningRate(node_->step()));
    FM_RETURN_IF_ERROR(site_.model->SetParams(x));
    FM_ASSIGN_OR_RETURN(EpochStats st,
                        trainer_->TrainSteps(site_.train, config_.gossip.local_steps));
    (void)st;
    Model& m = *site_.model;
    m.backend().CopyToHost(x.data(), m.params(), x.size() * sizeof(float));
  }
  node_->Tick();
  stats_.steps = node_->step();
  if (stats_.steps % static_cast<uint64_t>(config_.gossip.eval_every) == 0) {
    FM_RETURN_IF_ERROR(Evaluate());
  }
  if (stats_.steps % static_cast<uint64_t>(config_.gossip.checkpoint_every) == 0) {
    FM_RETURN_IF_ERROR(SaveCheckpoint());
  }
  return Status::OK();
}

Status GossipService::Evaluate() {
  stats_.bytes_received = server_->bytes_received();
  stats_.bytes_sent = closed_client_bytes_;
  for (const auto& [id, c] : clients_) stats_.bytes_sent += c.client->bytes_sent();
  stats_.dropped_messages = node_->drops().total() + refused_inputs_;
  stats_.models_replaced = ModelsReplaced();
  JsonLine line;
  line.Add("node", config_.node_id)
      .Add("time_s", env_->NowSeconds() - started_at_)
      .Add("step", static_cast<int64_t>(node_->step()));
  if (external_) {
    FM_ASSIGN_OR_RETURN(auto answer, RunExternal("evaluate", stop_));
    if (answer) {
      auto metric = [&](const char* name) {
        auto it = answer->metrics.find(name);
        return it == answer->metrics.end() ? std::optional<double>{} : std::optional<double>(it->second);
      };
      if (auto acc = metric("accuracy")) {
        stats_.test_accuracy = *acc;
        line.Add("test_accuracy", *acc);
      }
      if (auto loss = metric("loss")) line.Add("test_loss", *loss);
    }
  } else if (site_.test.size() > 0) {
    FM_RETURN_IF_ERROR(site_.model->SetParams(node_->params()));
    FM_ASSIGN_OR_RETURN(EvalStats ev, trainer_->Evaluate(site_.test));
    stats_.test_accuracy = ev.accuracy;
    line.Add("test_accuracy", ev.accuracy).Add("test_loss", ev.loss);
  }
  line.Add("peers_alive", static_cast<int64_t>(node_->peers_alive()))
      .Add("bytes_sent", static_cast<int64_t>(stats_.bytes_sent))
      .Add("bytes_received", static_cast<int64_t>(stats_.bytes_received))
      .Add("dropped_messages", static_cast<int64_t>(stats_.dropped_messages))
      .Add("models_replaced", static_cast<int64_t>(stats_.models_replaced));
  Log(line.str());
  if (prom_) {
    prom_->GossipStatus(node_->step(), node_->peers_alive(), stats_.bytes_sent, stats_.bytes_received,
                        stats_.test_accuracy);
  }
  if (config_.training.metrics_path.empty()) return Status::OK();
  return AppendJsonLine(config_.training.metrics_path, line);
}

Status GossipService::SaveCheckpoint() { return store_->SaveCheckpoint(node_->Checkpoint()); }

Status GossipService::ReloadAllowlist() {
  FM_ASSIGN_OR_RETURN(std::vector<PublicIdentity> allowlist, ReadAllowlist(config_.gossip.allow_dir));
  std::set<std::string> keys;
  for (const PublicIdentity& p : allowlist) keys.insert(p.curve_public_z85());
  // The ids whose keys leave the list, found while the old list still maps them.
  std::vector<std::pair<std::string, std::string>> revoked;  // (curve key z85, id)
  for (const PublicIdentity& p : allowlist_) {
    if (!keys.contains(p.curve_public_z85())) revoked.emplace_back(p.curve_public_z85(), p.name);
  }
  server_->Reload(allowlist);
  node_->SetAllowlist(allowlist);
  for (const auto& [key, id] : revoked) {
    const bool was_connected = server_->Disconnect(key);
    if (auto it = clients_.find(id); it != clients_.end()) {
      closed_client_bytes_ += it->second.client->bytes_sent();
      models_replaced_ += it->second.outbox.models_replaced();
      clients_.erase(it);
    }
    Log("peer " + id + " revoked: " +
        (was_connected ? "its connection is closed" : "it was not connected") +
        ", and it left the view");
  }
  allowlist_ = std::move(allowlist);
  Log("gossip allowlist reloaded from " + config_.gossip.allow_dir + ": " +
      std::to_string(allowlist_.size()) + " site(s)");
  return Status::OK();
}

Status GossipService::Run(const std::atomic<bool>* stop, std::atomic<bool>* reload) {
  started_at_ = env_->NowSeconds();
  stop_ = stop;
  const uint64_t max_steps = static_cast<uint64_t>(config_.gossip.max_steps);
  while (!stop->load()) {
    if (reload != nullptr && reload->exchange(false)) {
      if (Status s = ReloadAllowlist(); !s.ok()) {
        Log("gossip allowlist reload failed, keeping the old one: " + s.message());
      }
    }
    const bool was_running = node_->running();
    node_->OnTimer();
    if (!was_running && node_->running()) {
      Log("no neighbour answered the join pull: starting from this node's own model");
    }
    Flush();
    if (node_->TickDue()) {
      FM_RETURN_IF_ERROR(TrainAndStep());
      Flush();
      DropClientsNotInView();
      if (max_steps > 0 && node_->step() >= max_steps) break;
    }
    const double wait_s = node_->NextTimerAt() - env_->NowSeconds();
    const int wait_ms = static_cast<int>(std::clamp(std::ceil(wait_s * 1000.0), 0.0, 50.0));
    FM_RETURN_IF_ERROR(Serve(wait_ms));
  }
  // A last evaluation (unless this step just had one) and checkpoint: a restart resumes
  // from exactly here.
  if (node_->step() % static_cast<uint64_t>(config_.gossip.eval_every) != 0 || node_->step() == 0) {
    FM_RETURN_IF_ERROR(Evaluate());
  }
  FM_RETURN_IF_ERROR(SaveCheckpoint());
  Log("stopped at step " + std::to_string(node_->step()));
  return Status::OK();
}

}  // namespace fedmesh
