// AggregatorService: what `fedmesh-aggregator` runs. It drives the sans-IO RoundEngine
// (aggregator/round_engine.h) with a ZmqServer (CurveZMQ, allowlisted site keys) and the
// wall clock, and writes every engine event to the AggregatorStore (SQLite) in its own
// transaction before it acts on the next input, so a killed aggregator restarts into the
// same round with every update it had accepted. The transport names a peer by its
// authenticated key (Z85); the service maps that key to the site name of the allowlist
// entry, and the engine sees only site names (nodes use their key's name as node id).
// After each closed round it evaluates the new global model on the eval set and appends
// one JSON line to the metrics file.
//
// Thread-safety: one thread of control calls Step / Run / ReloadAllowlist. Run watches
// two atomics that other threads (or signal handlers) may set: stop and reload.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aggregator/peer_rate_limiter.h"
#include "aggregator/aggregator_metrics.h"
#include "aggregator/round_engine.h"
#include "aggregator/round_progress.h"
#include "aggregator/upstream_link.h"
#include "aggregator/federation_status.h"
#include "aggregator/status_page.h"
#include "transport/zmq/admin_server.h"
#include "telemetry/metrics_exporter.h"
#include "core/backend.h"
#include "core/data/dataset.h"
#include "core/env.h"
#include "core/graph/graph.h"
#include "core/model.h"
#include "core/status.h"
#include "core/trainer.h"
#include "crypto/identity.h"
#include "aggregator/aggregator_config.h"
#include "transport/zmq/zmq_server.h"
#include "storage/aggregator_store.h"

namespace fedmesh {

struct AggregatorServiceOptions {
  // Transport settings. heartbeat_interval_ms is replaced by the config's
  // [aggregator] heartbeat_ms. Default: ZmqServerOptions{} (CurveZMQ on).
  ZmqServerOptions transport;
  // When set, the global model is evaluated on this data instead of loading
  // config.eval_dataset (tests, simulator). Default: none.
  std::optional<Dataset> eval_data;
  // Compute threads of the evaluator's CPU backend; <= 0 means all cores. Default: 1, so
  // evaluation does not compete with the event loop for every core.
  int eval_threads = 1;
  // Registers per node: a burst of 5, then one every 2 s; more are dropped unanswered (a
  // Register costs a store transaction and a reply).
  PeerRateLimitOptions register_limit{5.0, 0.5};
  // Rejected messages per node: a burst of 20, then 2 a second; past it the node's
  // messages are dropped unread until it is under the rate again (a rejection costs a
  // decode, a reply and a log line).
  PeerRateLimitOptions reject_limit{20.0, 2.0};
  // Receives the live progress line (aggregator/round_progress.h) at every round event; ""
  // erases it. Default: none (fedmesh-aggregator passes its terminal line).
  std::function<void(const std::string&)> progress;
};

class AggregatorService {
 public:
  // Reads the key and the allowlist, opens the store, loads the eval set, builds the model
  // and the engine (new, continued from the latest stored model, or restored into the open
  // round), binds config.listen and starts the engine. Errors: the key / allowlist readers'
  // (NotFound, PermissionDenied, Corruption), InvalidArgument for a bad config or data,
  // FailedPrecondition when the stored model does not fit the configured model,
  // Unavailable when the endpoint is in use. REQUIRES: env outlives the service.
  static Result<std::unique_ptr<AggregatorService>> Create(const AggregatorConfig& config, Env* env,
                                                           AggregatorServiceOptions options = {});
  ~AggregatorService();

  AggregatorService(const AggregatorService&) = delete;
  AggregatorService& operator=(const AggregatorService&) = delete;

  // The endpoint actually bound, with the real port ("tcp://127.0.0.1:40123").
  const std::string& endpoint() const { return endpoint_; }

  // Handles at most one input: a due engine timer, or one transport event, waiting up to
  // max_wait_ms (less when a timer is due sooner). Returns true once the engine finished.
  // A non-OK Status only when the store or the transport failed: the service must then be
  // dropped (the store holds everything up to the failure).
  Result<bool> Step(int max_wait_ms);

