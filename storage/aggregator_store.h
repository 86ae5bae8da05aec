// AggregatorStore: the aggregator's persistent state in one SQLite file (WAL,
// synchronous=FULL): global model versions (float32 blob + SHA-256), rounds and their
// selection, the updates accepted in the open round, rejections, per-round metrics and
// the nodes seen. Every method is one transaction, so a crash (SIGKILL, power loss) leaves
// the file exactly as after the last method that returned OK: a restarted aggregator calls
// LoadOpenRound() and resumes the round with every update it had accepted. The schema is
// documented in docs/storage.md.
// Thread-safety: one thread at a time (it owns one SQLite connection). Other processes may
// read the file while the aggregator runs (WAL); two aggregators writing one file would
// interleave their rounds and must not be started.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "storage/sqlite/database.h"

namespace fedmesh {

// A global model version as stored; its params passed the SHA-256 check.
struct StoredModel {
  uint64_t version = 0;
  std::vector<float> params;
};

// One update accepted in the open round; params passed the SHA-256 check.
struct AcceptedUpdate {
  std::string node;
  uint64_t num_examples = 0;
  double train_loss = 0;  // NaN when the node did not report one
  std::vector<float> params;
};

// What a site signed for an accepted update (crypto/update_signature.h): the exact signed
// bytes and the Ed25519 signature, so anyone holding the site's enrolled key can verify
// later which site sent the update. Kept after the round closes.
struct UpdateSignatureRecord {
  uint64_t round = 0;
  std::string node;
  std::vector<uint8_t> signed_bytes;
  std::vector<uint8_t> signature;
};

// The round in progress, as a restarted aggregator needs it to carry on.
struct OpenRoundState {
  uint64_t round = 0;
  uint32_t attempt = 0;
  std::vector<std::string> selected;    // in the order given to OpenRound / RetryRound
  double deadline = 0;                  // as given (the aggregator's clock, seconds)
  std::vector<AcceptedUpdate> updates;  // in acceptance order, so a resumed sum is bit-exact
};

// What one closed round produced. On input to CloseRound only test_accuracy, test_loss,
// bytes_up, bytes_down, bytes_up_raw, bytes_down_raw, wall_s and epsilon are read: the other fields are facts the store keeps
// itself and fills in on output (see Metrics()).
struct RoundMetrics {
  uint64_t round = 0;
  uint32_t attempt = 0;        // the attempt that closed the round
  uint64_t model_version = 0;  // the model the round produced
  double test_accuracy = std::numeric_limits<double>::quiet_NaN();  // NaN: not evaluated
  double test_loss = std::numeric_limits<double>::quiet_NaN();      // NaN: not evaluated
  uint64_t selected = 0;  // nodes in the closing attempt's selection
  uint64_t received = 0;  // updates accepted in the closing attempt
  uint64_t rejected = 0;  // RecordRejection calls for the round (late ones included)
  // Tensor payload bytes as encoded by the codec chains, and their dense float32 size
  // ("raw"): up = the aggregated updates, down = the global models sent in FitTasks.
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
  uint64_t bytes_up_raw = 0;
  uint64_t bytes_down_raw = 0;
  double wall_s = 0;
  double epsilon = std::numeric_limits<double>::quiet_NaN();  // NaN: not a private round
};

struct NodeRecord {
  std::string id;
  std::string public_key_z85;  // the key it last connected with
  double first_seen = 0;
  double last_seen = 0;
};

// One admin action (aggregator/admin_server.h), as the admin_log table keeps it.
struct AdminActionRecord {
  double time = 0;        // Unix seconds
  std::string admin;      // the admin key's name
  std::string role;       // "admin" or "observer"
  std::string action;     // "pause", "kick", ...
  std::string argument;   // e.g. the kicked site; may be empty
  std::string result;     // "ok" or the refusal
};

// StoredGraph::sha256 of a built-in model, whose `onnx` holds its spec as text
// (core/builtin_graph.h SpecToText) rather than ONNX bytes.
inline constexpr char kBuiltinModelGraph[] = "builtin";

struct StoredGraph {
  std::string sha256;  // graph::CanonicalHash, hex; or kBuiltinModelGraph
  std::string onnx;    // onnx::SerializeArchitecture bytes; or the built-in's spec text
};

// One row of the site_eval table: a site's federated evaluation of a round's model, or
// (site "*") the example-weighted mean over the sites.
struct SiteEvalRow {
  uint64_t round = 0;          // filled when read (SaveSiteEval takes it as an argument)
  uint64_t model_version = 0;  // likewise
  std::string site;
  uint64_t num_examples = 0;
  double loss = 0.0;         // NaN: not known
  std::string metrics_json;  // {"accuracy": 0.91, ...}
};

class AggregatorStore {
 public:
  // Opens or creates the store at `path` and brings its schema to version 6. A file of
  // another kind (a node store, a foreign database) or written by a newer fedmesh is
  // FailedPrecondition; a damaged file is Corruption.
  static Result<std::unique_ptr<AggregatorStore>> Open(const std::string& path);
  // Opens an existing store for reading (fedmesh-model export), even while its aggregator
  // runs: nothing is created, migrated or written (OpenStoreDatabaseReadOnly); every
  // writing method then fails with PermissionDenied.
  static Result<std::unique_ptr<AggregatorStore>> OpenReadOnly(const std::string& path);

