// RoundEngine: the aggregator's federated-learning rounds as a sans-IO state machine
// (DESIGN.md, "sans-IO protocol cores"). Nodes register; when enough are connected
// (min_available_clients) the engine opens a round: it selects clients_per_round of them
// (seeded through Env::rng()), sends each a FitTask with the global model and sets a timer
// at the round's deadline. It accepts one valid FitResult per selected node and closes the
// round as soon as every selected node has answered, or at the deadline when at least
// min_clients have; otherwise it retries the same round number with a fresh selection, up
// to max_retries times. Closing aggregates through a Strategy, evaluates the new model, bumps the
// model version and opens the next round, until total_rounds have closed.
//
// The engine does no I/O and reads no clock of its own: inputs are OnMessage (a decoded
// message and the authenticated peer it came from), OnTimer and OnDisconnect; every input
// returns the Outputs to act on, in order: messages to send, a timer to set, and events
// (RoundOpened, UpdateAccepted, UpdateRejected, RoundClosed, RoundRetried, Finished) that
// the driver persists, logs and counts. fedmesh-aggregator drives it with ZeroMQ and the
// wall clock and writes each event to SQLite; fedmesh-sim drives the same object with
// virtual time. After a crash, Restore rebuilds the engine from what was persisted.
//
// Thread-safety: not thread-safe; one thread of control (the driver's event loop) makes
// every call, and owns the Env's rng() for that time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "aggregator/federated_eval.h"
#include "aggregator/federated_stats.h"
#include "aggregator/secagg_round.h"
#include "aggregator/strategy.h"
#include "core/codec/codec.h"
#include "core/env.h"
#include "core/status.h"
#include "core/wire/messages.h"