  // Steps until the engine finishes (returns finish_status(): OK after total_rounds,
  // DeadlineExceeded when a round failed every retry) or *stop becomes true (returns OK
  // with finished() false). When *reload is true (e.g. set on SIGHUP) it is cleared and
  // the allowlist re-read; a failed reload is logged and the old allowlist kept.
  // `reload` may be null.
  Status Run(std::atomic<bool>* stop, std::atomic<bool>* reload = nullptr);

  // Re-reads config.allow_dir and hands it to the transport: new keys may connect; a
  // removed key's connection is closed at once, its next handshake refused, the engine
  // forgets its node (RoundEngine::OnRevoke: the open round stops waiting for it) and
  // nothing more is sent to it. A read error, or a site key that is also an admin or
  // observer key, changes nothing; a store error is returned.
  Status ReloadAllowlist();

  bool finished() const { return finished_; }
  const Status& finish_status() const { return finish_status_; }
  const RoundEngine& engine() const { return *engine_; }
  AggregatorStore& store() { return *store_; }
  // The Prometheus endpoint ([metrics] listen), or null when off.
  const MetricsExporter* metrics_exporter() const { return exporter_.get(); }
  // Site name of an allowlisted key (Z85), or nullopt.
  std::optional<std::string> SiteOfKey(const std::string& key_z85) const;
  // The admin channel's endpoint with its real port ([admin] listen); "" when off.
  const std::string& admin_endpoint() const { return admin_endpoint_; }
  // The status page ([status_page] listen), or null when off.
  const StatusPage* status_page() const { return status_page_.get(); }
  // The view fedmesh-admin and the status page show, as of now.
  FederationStatus BuildStatus() const;

 private:
  AggregatorService() = default;

  Status InitEngine();
  // Persists and acts on the engine's outputs, in order.
  Status Handle(std::vector<RoundEngine::Output> outputs);
  Status HandleEvent(ServerEvent event);
  Status SendMessage(RoundEngine::Send& send);
  Status AppendMetricsLine(const RoundEngine::RoundClosed& closed, const RoundMetrics& stored);
  // Persists a federated evaluation (store table site_eval), logs it and appends its
  // metrics lines.
  Status RecordFederatedEval(const FederatedEvalReport& report);
  void SetAllowlist(const std::vector<PublicIdentity>& allowlist);

  // ---- operations (aggregator/aggregator_service_admin.cc)
  // Restores the store's control state (an aborted federation refuses to start: a new
  // [aggregator] db starts another; a paused one stays paused), opens the admin channel and
  // the status page when configured.
  Status StartOperations(const Identity& identity);
  // InvalidArgument naming the key when one of `sites` (Z85 key -> name) is an admin or
  // observer key.
  Status CheckSiteKeysApart(const std::map<std::string, std::string>& sites) const;
  // Answers the admin requests waiting (at most a few per call), without blocking.
  Status PollAdmin();
  // Runs one admin request and records it (log line and store) with who sent it.
  Status HandleAdmin(const AdminRequest& request);
  // Closes `site`'s connection and refuses its key until the allowlist is reloaded (SIGHUP)
  // or the aggregator restarts; the open round stops waiting for it.
  Status Kick(const std::string& site);
  // Publishes BuildStatus() on board_, at most every 200 ms unless `force`.
  void PublishStatus(bool force);
  EvalResult Evaluate(std::span<const float> global);

  // ---- hierarchy ([upstream], aggregator/aggregator_service_upstream.cc)
  // Opens the link to the top aggregator.
  Status StartUpstream();
  // Takes what the top sent (without waiting) and grants a regional round for a new task.
  Status PollUpstream();
  Status HandleUpstreamTask(UpstreamTask task);
  // After regional round c closed: answers the top's task of that round.
  Status AnswerUpstream(const RoundEngine::RoundClosed& c);
  // Every attempt of regional round r failed: drops it from the store and refuses the
  // top's task, so the top's round stops waiting for this region.
  Status AbandonUpstreamRound(const RoundEngine::RoundRetried& r);
  // A restart: the granted or answered upstream round from the store's control state.
  Status RestoreUpstreamState(bool round_open, uint64_t rounds_closed,
                              RoundEngine::RestoredState* state);

