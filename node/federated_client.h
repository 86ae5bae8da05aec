// FederatedClient: a site node's side of aggregator-driven federated training, what
// `fedmesh-node --config site.toml` runs. It loads the site's key pair, the aggregator's
// public key and this site's data partition once, opens the node's SQLite store (and
// resumes from its checkpoint), then serves the aggregator: Register until a RegisterAck
// comes (re-sent after RegisterRetryDelay, with a Reconnect before each re-send), and for
// every FitTask: decode the global model (any codec chain), train local_epochs on the
// local data only, send a FitResult holding the change (local weights - global model)
// encoded with the prescribed codec chain or the node's own [codec] chain, with error
// feedback for lossy chains, and save a checkpoint (model, optimizer state, the codec's
// residual) after the send.
//
// A FitTask that asks for secure aggregation (FitTask::secagg) is trained the same way, but
// the change is not sent: the node takes part in SecAgg+ (node/secagg_participant.h) and
// only its masked encoding leaves the site. The change it contributed is kept in its store
// (checkpoint tensor kSecAggInputTensor, on site) as the record of what went into the sum. For
// fault-injection tests, FEDMESH_FAULT=secagg-kill-before-unmask makes the process SIGKILL
// itself when the unmask request of a round it masked arrives.
//
// A crash after the send but before the checkpoint leaves the previous residual; the
// re-trained round's update then repeats what the lost residual step had already sent
// (at most one round's compressed update counted twice), which the aggregator's duplicate
// check does not catch when it had accepted the first one. Saving before sending would
// instead lose one update on a crash; both are rare, this order keeps the code simple.
//
// Repeated rounds: a FitTask for a round the checkpoint says was already served is trained
// and answered again, not skipped. The aggregator re-sends a task only when it has not
// accepted this node's update (lost in transit, or sent before a crash that left no
// checkpoint), so skipping could stall the round; a true duplicate is refused by the
// round engine with a Reject(kDuplicate), which is logged and harmless.
//
// There is no "finished" message in the wire protocol: Run returns when *stop becomes true
// (the binary sets it on SIGINT / SIGTERM). While registered and idle for longer than
// FederatedClientOptions::reregister_after_silence_ms it registers again (cheap and
// idempotent on the aggregator), which is how it finds an aggregator that restarted.
// Thread-safety: Run blocks its thread; one thread at a time. `stop` may be set from any
// thread or a signal handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/codec/codec.h"
#include "core/codec/error_feedback.h"
#include "core/data/dataset.h"
#include "core/env.h"
#include "core/model.h"
#include "core/trainer.h"
#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"
#include "node/external_trainer.h"
#include "node/fit_task_runner.h"
#include "node/record_privacy.h"
#include "node/node_metrics.h"
#include "telemetry/metrics_exporter.h"
#include "node/secagg_participant.h"
#include "node/node_config.h"
#include "transport/zmq/zmq_client.h"
#include "storage/node_store.h"

namespace fedmesh {

// NodeCheckpoint::tensors name of the change this node fed into its last secure round
// (before clipping): the site's own record of what it contributed.
inline constexpr char kSecAggInputTensor[] = "secagg/last_input";

struct FederatedClientOptions {
  // The federation the aggregator serves (its [federation] id). Required; printable ASCII,
  // no spaces.
  std::string federation_id;
  // Socket settings. federation_id and node_id are filled in by the client. Defaults:
  // ZmqClientOptions{} (CurveZMQ on, heartbeats every 5 s, reconnect 100 ms .. 30 s).
  ZmqClientOptions transport;
  // Longest single wait in Run, so that *stop is noticed within about this long.
  // Default: 100 ms.
  int poll_interval_ms = 100;
  // Registered but nothing heard from the aggregator for this long: register again.
  // Default: 60,000 ms. 0 disables.
  int reregister_after_silence_ms = 60000;
  // Receives the live progress line (telemetry/terminal_progress.h): registered, training a
  // round, update sent and rounds trained. Default: none.
  std::function<void(const std::string&)> progress;
};

// What Run has done, for tests and logs.
struct FederatedClientStats {
  uint64_t registrations = 0;   // RegisterAcks received
  uint64_t rounds_served = 0;   // FitResults sent
  uint64_t tasks_refused = 0;   // FitTasks dropped as invalid
  uint64_t rejects = 0;         // Rejects received from the aggregator
  // Update payloads sent: dense float32 size and encoded size.
  uint64_t bytes_up_raw = 0;
  uint64_t bytes_up = 0;
};

class FederatedClient {
 public:
  // Loads everything named by `config`: the key (ReadIdentity: its name must equal
  // config.node_id), the aggregator's public key, the data partition, the model and the
  // store, restoring the checkpoint when there is one. Errors a user can fix (missing or
  // open key file, bad data, a store of another kind) are returned as Status naming the
  // file. `env` supplies randomness (model init, shuffling, retry jitter) and must outlive
  // the client. `log` receives one human-readable line per event; may be empty.
  static Result<std::unique_ptr<FederatedClient>> Create(
      const NodeConfig& config, const FederatedClientOptions& options, Env* env,
      std::function<void(const std::string&)> log = {});

  ~FederatedClient();
  FederatedClient(const FederatedClient&) = delete;
  FederatedClient& operator=(const FederatedClient&) = delete;

  // Connects and serves the aggregator until *stop is true; returns OK then. A broken
  // transport or a failed checkpoint write is returned as an error. REQUIRES: stop != null.
  Status Run(std::atomic<bool>* stop);