namespace fedmesh {

// How rounds run. kSynchronous: the rounds described above. kBuffered: FedBuff (Nguyen et
// al. 2022), asynchronous: each "round" is one buffer of buffer_size updates. Every
// selected node trains continuously: a node that is still training on an older model stays
// selected for the next round, and its update counts there with staleness tau = rounds
// closed since its task, weighted s(tau) = 1 / sqrt(1 + tau); an update staler than
// max_staleness is refused. The strategy sees each update as global + s(tau) * change with
// equal weights, so fedavg applies the mean of the K weighted changes (FedBuff's server
// step with eta = 1; a server optimiser adds its own). A node contributes at most once per
// buffer and gets its next task when the buffer closes.
enum class RoundMode { kSynchronous, kBuffered };

struct RoundEngineOptions {
  // Default: kSynchronous.
  RoundMode mode = RoundMode::kSynchronous;
  // kBuffered: updates per buffer (K), in [min_clients, clients_per_round]. Default: 10.
  int buffer_size = 10;
  // kBuffered: an update trained from a model more than this many versions behind is
  // refused (kLate). >= 0. Default: 10.
  int max_staleness = 10;
  // Federation every message must name in Header::federation_id. Required: no default;
  // printable ASCII without spaces, at most 256 bytes (the wire's id rules).
  std::string federation_id;
  // Header::sender_id of the messages the engine sends. Default: "aggregator".
  std::string aggregator_id = "aggregator";
  // Rounds to close before Finished. Default: 10. Must be >= 1.
  uint64_t total_rounds = 10;
  // Nodes selected per round; all connected nodes when fewer are connected (but at least
  // min_clients). Default: 10. Must be >= 1.
  int clients_per_round = 10;
  // Fewest answers with which a round may close at its deadline. Default: 2. Must be in
  // [1, clients_per_round].
  int min_clients = 2;
  // Fewest connected nodes before a round (or a retry) opens: a fresh aggregator waits for
  // this many registrations, instead of selecting among the first min_clients to arrive.
  // Default: 0, meaning min_clients. Must be 0 or >= min_clients.
  int min_available_clients = 0;
  // Seconds from opening a round (an attempt) to its deadline. Default: 600, enough for a
  // few local epochs of a small CNN on a CPU-only site. Must be finite and > 0.
  double timeout_s = 600.0;
  // Times a round that timed out below min_clients is retried with a fresh selection
  // before the engine gives up with a failed Finished. Default: 3. Must be >= 0.
  int max_retries = 3;
  // Local training settings sent in every FitTask. Defaults: 1 epoch, batch 32, learning
  // rate 0.01, momentum 0. Ranges (the wire's): epochs, batch >= 1; learning rate finite
  // and > 0; momentum in [0, 1). Doubles, like the wire fields, so a configured 0.01 is
  // sent as exactly that double.
  int local_epochs = 1;
  int batch_size = 32;
  double learning_rate = 0.01;
  double momentum = 0.0;
  // RegisterAck::heartbeat_interval_ms: how often nodes send a Heartbeat. The engine does
  // not track liveness itself; the driver calls OnDisconnect. Default: 5,000. Must be >= 1.
  uint64_t heartbeat_interval_ms = 5000;
  // The most examples one update may weigh with (FedAvg's num_examples): a node's claim is
  // also bounded by what it registered, so one node cannot take over the average by
  // claiming more. A capped claim is counted (weight_violations()) and reported in
  // UpdateAccepted::claimed_examples. Default: 0 (bounded by the registration only).
  uint64_t max_examples_per_node = 0;
  // Draw each round's selection from the OS CSPRNG (libsodium) instead of Env's seeded
  // rng: with differential privacy the accountant's subsampling amplification assumes a
  // selection nobody can predict or steer. The aggregator sets it whenever [dp] is on; a
  // simulation leaves it off to stay reproducible. Default: false.
  bool secure_selection = false;
  // A node that failed its FitTask (TASK_FAILED: its trainer failed, or the task does not fit
  // it) f times in a row is left out of the next min(2^(f-1), this) rounds' selections, so
  // its slot goes to a node that can train; it is selected anyway when fewer than a round
  // needs (max(min_clients, min_available_clients)) would be left, and an accepted update
  // clears its count. Not applied with secure_selection (differential privacy): leaving
  // nodes out would change the sampling the accountant assumes. Not kept across a restart
  // of the aggregator. 0 = never left out. Default: 8. Must be >= 0.
  int failure_backoff_max_rounds = 8;
  // A graph model's architecture, sent in every FitTask (FitTask::model_sha256 and
  // model_graph) so sites need no model file. Default: empty (a built-in model).
  std::string model_sha256;
  std::string model_graph;
  // The loss nodes train with, sent in every FitTask (FitTask::loss, class_weights,
  // pos_weight). Default: empty = cross_entropy, no weights.
  std::string loss;
  std::vector<float> class_weights;
  double pos_weight = 0.0;
  // The transport the tasks go out on accepts a chunk's data as its own part (sent as
  // FitTask::chunk_data_parts: nodes then upload without copying into chunk frames).
  // Default: false; the aggregator's ZeroMQ service sets it.
  bool chunk_data_parts = false;
  // Codec chain (core/codec/codec.h) every node must encode its update with, sent as
  // FitTask::update_codec; an update in another chain is rejected. Default: empty, each
  // node uses its own configured chain and the engine decodes whatever valid chain comes.
  std::string update_codec;
  // Codec chain of the global model in FitTasks. Default: "none" (exact float32). Lossy
  // chains (fp16, bf16, int8, qsgd) shrink the downlink; nodes train from the decoded model
  // and send their change relative to it, so the aggregate stays exact in the updates.
  // Sparsifiers are refused: the global model is sent whole.
  std::string downlink_codec = "none";
  // Update prediction beta (core/codec/update_prediction.h): from round 2 on, each FitTask
  // also carries p = beta * (the last round's global change) in downlink_codec; nodes send
  // their change minus p and the engine adds p back, so the round's result is unchanged
  // with a lossless update chain while a sparsifying one (topk) spends its coordinates on
  // what p does not already say. Costs a second model's worth of downlink (a quarter of it
  // with downlink_codec int8). Synchronous rounds without secagg only. After a restart the
  // first round goes without. Default: 0 (off). Must be in [0, 1].
  double update_prediction = 0.0;
  // Secure aggregation (aggregator/secagg_round.h): each round's selected nodes train, then
  // run SecAgg+ through the engine instead of sending FitResults; the engine learns only
  // the sum of their clipped changes and the strategy gets their mean as the round's one
  // update. Stage 1 (advertise keys) has the round's timeout_s, which includes training;
  // each later stage secagg.stage_timeout_s. A stage that cannot close at its deadline
  // (too few nodes or shares) fails the attempt: retried like a round below quorum.
  // Synchronous rounds only. Off by default.
  SecAggSettings secagg;
  // Federated evaluation: after a round closes (every federated_eval.every rounds and
  // after the last one), every connected node is sent an evaluate_only FitTask with the new
  // global model and answers with its held-out metrics (an evaluation FitResult); the engine
  // reports them in EvalClosed when every asked node has answered or timeout_s passed. The
  // next round opens at once; the federation finishes after the last evaluation closes. An
  // evaluation open when the aggregator restarts is lost. Off by default.
  FederatedEvalSettings federated_eval;
  // Federated statistics (aggregator/federated_stats.h): before round 1 opens, every
  // connected node is asked for a summary of its training data (two phases), reported in
  // StatsClosed; round 1 opens after it closes. Skipped by a restored engine past round 1.
  // The summaries travel as plain FitResults, also when secagg is enabled. Off by default.
  FederatedStatsSettings federated_stats;
  // Called when the statistics close, before round 1 opens, when set ([data] normalize =
  // "federated"): returns the model architecture (model_sha256, model_graph) every later
  // task carries, e.g. the configured one with the federation's input normalization in
  // front. An error, or statistics without federation figures, ends the federation
  // (Finished with the reason): its model was to train on normalized inputs. Default: none.
  std::function<Result<std::pair<std::string, std::string>>(const FederationStatistics&)>
      model_after_stats;
  // Whether UpdateAccepted carries the node's new weights, which the aggregator's store
  // persists for Restore. A driver that keeps no store (the simulator) turns it off and
  // saves a model-sized copy per update. Default: true.
  bool report_update_params = true;
  // A regional aggregator's engine (aggregator/upstream_link.h): a round opens only when
  // GrantRound hands it the upstream model, numbered as the upstream round, and after it
  // closes the engine waits for the next grant instead of opening round + 1. A granted
  // round that fails every retry is given up (RoundRetried::abandoned) rather than ending
  // the federation. total_rounds still ends the federation. Synchronous rounds only, without federated statistics or
  // update prediction (the upstream aggregator owns the model between rounds). Default:
  // false.
  bool rounds_on_demand = false;
};

// InvalidArgument naming the first offending field and its value, e.g. min_clients >
// clients_per_round.
Status Validate(const RoundEngineOptions& options);

// Why a message from a node was refused. Each cause has its own counter; ToWireReason gives
// the RejectReason the node receives.
enum class RejectCause : uint8_t {
  kWrongFederation,  // Header::federation_id is not this federation's
  kUnknownNode,      // the sender is not registered (or disconnected since): Register first
  kMalformed,        // sender/node id differs from the peer, round fields disagree, a
                     // payload that does not decode, a codec other than the prescribed
                     // update_codec, num_examples == 0, or a message type nodes do not send
  kWrongRound,       // a FitResult for a round that has not started
  kLate,             // for a round (or attempt) already closed, or after the deadline
  kNotSelected,      // the node was not selected for the current round
  kDuplicate,        // the node's update for this round was already accepted
  kWrongShape,       // element count differs from the model's
  kNonFinite,        // a NaN or infinity in the update, in global + update, or train_loss
};
inline constexpr size_t kRejectCauseCount = 9;

std::string_view RejectCauseName(RejectCause cause);
// kNotSelected has no wire value of its own and is sent as kUnspecified (the text says why).
wire::RejectReason ToWireReason(RejectCause cause);

// A test-set evaluation of a global model.
struct EvalResult {
  double accuracy = 0.0;
  double loss = 0.0;
  // Every metric of the task by name (core/metrics.h); may be empty.
  std::map<std::string, double> metrics;
};
// Evaluates a global model on the configured test set. Called once per closed round, on the
// new model, inside the input that closed the round. May be empty: no evaluation.
using Evaluator = std::function<EvalResult(std::span<const float> global)>;

class RoundEngine {
 public:
  // ---- Outputs ---------------------------------------------------------------------------

