// GossipService: `fedmesh-node` in serverless mode ([gossip] listen set). It drives a
// GossipNode (gossip/gossip_node.h) over ZeroMQ with the wall clock: one ROUTER socket
// (CurveZMQ server, ZAP allowlist of the federation's sites) receives from every peer; one
// DEALER per live peer (CurveZMQ client, checking the peer's key) sends to it. A peer is
// named by the key its connection authenticated with, mapped to its site id through the
// allowlist, so a message can only ever speak for the site whose key sent it.
//
// Loop: every [gossip] period_ms it trains local_steps SGD steps on its partition, then
// takes a gossip step (the protocol mixes with neighbours); between steps it serves
// messages and membership timers. Every eval_every steps it evaluates on the test set and
// writes a JSON metrics line; every checkpoint_every steps (and on stop) it saves model,
// protocol state, sequence numbers and peers to its SQLite store, from which a restart
// resumes. A node without a checkpoint first pulls a current model from a neighbour.
// Thread-safety: Run blocks the calling thread; stop it through the flag.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/env.h"
#include "core/status.h"
#include "core/trainer.h"
#include "crypto/identity.h"
#include "gossip/gossip_node.h"
#include "node/external_trainer.h"
#include "node/gossip_outbox.h"
#include "node/node_config.h"
#include "node/node_metrics.h"
#include "telemetry/metrics_exporter.h"
#include "node/site_model.h"
#include "transport/zmq/zmq_client.h"
#include "transport/zmq/zmq_server.h"
#include "storage/node_store.h"

namespace fedmesh {

struct GossipServiceStats {
  uint64_t steps = 0;
  double test_accuracy = -1;  // last evaluation; -1 before the first
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t dropped_messages = 0;
  uint64_t models_replaced = 0;  // queued models a newer one replaced before they left
};

class GossipService {
 public:
  // Reads keys, allowlist and data, opens the store (resuming from its checkpoint), binds
  // the listen endpoint. Errors name the file or key at fault.
  static Result<std::unique_ptr<GossipService>> Create(
      const NodeConfig& config, Env* env, std::function<void(const std::string&)> log);
  ~GossipService();

  // Runs until *stop is set or [gossip] max_steps steps were taken; then evaluates,
  // checkpoints and returns. A non-OK Status only for a broken transport or store. When
  // *reload is true (SIGHUP) it is cleared and the allowlist re-read (ReloadAllowlist); a
  // failed reload is logged and the old list kept. `reload` may be null.
  Status Run(const std::atomic<bool>* stop, std::atomic<bool>* reload = nullptr);

  // Re-reads [gossip] allow. A removed peer is revoked at once: its connection to this
  // node is closed, this node's socket to it dropped, and it leaves the view (nothing more
  // is sent to it or taken from it); its redial is refused by the ZAP handler. New keys may
  // join. On error nothing changes.
  Status ReloadAllowlist();

  // The endpoint actually bound (the real port for "tcp://127.0.0.1:*").
  const std::string& bound_endpoint() const { return bound_; }
  const GossipServiceStats& stats() const { return stats_; }

 private:
  GossipService(NodeConfig config, Env* env, Identity identity,
                std::function<void(const std::string&)> log);
  Status Serve(int timeout_ms);
  void Flush();
  ZmqClient* ClientFor(const std::string& id);
  void DropClientsNotInView();
  Status TrainAndStep();
  // [train] lr, or its cosine schedule ([gossip] lr_decay) at gossip step `step`.
  float LearningRate(uint64_t step) const;
  Status Evaluate();
  Status SaveCheckpoint();
  void Log(const std::string& line) const;

  NodeConfig config_;
  Env* env_;
  Identity identity_;
  std::function<void(const std::string&)> log_;
  SiteModel site_;
  std::unique_ptr<Trainer> trainer_;
  // [train] external*: local steps and evaluations by the site's own trainer process; a
  // failed step is logged and the node gossips on with its current model.
  std::unique_ptr<ExternalTrainer> external_;
  std::vector<trainer::TensorSpec> external_tensors_;
  const std::atomic<bool>* stop_ = nullptr;  // Run's flag, for the external trainer's waits
  std::unique_ptr<NodeStore> store_;
  std::unique_ptr<MetricsExporter> exporter_;  // [metrics] listen; null when off
  std::unique_ptr<NodeMetrics> prom_;
  // Asks the external trainer for a task of `kind` on the current model; false (logged)
  // when it failed.
  Result<std::optional<TrainerAnswer>> RunExternal(const std::string& kind, const std::atomic<bool>* stop);
  std::unique_ptr<ZmqServer> server_;
  // One DEALER per live peer, with the endpoint it dialled: a peer that restarted on
  // another port gets a fresh socket as soon as membership learns the new endpoint.
  // Its outbox holds what waits to be sent (membership first, one model queued at most):
  // the socket's own queue is kept to a few frames so that a probe never waits behind
  // models on a slow link (node/gossip_outbox.h).
  struct PeerClient {
    std::string endpoint;
    std::unique_ptr<ZmqClient> client;
    GossipOutbox outbox;
  };
  // Hands each peer's queued frames to its socket while it has room.
  void Pump();
  bool HasQueued() const;
  std::map<std::string, PeerClient> clients_;
  uint64_t closed_client_bytes_ = 0;  // bytes_sent of clients already closed
  uint64_t models_replaced_ = 0;      // of outboxes already closed
  uint64_t ModelsReplaced() const;
  std::unique_ptr<GossipNode> node_;
  std::string bound_;
  double started_at_ = 0;
  GossipServiceStats stats_;
  uint64_t refused_inputs_ = 0;  // frames the transport could not decode, unknown keys
  std::vector<PublicIdentity> allowlist_;  // [gossip] allow as last read
};

}  // namespace fedmesh