  const std::string& node_id() const { return identity_.name(); }
  uint64_t num_examples() const { return train_.size(); }
  // 0 before an external trainer's node adopted the aggregator's model.
  size_t num_params() const { return model_ ? model_->num_params() : 0; }
  // [train] external*: the site's trainer process; null with fedmesh's own trainer.
  ExternalTrainer* external_trainer() { return external_.get(); }
  std::optional<uint64_t> last_round_served() const { return last_round_served_; }
  const FederatedClientStats& stats() const { return stats_; }
  // The codec's error-feedback residual (empty before the first lossy round).
  const std::vector<float>& residual() const;

 private:
  FederatedClient(NodeConfig config, FederatedClientOptions options, Env* env, Identity identity,
                  std::function<void(const std::string&)> log);

  void Log(const std::string& line) const;
  void Progress(const std::string& line) const;
  Status SendRegister();
  wire::Header OutHeader(uint64_t round);
  // Trains on `task` and sends the result. Invalid tasks are logged and refused (OK); only
  // a transport or store failure is an error.
  // Federated evaluation: evaluates the task's model on test_ and answers with an
  // evaluation FitResult (no training, nothing else changes).
  Status HandleEvalTask(const wire::Message& m, const wire::FitTask& task);
  // Federated statistics: summarises train_ under config_.stats_policy and answers with a
  // statistics FitResult (withheld ones say why).
  Status HandleStatsTask(const wire::Message& m, const wire::FitTask& task);
  // Secure phase 2: this site's exact sums masked through SecAgg+ (secagg_).
  Status HandleSecureStatsTask(const wire::Message& m, const wire::FitTask& task);
  // [data] missing = "impute_mean": the first task with the federation's means fills the
  // missing cells of train_ and test_. "" when done (or nothing to do), else why the task
  // must be refused.
  std::string ImputeMissingCells(const wire::FitTask& task);
  Status HandleFitTask(const wire::Message& m, const wire::FitTask& task, std::atomic<bool>* stop);
  // The aggregator's secure aggregation messages for the round this node takes part in.
  // A message for another round, or one that fails a check, ends this node's part (logged).
  Status HandleSecAgg(const wire::Message& m);
  // Makes the aggregator's graph model (FitTask::model_graph) this node's model unless it
  // already is: checks the bytes hash to `sha256` and that [model] expect_sha256 allows
  // it, builds it, checks the site's data fits it and resets the carried optimizer and
  // codec state. FailedPrecondition when expect_sha256 forbids it (the node stops: it will
  // never train this federation's model), InvalidArgument for a graph it cannot run.
  // `task_loss`: the FitTask's loss name (empty when restoring from a checkpoint).
  Status AdoptModel(const std::string& sha256, const std::string& graph_bytes,
                    const std::string& task_loss = "");
  // One JSON line per round served to [node] metrics, when set.
  Status AppendRoundMetrics(uint64_t round, const EpochStats& last, uint64_t num_examples,
                            uint64_t bytes_raw, uint64_t bytes, double wall_s);
  // A task this node will not answer: logged, counted, and told to the aggregator (a
  // Reject with reason TASK_FAILED) so that its round stops waiting for this site.
  Status RefuseTask(const wire::Message& m, const std::string& what, const std::string& why);
  // The FitContext every task starts from.
  FitContext MakeContext(std::atomic<bool>* stop);

  NodeConfig config_;
  FederatedClientOptions options_;
  Env* env_;
  Identity identity_;
  std::function<void(const std::string&)> log_;
  CurveKey server_key_{};
  Dataset train_;
  Dataset test_;  // held-out data for federated evaluation; may be empty
  // The federation's first model (version 0) as received, for the local-only baseline of
  // the last evaluation (FitTask::local_only_epochs); empty until then, and after a restart.
  std::vector<float> first_global_;
  bool needs_imputation_ = false;  // train_ / test_ hold NaN cells until the federation's means come
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;  // null until adopted for an external trainer without [model] onnx
  std::unique_ptr<ExternalTrainer> external_;
  std::unique_ptr<MetricsExporter> exporter_;  // [metrics] listen; null when off
  std::unique_ptr<NodeMetrics> prom_;
  std::unique_ptr<NodeStore> store_;
  std::unique_ptr<ZmqClient> transport_;  // made by Run
  codec::Chain default_chain_;   // [codec] chain
  FitCarry carry_;               // velocity and error feedback, across rounds and restarts
  // [privacy] mode = "dp-sgd": the site's ledger, kept in the store's attributes and saved
  // after every training task before its update leaves. Empty when record-level DP is off.
  std::optional<RecordPrivacyLedger> privacy_;
  uint64_t model_version_ = 0;
  // FitContext::local for model_, from [model] local; recomputed when the model changes.
  Status ComputeLocalRanges();

  std::string model_graph_;  // the adopted architecture (FitTask::model_graph); empty: none
  std::vector<std::pair<size_t, size_t>> local_ranges_;
  std::string model_sha256_;
  std::optional<uint64_t> last_round_served_;
  std::vector<PublicIdentity> secagg_allow_;  // [secagg] allow; empty: refuse secure rounds
  std::optional<SecAggParticipant> secagg_;   // the secure round under way
  // The rounds this site sent a masked input for: never a second one (MaskLedger).
  MaskLedger masked_rounds_;
  uint64_t next_message_id_ = 1;
  // The task whose update the transport keeps for a resumed upload (SendResumable).
  struct SentUpdate {
    uint64_t round = 0;
    uint64_t model_version = 0;
  };
  std::optional<SentUpdate> sent_update_;
  uint64_t resumes_logged_ = 0;  // transport_->resumes() last reported in the log
  FederatedClientStats stats_;
};

}  // namespace fedmesh