  // Send `message` to node `to`. For a FitTask, deadline_s is the round's deadline in Env
  // seconds and message's FitTask::deadline_unix_ms is 0: the engine knows only Env time,
  // so a driver with a wall clock stamps deadline_unix_ms = wall_now_ms +
  // 1000 * (deadline_s - env.NowSeconds()) before encoding; a simulator may leave it 0.
  struct Send {
    std::string to;
    wire::Message message;
    std::optional<double> deadline_s;
  };
  // Call OnTimer at Env time at_seconds (or later). Earlier timers stay valid; a timer that
  // fires when nothing is due is harmless.
  struct SetTimer {
    double at_seconds = 0.0;
  };
  // A round (attempt) opened: persist it before sending the FitTasks.
  struct RoundOpened {
    uint64_t round = 0;
    uint32_t attempt = 0;  // 1 for the first selection of a round, +1 per retry
    uint64_t model_version = 0;
    std::vector<std::string> selected;  // sorted
    double deadline_s = 0.0;            // Env seconds
  };
  // An update was accepted for `round`: persist it; Restore needs it after a crash.
  // num_examples is the FitResult's (what the node trained on this round), not Register's.
  // params are the node's new weights: the global model plus the decoded update (empty
  // when RoundEngineOptions::report_update_params is off).
  struct UpdateAccepted {
    uint64_t round = 0;
    std::string node_id;
    uint64_t num_examples = 0;
    double train_loss = 0.0;
    std::vector<float> params;
    // What the FitResult claimed, when more than num_examples: the claim exceeded the
    // node's registration or max_examples_per_node and was capped. 0 otherwise.
    uint64_t claimed_examples = 0;
  };
  // A message from a node was refused; the node was sent a wire::Reject. Nothing else in
  // the engine changed but the counters. `round` is the engine's current round; `text`
  // names the claimed round where it matters and is the line to log.
  struct UpdateRejected {
    uint64_t round = 0;
    std::string node_id;
    wire::MessageType type = wire::MessageType::kFitResult;
    RejectCause cause = RejectCause::kMalformed;
    std::string text;
  };
  struct RoundMetrics {
    std::optional<double> test_accuracy;  // empty without an Evaluator
    std::map<std::string, double> test_metrics;  // EvalResult::metrics
    std::optional<double> test_loss;
    uint32_t selected = 0;      // nodes selected in the attempt that closed
    uint32_t received = 0;      // updates aggregated
    uint32_t rejected = 0;      // messages rejected while this round was current
    uint32_t attempts = 0;      // 1 + retries of this round
    uint64_t num_examples = 0;  // sum over the aggregated updates
    // Example-weighted mean of the reported train losses over the updates whose loss is
    // known; NaN when none is.
    double train_loss = 0.0;
    double duration_s = 0.0;  // from the round's first opening (or Start after Restore)
    // The aggregated updates' dense float32 size and encoded payload size, and their ratio
    // (0 when no update bytes are known). Updates restored after a crash count in neither:
    // their encoded size was not persisted.
    uint64_t update_bytes_raw = 0;
    uint64_t update_bytes = 0;
    double compression_ratio = 0.0;
    // Differential privacy spent after this round (Strategy::privacy()); empty when the
    // strategy is not private.
    std::optional<PrivacyReport> privacy;
    // Record-level DP (sites' own DP-SGD, FitResult / SecAggMaskedInput record_privacy) of
    // the updates aggregated: how many reported it and the largest epsilon (with its
    // delta). Reported beside `privacy`, never composed with it. Empty when none did.
    struct RecordPrivacy {
      uint32_t sites = 0;
      double epsilon_max = 0.0;
      double delta = 0.0;
    };
    std::optional<RecordPrivacy> record_privacy;
  };
  // The round closed and `global` is model `model_version`: commit both in one transaction.
  struct RoundClosed {
    uint64_t round = 0;
    uint64_t model_version = 0;
    RoundMetrics metrics;
    std::vector<float> global;
    // Strategy::SaveState() after this round (a server optimiser's moments; empty for
    // stateless strategies): commit it with `global`, Restore needs it.
    std::vector<float> strategy_state;
  };
  // The attempt timed out with fewer than min_clients updates; its updates are discarded
  // (storage drops them) and the same round number is retried with a fresh selection.
  struct RoundRetried {
    uint64_t round = 0;
    uint32_t failed_attempt = 0;
    uint32_t received = 0;
    std::string reason;
    // rounds_on_demand: that was the last attempt (max_retries). The round is given up, not
    // retried, and the engine waits for the next grant: the driver drops the open round from
    // its store and tells the upstream aggregator. (Without rounds_on_demand the federation
    // finishes instead.)
    bool abandoned = false;
  };
  // The federation ended: OK after total_rounds, DeadlineExceeded when a round failed
  // max_retries + 1 times, Internal when the strategy failed. No round opens afterwards.
  struct Finished {
    Status status;
    uint64_t rounds_completed = 0;
    // Why an OK federation ended before total_rounds (a privacy budget); empty otherwise.
    std::string stopped_early;
  };
  // A federated evaluation closed (RoundEngineOptions::federated_eval): persist and log it.
  struct EvalClosed {
    FederatedEvalReport report;
  };
  // Federated statistics closed (RoundEngineOptions::federated_stats): write the report.
  struct StatsClosed {
    FederatedStatsReport report;
  };
  // A node said it will not answer its task (wire::Reject TASK_FAILED: its trainer failed,
  // or the task does not fit it). The round (or evaluation) `round` no longer waits for it;
  // `reason` is the node's sentence, the line to log and keep.
  struct TaskFailed {
    uint64_t round = 0;
    std::string node_id;
    std::string reason;
    bool evaluation = false;  // an evaluation task, not a FitTask
    // A failed FitTask: the first round the node may be selected again (its back-off,
    // RoundEngineOptions::failure_backoff_max_rounds); 0 when it is not left out.
    uint64_t next_round = 0;
  };
  using Output = std::variant<Send, SetTimer, RoundOpened, UpdateAccepted, UpdateRejected,
                              RoundClosed, RoundRetried, Finished, EvalClosed, StatsClosed,
                              TaskFailed>;