  AggregatorStore(const AggregatorStore&) = delete;
  AggregatorStore& operator=(const AggregatorStore&) = delete;

  // ---- models. Versions only increase: a version at or below the latest stored one is
  // AlreadyExists (equal) or FailedPrecondition (lower). Every version is kept until
  // PruneModels frees it.
  Status SaveModel(uint64_t version, std::span<const float> params);
  // The architecture of a graph model (its canonical hash and ONNX bytes without weights),
  // one per store, replaced by a later call.
  Status SaveModelGraph(const std::string& sha256, const std::string& onnx);
  // The stored architecture, or nullopt for a store of a built-in model.
  Result<std::optional<StoredGraph>> ModelGraph();
  // Federated evaluation of round `round` (model `model_version`): one row per site and
  // "*"; a later call for the same round and site replaces its row.
  Status SaveSiteEval(uint64_t round, uint64_t model_version, const std::vector<SiteEvalRow>& rows);
  // The rows of round `round`, ordered by site ("*" first).
  Result<std::vector<SiteEvalRow>> SiteEvals(uint64_t round);
  // Every round's row of `site` ("*": the federation's), by round.
  Result<std::vector<SiteEvalRow>> SiteEvalHistory(const std::string& site);
  // The highest version, or nullopt in a new store.
  Result<std::optional<StoredModel>> LatestModel();
  // NotFound for a version never stored, or one PruneModels freed (the message says "model
  // version N was pruned by [storage] keep_models"); Corruption when the blob fails its check.
  Result<std::vector<float>> LoadModel(uint64_t version);

  // ---- retention ([storage] keep_models).
  // The version PruneModels keeps as the best: the closed round with the highest
  // test_accuracy (the aggregator's own [eval] dataset); when no round has one, the highest
  // "accuracy" of a federated evaluation's example-weighted mean (site_eval "*"); when none
  // has that, the lowest federated loss; nullopt when nothing was evaluated. The earliest
  // round wins a tie, as with `fedmesh-model export --best`.
  Result<std::optional<uint64_t>> BestModelVersion();
  // Frees the parameters (and strategy state) of every model version older than the newest
  // `keep_last` ones, except BestModelVersion(); 0 keeps everything. The latest version is
  // always among the newest, and it is also the one an open round trains from and a restart
  // resumes from, so both keep working. Version 0 (the initial model) gets no exception: it
  // is rebuilt from [model] seed, and sites keep their own copy. A freed version keeps its
  // models row (size, hash, the rounds that refer to it); LoadModel says it was pruned.
  // Returns the versions freed by this call, oldest first: nothing when called again.
  // The pages go to SQLite's free list, reused by later models and updates; the file does
  // not shrink (no auto_vacuum, no VACUUM).
  Result<std::vector<uint64_t>> PruneModels(uint64_t keep_last);