  AggregatorConfig config_;
  AggregatorServiceOptions options_;
  Env* env_ = nullptr;
  std::unique_ptr<RoundProgress> progress_;  // when options_.progress is set

  std::unique_ptr<AggregatorStore> store_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  // [data] normalize = "federated": the configured architecture without the federation's
  // input normalization, which is put in front of it once the statistics close.
  std::optional<graph::Graph> base_graph_;
  // --cross-eval: the last evaluation of the global model and the candidates' after it.
  std::vector<FederatedEvalReport> cross_reports_;
  std::unique_ptr<Trainer> trainer_;
  // Puts the federation's input normalization in front of base_graph_: the new model
  // (kept weights), stored as the federation's graph; returns its (sha256, graph bytes).
  Result<std::pair<std::string, std::string>> NormalizeModel(const FederationStatistics& stats);
  // model_ (and the evaluator's trainer_) become `g`'s model, with the loss; keep_params
  // carries the current weights over (their layout must be the same).
  Status ReplaceModel(graph::Graph g, bool keep_params);
  std::optional<Dataset> eval_data_;
  std::unique_ptr<ZmqServer> server_;
  // [metrics] listen: the Prometheus endpoint and what it exports; null when off.
  std::unique_ptr<MetricsExporter> exporter_;
  std::unique_ptr<AggregatorMetrics> prom_;
  std::optional<RoundEngine> engine_;
  std::string endpoint_;

  std::map<std::string, std::string> name_of_key_;  // Z85 curve key -> site name
  // Z85 curve key -> "[admin] admins key NAME" / "[admin] observers key NAME": never also a
  // site key (a site must not reach the admin channel with the key it trains with).
  std::map<std::string, std::string> operator_keys_;
  std::map<std::string, PublicIdentity> identity_of_key_;  // Z85 curve key -> enrolled identity
  // The verified signature of each node's latest update, stored with it when accepted.
  std::map<std::string, UpdateSignatureRecord> verified_;
  uint64_t bad_signatures_ = 0;
  std::map<std::string, std::string> key_of_name_;  // site name -> Z85 key last heard from
  std::vector<PublicIdentity> allowlist_;            // as last read
  // Operations: the admin channel, the status page and what they show.
  std::unique_ptr<AdminServer> admin_;
  std::string admin_endpoint_;
  StatusBoard board_;
  std::unique_ptr<StatusPage> status_page_;
  struct SiteActivity {
    double last_seen_unix = 0;
    uint64_t last_round = 0;
    uint64_t last_examples = 0;
    uint64_t updates = 0;
  };
  std::map<std::string, SiteActivity> activity_;  // by site name
  std::vector<RoundRow> rounds_;                  // every closed round, by round
  std::set<std::string> kicked_;                  // site names, until the next reload
  std::string control_message_;                   // who paused, or why it finished
  double next_publish_s_ = 0;                     // Env seconds

  PeerRateLimiter register_limiter_, reject_limiter_;
  uint64_t throttled_ = 0;  // messages dropped by either limiter

  std::multiset<double> timers_;  // Env seconds at which to call OnTimer
  std::optional<uint64_t> open_round_;  // the round open in the store, if any
  // This round: encoded payload bytes of the FitTasks sent, and their float32 size. The
  // update side comes from the engine's RoundMetrics (the updates it aggregated).
  uint64_t bytes_down_ = 0;
  uint64_t bytes_down_raw_ = 0;
  uint64_t eval_bytes_down_ = 0;  // the open federated evaluation's tasks
  bool finished_ = false;
  Status finish_status_;

  // [upstream]: the link to the top, the task the open (or granted) regional round serves,
  // and the last round answered (to answer a re-sent task again from the store).
  std::unique_ptr<UpstreamLink> upstream_;
  std::optional<UpstreamTask> upstream_task_;
  struct UpstreamAnswer {
    uint64_t round = 0;
    uint64_t model_version = 0;  // the regional result's version in the store
    uint64_t num_examples = 0;
    double train_loss = 0.0;
  };
  std::optional<UpstreamAnswer> upstream_answer_;
};

}  // namespace fedmesh