  // ---- Construction ----------------------------------------------------------------------

  // An update accepted before the crash, as UpdateAccepted reported it.
  struct RestoredUpdate {
    ClientUpdate update;
    double train_loss = std::numeric_limits<double>::quiet_NaN();  // NaN: not known
  };
  // What the driver persisted, enough to resume after a crash.
  struct RestoredState {
    uint64_t round = 1;          // the round that was current; in [1, total_rounds]
    uint64_t model_version = 0;  // version of `global`
    std::vector<float> global;   // the committed global model
    uint32_t attempt = 1;        // attempt of `round` that was open (1 + retries so far)
    // The open attempt's selection. Empty: no attempt was open (the engine was waiting for
    // nodes); it then waits for min_clients registrations and selects afresh.
    std::vector<std::string> selected;
    // Updates accepted in that attempt; each from a selected node, at most one per node.
    std::vector<RestoredUpdate> accepted;
    // The strategy state committed with `global` (RoundClosed::strategy_state).
    std::vector<float> strategy_state;
    // rounds_on_demand: `round` was granted (GrantRound) and has not closed (implied when
    // `selected` is not empty); false: the engine waits for a grant of a round after
    // last_closed_round (0: none closed yet).
    bool granted = false;
    uint64_t last_closed_round = 0;
    // The federation's feature means from the statistics phase (FitTask::impute_values),
    // as StatsClosed reported them; empty: none (no statistics, or they never closed).
    std::vector<double> impute_values;
  };