  // ---- rounds. At most one round is open. Round numbers only increase.
  // Opens `round` with attempt `attempt`. FailedPrecondition when a round is open or a
  // round >= `round` exists; InvalidArgument for an empty selection or a node listed twice.
  Status OpenRound(uint64_t round, uint32_t attempt, std::vector<std::string> selected,
                   double deadline);
  // Records an update of the open round from a selected node. FailedPrecondition when
  // `round` is not the open round or `node` is not in its selection; AlreadyExists (and
  // nothing changes) when the node already has an accepted update in this attempt.
  // The store does not check shapes or values: the round engine validates before this.
  // `signature`, when given, is stored in the same transaction (table update_signatures).
  Status AcceptUpdate(uint64_t round, const std::string& node, uint64_t num_examples,
                      std::span<const float> params, double train_loss,
                      const UpdateSignatureRecord* signature = nullptr);
  // The signatures of the updates accepted in `round` (every attempt), by node.
  Result<std::vector<UpdateSignatureRecord>> UpdateSignatures(uint64_t round);
  // The open round with its accepted updates (params verified), or nullopt when none is open.
  Result<std::optional<OpenRoundState>> LoadOpenRound();
  // Closes the open round `round`: stores the new model as `new_model_version` (see
  // SaveModel for the version rule), the round's metrics, marks the round closed, and drops
  // the params of its accepted updates (their node, example count and loss are kept).
  // All or nothing: on error the round is still open with its updates.
  // `strategy_state` (a server optimiser's moments; empty for stateless strategies) is kept
  // with the model version, in the same transaction.
  Status CloseRound(uint64_t round, uint64_t new_model_version, std::span<const float> new_params,
                    const RoundMetrics& metrics, std::span<const float> strategy_state = {});
  // The strategy state committed with `model_version`: empty when none was (a stateless
  // strategy, or a version saved with SaveModel); Corruption when its blob fails its check.
  Result<std::vector<float>> StrategyState(uint64_t model_version);
  // Starts attempt `attempt` (> the current one) of the open round `round` with a new
  // selection and deadline, after the current attempt failed (quorum not reached by the
  // deadline). Nothing of the failed attempt is kept: its accepted updates, selection and
  // rejections are deleted, so the new attempt starts as if the round had just been
  // opened, and a node selected again sends a fresh update. The store cannot tell the
  // attempts' updates apart once the failed one is gone: the engine must refuse an
  // update made for an earlier attempt.
  // A regional aggregator gives up the open round `round` (every attempt failed): it is
  // deleted with its accepted updates, selection and rejections (update signatures stay),
  // so no round is open and the next one may open. FailedPrecondition when `round` is not
  // the open round.
  Status AbandonRound(uint64_t round);
  Status RetryRound(uint64_t round, uint32_t attempt, std::vector<std::string> selected,
                    double deadline);
  // Counts one rejected update from `node` for `round` (open or closed; counted per node
  // and reason). NotFound when the round was never opened.
  Status RecordRejection(uint64_t round, const std::string& node, const std::string& reason);

  // ---- nodes.
  // Records that `id` was seen at `now` with this key: first_seen is set once, last_seen
  // and the key are updated on every call.
  Status UpsertNode(const std::string& id, const std::string& public_key_z85, double now);
  // Every node ever seen, ordered by id.
  Result<std::vector<NodeRecord>> Nodes();

  // ---- metrics of every closed round, ordered by round.
  Result<std::vector<RoundMetrics>> Metrics();

  // ---- admin control (storage/aggregator_store_admin.cc).
  // Appends one admin action: who (the admin key's name and role), what, and its result.
  Status RecordAdminAction(const AdminActionRecord& action);
  // The latest `limit` actions, oldest first.
  Result<std::vector<AdminActionRecord>> AdminActions(size_t limit);
  // The federation's control state: `key` -> `value` ("" erases it). Keys in use:
  // "paused" and "aborted" (value: who and why), "upstream_grant" and "upstream_answer"
  // (a region's grant and last answer), "impute_values" (the federation's feature means).
  Status SetControl(const std::string& key, const std::string& value);
  Result<std::optional<std::string>> Control(const std::string& key);

  const std::string& path() const { return db_->path(); }

 private:
  explicit AggregatorStore(std::unique_ptr<Database> db) : db_(std::move(db)) {}

  // Bodies that run inside a transaction.
  Status InsertModel(uint64_t version, std::span<const float> params);
  Result<std::vector<float>> ReadModel(uint64_t version);
  Result<std::optional<uint64_t>> BestVersion();
  Result<std::optional<uint64_t>> OpenRoundNumber();
  Status RequireOpenRound(uint64_t round, std::string_view action);
  Status InsertSelection(uint64_t round, const std::vector<std::string>& selected);

  std::unique_ptr<Database> db_;
};

}  // namespace fedmesh