  // A new federation at round 1, model version 0. REQUIRES: env outlives the engine.
  // InvalidArgument for bad options, a null strategy, or an empty or non-finite model.
  static Result<RoundEngine> Create(RoundEngineOptions options, Env* env,
                                    std::unique_ptr<Strategy> strategy,
                                    std::vector<float> initial_global, Evaluator evaluator = {});

  // Resumes from `state`. No node is connected: the selected nodes that have not answered
  // are sent the FitTask again when they register, and Start sets a fresh deadline
  // (timeout_s from now). InvalidArgument when `state` is inconsistent (names the field).
  static Result<RoundEngine> Restore(RoundEngineOptions options, Env* env,
                                     std::unique_ptr<Strategy> strategy, Evaluator evaluator,
                                     RestoredState state);

  RoundEngine(RoundEngine&&) = default;
  RoundEngine& operator=(RoundEngine&&) = default;

  // ---- Inputs (each returns what to do, in order) ------------------------------------------

  // Call once, before any other input. A restored engine with an open round returns its new
  // deadline timer (and closes the round at once if every selected node had answered).
  std::vector<Output> Start();
  // `from` is the authenticated peer id (the transport's, not the header's).
  std::vector<Output> OnMessage(const std::string& from, const wire::Message& message);
  // `now`: Env time at which a timer fired.
  std::vector<Output> OnTimer(double now);
  // The node's connection is gone: it is no longer selectable, and its messages are
  // refused (kUnknownNode) until it registers again. Returns no outputs today.
  std::vector<Output> OnDisconnect(const std::string& node_id);
  // The node's key was removed from the allowlist: it is forgotten (never selected again
  // unless it registers anew, which its driver refuses while it stays revoked) and the open
  // round, evaluation or statistics phase stops waiting for it. A synchronous round whose
  // other selected nodes have all answered closes at once (retried when fewer than
  // min_clients did). An update it had sent before the revocation stays accepted: it was
  // enrolled then, and the store holds it. Under secure aggregation the node counts as a
  // dropout, recovered by the protocol at the stage deadline.
  std::vector<Output> OnRevoke(const std::string& node_id);

  // Admin control (aggregator/admin_server.h). Pause: no new round opens; one already open
  // runs to its close (or its retry), evaluations and statistics go on. Resume: rounds open
  // again, at once when enough nodes are connected. Abort: the federation ends now; the
  // open round's updates are dropped and Finished reports OK with stopped_early "aborted: "
  // + reason. Each is a no-op on a finished engine; Pause may come before Start (a
  // restored pause).
  std::vector<Output> Pause();
  std::vector<Output> Resume();
  // rounds_on_demand: round `round` trains from `global` (the upstream model), replacing the
  // engine's global model as version model_version() + 1, which the driver stores before
  // acting on the outputs; the round opens now or once enough nodes are connected, and
  // runs (and retries) like any round. `settings` replaces the local training settings
  // sent to nodes (epochs, batch, learning rate, momentum) when set. FailedPrecondition
  // without rounds_on_demand, while a round is open or granted, when finished, or for a
  // round not after the last one closed; InvalidArgument for a model of another size or
  // with a non-finite value.
  struct TrainingSettings {
    int local_epochs = 1;
    int batch_size = 32;
    double learning_rate = 0.01;
    double momentum = 0.0;
  };
  Result<std::vector<Output>> GrantRound(uint64_t round, std::vector<float> global,
                                         std::optional<TrainingSettings> settings = {});
  // rounds_on_demand: a granted round has not closed yet.
  bool granted() const { return granted_; }
  std::vector<Output> Abort(const std::string& reason);

  // ---- Observers ---------------------------------------------------------------------------

  enum class Phase { kWaitingForNodes, kRoundOpen, kFinished };
  Phase phase() const { return phase_; }
  bool paused() const { return paused_; }
  uint64_t round() const { return round_; }      // the current (or last) round, 1-based
  uint32_t attempt() const { return attempt_; }  // of the current round; 0 before its first
  uint64_t model_version() const { return model_version_; }
  uint64_t rounds_completed() const { return rounds_completed_; }
  const std::vector<float>& global() const { return global_; }
  const std::vector<std::string>& selected() const { return selected_; }  // sorted
  // Node ids whose update for the current attempt was accepted, sorted.
  std::vector<std::string> answered() const;
  double deadline_s() const { return deadline_s_; }  // of the open attempt
  bool connected(const std::string& node_id) const;
  size_t connected_count() const;
  // Retries of the current round, and over the engine's life.
  uint32_t retries() const { return attempt_ > 0 ? attempt_ - 1 : 0; }
  uint64_t total_retries() const { return total_retries_; }
  // Updates whose num_examples was capped (RoundEngineOptions::max_examples_per_node).
  uint64_t weight_violations() const { return weight_violations_; }
  // TaskFailed outputs so far.
  uint64_t tasks_failed() const { return tasks_failed_; }
  uint64_t rejected(RejectCause cause) const { return rejected_[static_cast<size_t>(cause)]; }
  uint64_t rejected_total() const;
  const Strategy& strategy() const { return *strategy_; }

 private:
  struct NodeInfo {
    uint64_t num_examples = 0;
    std::vector<std::string> capabilities;
    bool connected = false;
    // kBuffered: the round of the FitTask the node is training on; 0 when idle.
    uint64_t task_round = 0;
    // FitTasks failed in a row, and the first round it may be selected again after them.
    uint32_t failures_in_a_row = 0;
    uint64_t backoff_until_round = 0;
    void Trained() {  // its update (or masked input) was taken: no longer failing
      failures_in_a_row = 0;
      backoff_until_round = 0;
    }
  };
  struct Accepted {
    ClientUpdate update;
    double train_loss = 0.0;  // NaN when not known
    uint64_t encoded_bytes = 0;  // 0 when not known (restored)
    std::optional<wire::RecordPrivacyReport> record_privacy;  // not kept over a restart
  };

  RoundEngine(RoundEngineOptions options, Env* env, std::unique_ptr<Strategy> strategy,
              std::vector<float> global, Evaluator evaluator);

  void HandleRegister(const std::string& from, const wire::Message& m, const wire::Register& r,
                      std::vector<Output>& out);
  void HandleFitResult(const std::string& from, const wire::Message& m, const wire::FitResult& r,
                       std::vector<Output>& out);
  void Reject(const std::string& to, const wire::Message& m, RejectCause cause, std::string text,
              std::vector<Output>& out);
  // Opens an attempt of round_ if enough nodes are connected; otherwise waits.
  void TryOpenRound(std::vector<Output>& out);
  void CloseRound(std::vector<Output>& out);
  void RetryOrGiveUp(std::vector<Output>& out, std::string why = {});
  void HandleSecAgg(const std::string& from, const wire::Message& m, std::vector<Output>& out);
  // Counts a failed FitTask of `node_id` and sets its back-off; returns the first round it
  // may be selected again (0: not left out).
  uint64_t BackOff(const std::string& node_id);
  void HandleTaskFailed(const std::string& from, const wire::Message& m, const wire::Reject& r,
                        std::vector<Output>& out);
  // The open (synchronous, not secure) round stops waiting for selected node `node_id`
  // (revoked, or its task failed): closes it when the others have all answered.
  void StopWaitingFor(const std::string& node_id, const std::string& why, std::vector<Output>& out);
  // Closes the open secure aggregation stage and sends what it produced; after the last
  // stage closes the round. A stage that cannot close waits (early) or fails the attempt
  // (at its deadline).
  void AdvanceSecAgg(bool at_deadline, std::vector<Output>& out);
  // Ends the federation; an OK end waits for an open federated evaluation to close.
  void Finish(Status status, std::vector<Output>& out, std::string stopped_early = {});
  // Federated evaluation of the round just closed, when one is due.
  void MaybeStartEval(std::vector<Output>& out);
  void HandleEvalResult(const std::string& from, const wire::Message& m, const wire::FitResult& r,
                        std::vector<Output>& out);
  // Reports the open evaluation, then finishes if a Finish waited for it.
  void CloseEval(std::vector<Output>& out);
  // Cross-evaluation: evaluates the next shared local model (cross_queue_) at every site.
  void StartCandidateEval(std::vector<Output>& out);
  // Federated statistics: opens phase 1, takes answers, sends phase 2 or reports.
  void StartStats(std::vector<Output>& out);
  void SendStatsRequests(std::vector<Output>& out);
  void HandleStatsResult(const std::string& from, const wire::Message& m, const wire::FitResult& r,
                         std::vector<Output>& out);
  void AdvanceStats(std::vector<Output>& out);
  void CloseStats(std::vector<Output>& out);
  // Secure statistics (phase 2 under [secagg]): SecAgg+ over the sites' encoded sums.
  void OpenStatsSecAgg(std::vector<Output>& out);
  void HandleStatsSecAgg(const std::string& from, const wire::Message& m, std::vector<Output>& out);
  void AdvanceStatsSecAgg(bool at_deadline, std::vector<Output>& out);
  wire::FitTask BuildFitTask();
  // The fields every task of this federation carries alike (model, loss, hyper-parameters),
  // for training and evaluation tasks.
  void SetTaskSettings(wire::FitTask& task) const;
  void SendFitTask(const std::string& to, std::vector<Output>& out);
  wire::Header OutHeader();
  bool IsSelected(const std::string& node_id) const;
  bool buffered() const { return options_.mode == RoundMode::kBuffered; }
  // Every selected node answered (synchronous), or the buffer holds buffer_size updates.
  // Uniform in [0, n) from the OS CSPRNG. REQUIRES: 0 < n <= 2^32 - 1.
  static size_t SecureUniform(size_t n);
  bool RoundFull() const {
    return accepted_.size() >=
           (buffered() ? static_cast<size_t>(options_.buffer_size) : selected_.size());
  }
  // kBuffered: the selection of a new buffer from the connected nodes: those still
  // training stay in it, idle ones are drawn for the remaining places.
  std::vector<std::string> SelectBuffered(std::vector<std::string> connected_ids);

  RoundEngineOptions options_;
  Env* env_;
  std::unique_ptr<Strategy> strategy_;
  Evaluator evaluator_;
  std::vector<float> global_;

  bool started_ = false;
  bool paused_ = false;  // Pause(): no new round opens
  bool granted_ = false;  // rounds_on_demand: round_ was granted and has not closed
  uint64_t last_closed_round_ = 0;  // rounds_on_demand: the last round that closed
  Phase phase_ = Phase::kWaitingForNodes;
  uint64_t round_ = 1;
  uint32_t attempt_ = 0;
  uint64_t model_version_ = 0;
  uint64_t rounds_completed_ = 0;
  std::vector<std::string> selected_;         // sorted
  std::set<std::string> earlier_selected_;    // selected in this round's failed attempts
  std::map<std::string, Accepted> accepted_;  // by node id: aggregation order is stable
  double deadline_s_ = 0.0;
  double round_started_s_ = 0.0;
  std::optional<wire::FitTask> fit_task_;  // the open attempt's task, built once
  // Update prediction: for the next round (beta * the last global change; empty: none),
  // and the one this round's FitTasks carry, as nodes decode it (empty: none), built once
  // per round so that every attempt's nodes subtract the same values.
  std::vector<float> next_prediction_;
  uint64_t prediction_round_ = 0;
  wire::TensorPayload prediction_payload_;
  std::vector<float> sent_prediction_;
  std::map<std::string, NodeInfo> nodes_;  // every node that ever registered
  size_t connected_ = 0;                   // of nodes_, those connected
  codec::Chain downlink_chain_;  // parsed options_.downlink_codec
  std::optional<SecAggRound> secagg_;  // the open attempt's secure aggregation
  uint32_t secagg_contributors_ = 0;   // of the round being closed, for its metrics
  std::optional<FederatedEvaluation> eval_;  // the open federated evaluation
  bool eval_is_final_ = false;               // eval_ is the one after the last round
  // Cross-evaluation: the local models sites shared in the last evaluation, and those
  // still to be evaluated.
  std::map<std::string, std::vector<float>> cross_models_;
  std::vector<std::string> cross_queue_;
  std::optional<FederatedStatsCollection> stats_;  // the open statistics collection
  bool stats_done_ = false;                        // statistics were collected (or skipped)
  std::optional<SecAggRound> stats_secagg_;        // its secure phase 2
  // The federation's feature means from the statistics, sent in every task for sites that
  // impute missing cells; empty without statistics (restored from RestoredState).
  std::vector<double> impute_values_;
  // A Finish that waits for eval_ to close (OK status only).
  std::optional<std::pair<Status, std::string>> pending_finish_;

  uint64_t next_message_id_ = 1;
  uint64_t total_retries_ = 0;
  uint64_t weight_violations_ = 0;
  uint64_t tasks_failed_ = 0;
  uint32_t rejected_in_round_ = 0;
  std::array<uint64_t, kRejectCauseCount> rejected_{};
};

}  // namespace fedmesh
