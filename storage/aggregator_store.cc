#include "storage/aggregator_store.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "storage/float_blob.h"
#include "storage/store_schema.h"

namespace fedmesh {
namespace {

// Schema steps, append-only (storage/sqlite/migrations.h). docs/storage.md explains each
// table. Blob columns come last in their row: SQLite then reads the small columns without
// walking the blob's overflow pages. Tables whose rows carry a blob keep a rowid, which
// incremental blob I/O needs.
const std::vector<std::string>& Steps() {
  static const std::vector<std::string> kSteps = {
      // v1
      R"sql(
PRAGMA application_id = 1179468103;  -- 0x464D4147 "FMAG"
CREATE TABLE models (
  version    INTEGER PRIMARY KEY,
  num_params INTEGER NOT NULL CHECK (num_params >= 0),
  sha256     BLOB NOT NULL,
  params     BLOB NOT NULL
);
CREATE TABLE rounds (
  round         INTEGER PRIMARY KEY,
  attempt       INTEGER NOT NULL,
  state         TEXT NOT NULL CHECK (state IN ('open', 'closed')),
  deadline      REAL NOT NULL,
  model_version INTEGER REFERENCES models (version),
  CHECK ((state = 'open') = (model_version IS NULL))
);
CREATE UNIQUE INDEX rounds_one_open ON rounds (state) WHERE state = 'open';
CREATE TABLE round_selection (
  round    INTEGER NOT NULL REFERENCES rounds (round),
  node     TEXT NOT NULL,
  position INTEGER NOT NULL,
  PRIMARY KEY (round, node)
) WITHOUT ROWID;
CREATE TABLE updates (
  id           INTEGER PRIMARY KEY,
  round        INTEGER NOT NULL REFERENCES rounds (round),
  node         TEXT NOT NULL,
  num_examples INTEGER NOT NULL,
  train_loss   REAL,
  num_params   INTEGER NOT NULL CHECK (num_params >= 0),
  sha256       BLOB NOT NULL,
  params       BLOB,
  UNIQUE (round, node)
);
CREATE TABLE rejections (
  round  INTEGER NOT NULL REFERENCES rounds (round),
  node   TEXT NOT NULL,
  reason TEXT NOT NULL,
  count  INTEGER NOT NULL,
  PRIMARY KEY (round, node, reason)
) WITHOUT ROWID;
CREATE TABLE round_metrics (
  round         INTEGER PRIMARY KEY REFERENCES rounds (round),
  test_accuracy REAL,
  test_loss     REAL,
  bytes_up      INTEGER NOT NULL,
  bytes_down    INTEGER NOT NULL,
  wall_s        REAL NOT NULL
);
CREATE TABLE nodes (
  id             TEXT PRIMARY KEY,
  public_key_z85 TEXT NOT NULL,
  first_seen     REAL NOT NULL,
  last_seen      REAL NOT NULL
) WITHOUT ROWID;
)sql",
      // v2: codec metrics, the dense float32 sizes beside the encoded bytes_up / bytes_down.
      R"sql(
ALTER TABLE round_metrics ADD COLUMN bytes_up_raw INTEGER NOT NULL DEFAULT 0;
ALTER TABLE round_metrics ADD COLUMN bytes_down_raw INTEGER NOT NULL DEFAULT 0;
)sql",
      // v3: the strategy's state (a server optimiser's moments) committed with each model.
      R"sql(
ALTER TABLE round_metrics ADD COLUMN epsilon REAL;
CREATE TABLE strategy_state (
  model_version INTEGER PRIMARY KEY REFERENCES models (version),
  num_values    INTEGER NOT NULL CHECK (num_values >= 0),
  sha256        BLOB NOT NULL,
  state         BLOB NOT NULL
);
)sql",
      // v4: a graph model's architecture (ONNX without weights, core/onnx/onnx_writer.h),
      // so that the store alone is enough to export any round's model.
      R"sql(
CREATE TABLE model_graph (
  id     INTEGER PRIMARY KEY CHECK (id = 1),
  sha256 TEXT NOT NULL,
  onnx   BLOB NOT NULL
);
)sql",
      // v5: federated evaluation (aggregator/federated_eval.h): each site's held-out
      // figures for a round's model, and their example-weighted mean under site '*'.
      R"sql(
CREATE TABLE site_eval (
  round         INTEGER NOT NULL,
  site          TEXT NOT NULL,
  model_version INTEGER NOT NULL,
  num_examples  INTEGER NOT NULL CHECK (num_examples >= 0),
  loss          REAL,
  metrics_json  TEXT NOT NULL,
  PRIMARY KEY (round, site)
) WITHOUT ROWID;
)sql",
      // v6: retention ([storage] keep_models): the versions whose parameters PruneModels
      // freed. Their models row stays, with an empty blob: rounds refer to it, and it still
      // records the version's size and hash.
      R"sql(
CREATE TABLE pruned_models (
  version INTEGER PRIMARY KEY REFERENCES models (version)
);
)sql",
      // v7: each accepted update's signature (crypto/update_signature.h), kept for
      // attribution after the round closes and its parameters are dropped.
      R"sql(
CREATE TABLE update_signatures (
  id           INTEGER PRIMARY KEY,
  round        INTEGER NOT NULL,
  node         TEXT NOT NULL,
  signed_bytes BLOB NOT NULL,
  signature    BLOB NOT NULL
);
CREATE INDEX update_signatures_round ON update_signatures (round, node);
)sql",
      // v8: admin control (aggregator/admin_server.h): every admin action with who did it,
      // and the federation's control state (paused, aborted) that a restart must keep.
      R"sql(
CREATE TABLE admin_log (
  id       INTEGER PRIMARY KEY,
  time     REAL NOT NULL,
  admin    TEXT NOT NULL,
  role     TEXT NOT NULL,
  action   TEXT NOT NULL,
  argument TEXT NOT NULL,
  result   TEXT NOT NULL
);
CREATE TABLE control (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
)sql",
      // v9: rows written from now on keep a tagged BLAKE3 digest in their sha256 column (33
      // bytes, storage/float_blob.h); older rows keep their SHA-256 and read as before. No
      // table changes: the version only tells older binaries, which would take the tagged
      // digests for damage, that this file is newer than they are.
      R"sql(
-- digests: 32 bytes = SHA-256, 33 bytes = kind byte 2 (BLAKE3) + digest
)sql",
  };
  return kSteps;
}

// SQLite stores a NaN REAL as NULL; read NULL back as NaN ("not measured").
double NullableDouble(const Statement& stmt, int col) {
  return stmt.ColumnIsNull(col) ? std::numeric_limits<double>::quiet_NaN() : stmt.ColumnDouble(col);
}

std::string Str(uint64_t v) { return std::to_string(v); }

Status CheckSelection(const std::string& path, const std::vector<std::string>& selected,
                      uint64_t round) {
  if (selected.empty()) {
    return Status::InvalidArgument(path + ": round " + Str(round) +
                                   " needs at least one selected node");
  }
  std::set<std::string_view> seen;
  for (const std::string& node : selected) {
    if (node.empty()) {
      return Status::InvalidArgument(path + ": round " + Str(round) + " selects an empty node id");
    }
    if (!seen.insert(node).second) {
      return Status::InvalidArgument(path + ": round " + Str(round) + " selects node " + node +
                                     " twice");
    }
  }
  return Status::OK();
}

StoreSchema Schema() { return StoreSchema{"aggregator store", 0x464D4147, &Steps()}; }

}  // namespace

Result<std::unique_ptr<AggregatorStore>> AggregatorStore::Open(const std::string& path) {
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenStoreDatabase(path, Schema()));
  return std::unique_ptr<AggregatorStore>(new AggregatorStore(std::move(db)));
}

Result<std::unique_ptr<AggregatorStore>> AggregatorStore::OpenReadOnly(const std::string& path) {
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenStoreDatabaseReadOnly(path, Schema()));
  return std::unique_ptr<AggregatorStore>(new AggregatorStore(std::move(db)));
}

// ---------------------------------------------------------------------------------------
// Models

Status AggregatorStore::InsertModel(uint64_t version, std::span<const float> params) {
  {
    FM_ASSIGN_OR_RETURN(Statement latest, db_->Prepare("SELECT max(version) FROM models"));
    FM_ASSIGN_OR_RETURN(bool row, latest.Step());
    if (row && !latest.ColumnIsNull(0)) {
      const auto newest = static_cast<uint64_t>(latest.ColumnInt64(0));
      if (version == newest) {
        return Status::AlreadyExists(path() + ": model version " + Str(version) +
                                     " is already stored; versions are immutable");
      }
      if (version < newest) {
        return Status::FailedPrecondition(path() + ": model version " + Str(version) +
                                          " is older than the latest stored version " +
                                          Str(newest) + "; versions only increase");
      }
    }
  }
  const std::vector<uint8_t> digest = StoredDigestOf(params);
  FM_ASSIGN_OR_RETURN(Statement insert,
                      db_->Prepare("INSERT INTO models (version, num_params, sha256, params) "
                                   "VALUES (?, ?, ?, zeroblob(?))"));
  FM_RETURN_IF_ERROR(insert.BindAll(version, params.size(), digest, params.size_bytes()));
  FM_RETURN_IF_ERROR(insert.Run());
  // The version is the rowid (INTEGER PRIMARY KEY).
  return WriteFloatBlob(*db_, "models", "params", static_cast<int64_t>(version), params);
}

Result<std::vector<float>> AggregatorStore::ReadModel(uint64_t version) {
  FM_ASSIGN_OR_RETURN(Statement stmt,
                      db_->Prepare("SELECT m.num_params, m.sha256, p.version IS NOT NULL "
                                   "FROM models m LEFT JOIN pruned_models p USING (version) "
                                   "WHERE m.version = ?"));
  FM_RETURN_IF_ERROR(stmt.BindAll(version));
  FM_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Status::NotFound(path() + ": model version " + Str(version) + " is not stored");
  if (stmt.ColumnInt64(2) != 0) {
    return Status::NotFound(path() + ": model version " + Str(version) +
                            " was pruned by [storage] keep_models (only the newest versions, the "
                            "best and the latest are kept); raise keep_models, or 0 to keep all, "
                            "before a run whose models you will need");
  }
  const auto num_params = static_cast<uint64_t>(stmt.ColumnInt64(0));
  const std::span<const uint8_t> stored_sha = stmt.ColumnBlob(1);
  const std::vector<uint8_t> sha(stored_sha.begin(), stored_sha.end());
  return ReadFloatBlob(*db_, "models", "params", static_cast<int64_t>(version), num_params, sha,
                       "model version " + Str(version));
}

Status AggregatorStore::SaveModel(uint64_t version, std::span<const float> params) {
  return db_->WithTransaction([&] { return InsertModel(version, params); });
}

Status AggregatorStore::SaveModelGraph(const std::string& sha256, const std::string& onnx) {
  return db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare(
                                         "INSERT OR REPLACE INTO model_graph (id, sha256, onnx) "
                                         "VALUES (1, ?, ?)"));
    FM_RETURN_IF_ERROR(q.Bind(1, std::string_view(sha256)));
    FM_RETURN_IF_ERROR(q.Bind(2, std::span<const uint8_t>(
                                     reinterpret_cast<const uint8_t*>(onnx.data()), onnx.size())));
    return q.Step().status();
  });
}

Result<std::optional<StoredGraph>> AggregatorStore::ModelGraph() {
  std::optional<StoredGraph> out;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare("SELECT sha256, onnx FROM model_graph"));
    FM_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return Status::OK();
    const auto blob = q.ColumnBlob(1);
    out = StoredGraph{std::string(q.ColumnText(0)),
                      std::string(reinterpret_cast<const char*>(blob.data()), blob.size())};
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return out;
}

Status AggregatorStore::SaveSiteEval(uint64_t round, uint64_t model_version,
                                     const std::vector<SiteEvalRow>& rows) {
  return db_->WithTransaction([&]() -> Status {
    for (const SiteEvalRow& r : rows) {
      FM_ASSIGN_OR_RETURN(Statement q,
                          db_->Prepare("INSERT OR REPLACE INTO site_eval (round, site, "
                                       "model_version, num_examples, loss, metrics_json) "
                                       "VALUES (?, ?, ?, ?, ?, ?)"));
      FM_RETURN_IF_ERROR(q.Bind(1, static_cast<int64_t>(round)));
      FM_RETURN_IF_ERROR(q.Bind(2, std::string_view(r.site)));
      FM_RETURN_IF_ERROR(q.Bind(3, static_cast<int64_t>(model_version)));
      FM_RETURN_IF_ERROR(q.Bind(4, static_cast<int64_t>(r.num_examples)));
      FM_RETURN_IF_ERROR(q.Bind(5, r.loss));
      FM_RETURN_IF_ERROR(q.Bind(6, std::string_view(r.metrics_json)));
      FM_RETURN_IF_ERROR(q.Step().status());
    }
    return Status::OK();
  });
}

namespace {

// Rows of `site_eval` matching `where` (one placeholder, bound to `key`).
template <typename Key>
Result<std::vector<SiteEvalRow>> QuerySiteEval(Database& db, const std::string& where, Key key) {
  std::vector<SiteEvalRow> out;
  Status s = db.WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement q,
                        db.Prepare("SELECT round, model_version, site, num_examples, loss, "
                                   "metrics_json FROM site_eval WHERE " + where));
    FM_RETURN_IF_ERROR(q.Bind(1, key));
    for (;;) {
      FM_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      out.push_back(SiteEvalRow{static_cast<uint64_t>(q.ColumnInt64(0)),
                                static_cast<uint64_t>(q.ColumnInt64(1)), std::string(q.ColumnText(2)),
                                static_cast<uint64_t>(q.ColumnInt64(3)), NullableDouble(q, 4),
                                std::string(q.ColumnText(5))});
    }
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return out;
}

}  // namespace

Result<std::vector<SiteEvalRow>> AggregatorStore::SiteEvals(uint64_t round) {
  return QuerySiteEval(*db_, "round = ? ORDER BY site", static_cast<int64_t>(round));
}

Result<std::vector<SiteEvalRow>> AggregatorStore::SiteEvalHistory(const std::string& site) {
  return QuerySiteEval(*db_, "site = ? ORDER BY round", std::string_view(site));
}

Result<std::optional<StoredModel>> AggregatorStore::LatestModel() {
  std::optional<StoredModel> out;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement latest, db_->Prepare("SELECT max(version) FROM models"));
    FM_ASSIGN_OR_RETURN(bool row, latest.Step());
    if (!row || latest.ColumnIsNull(0)) return Status::OK();
    StoredModel model;
    model.version = static_cast<uint64_t>(latest.ColumnInt64(0));
    FM_ASSIGN_OR_RETURN(model.params, ReadModel(model.version));
    out = std::move(model);
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return out;
}

Result<std::vector<float>> AggregatorStore::LoadModel(uint64_t version) {
  std::vector<float> params;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(params, ReadModel(version));
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return params;
}

Result<std::optional<uint64_t>> AggregatorStore::BestVersion() {
  // Each query: the best row's version, the earliest round among equals. NaN figures are
  // stored as NULL and never win. The JSON is checked before it is read, so a hand-edited
  // row cannot make pruning fail.
  static constexpr const char* kQueries[] = {
      "SELECT r.model_version FROM round_metrics m JOIN rounds r ON r.round = m.round "
      "WHERE m.test_accuracy IS NOT NULL AND r.model_version IS NOT NULL "
      "ORDER BY m.test_accuracy DESC, m.round LIMIT 1",
      "SELECT model_version FROM (SELECT model_version, round, CASE WHEN json_valid(metrics_json) "
      "THEN CASE WHEN json_type(metrics_json, '$.accuracy') IN ('integer', 'real') "
      "THEN json_extract(metrics_json, '$.accuracy') END END AS accuracy "
      "FROM site_eval WHERE site = '*') WHERE accuracy IS NOT NULL "
      "ORDER BY accuracy DESC, round LIMIT 1",
      "SELECT model_version FROM site_eval WHERE site = '*' AND loss IS NOT NULL "
      "ORDER BY loss, round LIMIT 1",
  };
  for (const char* sql : kQueries) {
    FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare(sql));
    FM_ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) return std::optional<uint64_t>(static_cast<uint64_t>(q.ColumnInt64(0)));
  }
  return std::optional<uint64_t>();
}

Result<std::optional<uint64_t>> AggregatorStore::BestModelVersion() {
  std::optional<uint64_t> best;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(best, BestVersion());
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return best;
}

Result<std::vector<uint64_t>> AggregatorStore::PruneModels(uint64_t keep_last) {
  std::vector<uint64_t> pruned;
  if (keep_last == 0) return pruned;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(std::optional<uint64_t> best, BestVersion());
    {
      // Everything but the newest keep_last versions (the latest among them), not yet pruned.
      FM_ASSIGN_OR_RETURN(Statement old,
                          db_->Prepare("SELECT version FROM models WHERE version NOT IN "
                                       "(SELECT version FROM models ORDER BY version DESC LIMIT ?) "
                                       "AND version NOT IN (SELECT version FROM pruned_models) "
                                       "ORDER BY version"));
      const auto limit =
          static_cast<int64_t>(std::min<uint64_t>(keep_last, std::numeric_limits<int64_t>::max()));
      FM_RETURN_IF_ERROR(old.Bind(1, limit));
      for (;;) {
        FM_ASSIGN_OR_RETURN(bool row, old.Step());
        if (!row) break;
        const auto version = static_cast<uint64_t>(old.ColumnInt64(0));
        if (version != best) pruned.push_back(version);
      }
    }
    for (uint64_t version : pruned) {
      // An empty blob, not NULL (the column is NOT NULL): its pages go to SQLite's free list.
      // The strategy state only matters for resuming from the latest version.
      for (const char* sql : {"UPDATE models SET params = zeroblob(0) WHERE version = ?",
                              "DELETE FROM strategy_state WHERE model_version = ?",
                              "INSERT INTO pruned_models (version) VALUES (?)"}) {
        FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare(sql));
        FM_RETURN_IF_ERROR(q.BindAll(version));
        FM_RETURN_IF_ERROR(q.Run());
      }
    }
    return Status::OK();
  });
  if (!s.ok()) return s;
  return pruned;
}

// ---------------------------------------------------------------------------------------
// Rounds

Result<std::optional<uint64_t>> AggregatorStore::OpenRoundNumber() {
  FM_ASSIGN_OR_RETURN(Statement stmt,
                      db_->Prepare("SELECT round FROM rounds WHERE state = 'open'"));
  FM_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<uint64_t>();
  return std::optional<uint64_t>(static_cast<uint64_t>(stmt.ColumnInt64(0)));
}

Status AggregatorStore::RequireOpenRound(uint64_t round, std::string_view action) {
  FM_ASSIGN_OR_RETURN(std::optional<uint64_t> open, OpenRoundNumber());
  if (open == round) return Status::OK();
  return Status::FailedPrecondition(
      path() + ": cannot " + std::string(action) + " round " + Str(round) +
      ": it is not the open round (" +
      (open ? "round " + Str(*open) + " is open" : "no round is open") + ")");
}

Status AggregatorStore::InsertSelection(uint64_t round, const std::vector<std::string>& selected) {
  FM_ASSIGN_OR_RETURN(Statement insert,
                      db_->Prepare("INSERT INTO round_selection (round, node, position) "
                                   "VALUES (?, ?, ?)"));
  for (size_t i = 0; i < selected.size(); ++i) {
    FM_RETURN_IF_ERROR(insert.BindAll(round, selected[i], i));
    FM_RETURN_IF_ERROR(insert.Run());
  }
  return Status::OK();
}

Status AggregatorStore::OpenRound(uint64_t round, uint32_t attempt,
                                  std::vector<std::string> selected, double deadline) {
  FM_RETURN_IF_ERROR(CheckSelection(path(), selected, round));
  return db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(std::optional<uint64_t> open, OpenRoundNumber());
    if (open) {
      return Status::FailedPrecondition(path() + ": cannot open round " + Str(round) + ": round " +
                                        Str(*open) + " is still open; close or retry it first");
    }
    {
      FM_ASSIGN_OR_RETURN(Statement last, db_->Prepare("SELECT max(round) FROM rounds"));
      FM_ASSIGN_OR_RETURN(bool row, last.Step());
      if (row && !last.ColumnIsNull(0) && static_cast<uint64_t>(last.ColumnInt64(0)) >= round) {
        return Status::FailedPrecondition(path() + ": cannot open round " + Str(round) +
                                          ": round " + Str(last.ColumnInt64(0)) +
                                          " already exists; round numbers only increase");
      }
    }
    FM_ASSIGN_OR_RETURN(Statement insert,
                        db_->Prepare("INSERT INTO rounds (round, attempt, state, deadline) "
                                     "VALUES (?, ?, 'open', ?)"));
    FM_RETURN_IF_ERROR(insert.BindAll(round, attempt, deadline));
    FM_RETURN_IF_ERROR(insert.Run());
    return InsertSelection(round, selected);
  });
}

Result<std::vector<UpdateSignatureRecord>> AggregatorStore::UpdateSignatures(uint64_t round) {
  FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare("SELECT node, signed_bytes, signature FROM "
                                                "update_signatures WHERE round = ? ORDER BY id"));
  FM_RETURN_IF_ERROR(q.BindAll(round));
  std::vector<UpdateSignatureRecord> out;
  for (;;) {
    FM_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    UpdateSignatureRecord r;
    r.round = round;
    r.node = std::string(q.ColumnText(0));
    const auto bytes = q.ColumnBlob(1), sig = q.ColumnBlob(2);
    r.signed_bytes.assign(bytes.begin(), bytes.end());
    r.signature.assign(sig.begin(), sig.end());
    out.push_back(std::move(r));
  }
  return out;
}

Status AggregatorStore::AcceptUpdate(uint64_t round, const std::string& node, uint64_t num_examples,
                                     std::span<const float> params, double train_loss,
                                     const UpdateSignatureRecord* signature) {
  return db_->WithTransaction([&]() -> Status {
    FM_RETURN_IF_ERROR(RequireOpenRound(round, "accept an update from " + node + " for"));
    {
      FM_ASSIGN_OR_RETURN(
          Statement selected,
          db_->Prepare("SELECT 1 FROM round_selection WHERE round = ? AND node = ?"));
      FM_RETURN_IF_ERROR(selected.BindAll(round, node));
      FM_ASSIGN_OR_RETURN(bool is_selected, selected.Step());
      if (!is_selected) {
        return Status::FailedPrecondition(path() + ": node " + node + " is not selected in round " +
                                          Str(round) + "; its update cannot be accepted");
      }
    }
    {
      FM_ASSIGN_OR_RETURN(Statement dup,
                          db_->Prepare("SELECT 1 FROM updates WHERE round = ? AND node = ?"));
      FM_RETURN_IF_ERROR(dup.BindAll(round, node));
      FM_ASSIGN_OR_RETURN(bool exists, dup.Step());
      if (exists) {
        return Status::AlreadyExists(path() + ": round " + Str(round) +
                                     " already has an accepted update from node " + node +
                                     "; the duplicate was not stored");
      }
    }
    const std::vector<uint8_t> digest = StoredDigestOf(params);
    FM_ASSIGN_OR_RETURN(Statement insert,
                        db_->Prepare("INSERT INTO updates (round, node, num_examples, train_loss, "
                                     "num_params, sha256, params) "
                                     "VALUES (?, ?, ?, ?, ?, ?, zeroblob(?))"));
    // A NaN train_loss (not reported) is stored as NULL: SQLite binds NaN as NULL.
    FM_RETURN_IF_ERROR(insert.BindAll(round, node, num_examples, train_loss, params.size(), digest,
                                      params.size_bytes()));
    FM_RETURN_IF_ERROR(insert.Run());
    FM_RETURN_IF_ERROR(WriteFloatBlob(*db_, "updates", "params", db_->LastInsertRowId(), params));
    if (signature == nullptr) return Status::OK();
    FM_ASSIGN_OR_RETURN(Statement sig,
                        db_->Prepare("INSERT INTO update_signatures (round, node, signed_bytes, "
                                     "signature) VALUES (?, ?, ?, ?)"));
    FM_RETURN_IF_ERROR(sig.BindAll(round, node, std::span<const uint8_t>(signature->signed_bytes),
                                   std::span<const uint8_t>(signature->signature)));
    return sig.Run();
  });
}

Result<std::optional<OpenRoundState>> AggregatorStore::LoadOpenRound() {
  std::optional<OpenRoundState> out;
  Status s = db_->WithTransaction([&]() -> Status {
    OpenRoundState state;
    {
      FM_ASSIGN_OR_RETURN(Statement round,
                          db_->Prepare("SELECT round, attempt, deadline FROM rounds "
                                       "WHERE state = 'open'"));
      FM_ASSIGN_OR_RETURN(bool row, round.Step());
      if (!row) return Status::OK();
      state.round = static_cast<uint64_t>(round.ColumnInt64(0));
      state.attempt = static_cast<uint32_t>(round.ColumnInt64(1));
      state.deadline = round.ColumnDouble(2);
    }
    {
      FM_ASSIGN_OR_RETURN(Statement sel, db_->Prepare("SELECT node FROM round_selection "
                                                      "WHERE round = ? ORDER BY position"));
      FM_RETURN_IF_ERROR(sel.BindAll(state.round));
      for (;;) {
        FM_ASSIGN_OR_RETURN(bool row, sel.Step());
        if (!row) break;
        state.selected.emplace_back(sel.ColumnText(0));
      }
    }
    struct Meta {
      int64_t id;
      uint64_t num_params;
      std::vector<uint8_t> sha;
    };
    std::vector<Meta> metas;
    {
      FM_ASSIGN_OR_RETURN(Statement upd,
                          db_->Prepare("SELECT id, node, num_examples, train_loss, num_params, "
                                       "sha256 FROM updates WHERE round = ? ORDER BY id"));
      FM_RETURN_IF_ERROR(upd.BindAll(state.round));
      for (;;) {
        FM_ASSIGN_OR_RETURN(bool row, upd.Step());
        if (!row) break;
        AcceptedUpdate u;
        u.node = std::string(upd.ColumnText(1));
        u.num_examples = static_cast<uint64_t>(upd.ColumnInt64(2));
        u.train_loss = NullableDouble(upd, 3);
        const std::span<const uint8_t> sha = upd.ColumnBlob(5);
        metas.push_back({upd.ColumnInt64(0), static_cast<uint64_t>(upd.ColumnInt64(4)),
                         std::vector<uint8_t>(sha.begin(), sha.end())});
        state.updates.push_back(std::move(u));
      }
    }
    for (size_t i = 0; i < metas.size(); ++i) {
      FM_ASSIGN_OR_RETURN(
          state.updates[i].params,
          ReadFloatBlob(
              *db_, "updates", "params", metas[i].id, metas[i].num_params, metas[i].sha,
              "the update of node " + state.updates[i].node + " in round " + Str(state.round)));
    }
    out = std::move(state);
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return out;
}

Status AggregatorStore::CloseRound(uint64_t round, uint64_t new_model_version,
                                   std::span<const float> new_params, const RoundMetrics& metrics,
                                   std::span<const float> strategy_state) {
  return db_->WithTransaction([&]() -> Status {
    FM_RETURN_IF_ERROR(RequireOpenRound(round, "close"));
    FM_RETURN_IF_ERROR(InsertModel(new_model_version, new_params));
    if (!strategy_state.empty()) {
      const std::vector<uint8_t> digest = StoredDigestOf(strategy_state);
      FM_ASSIGN_OR_RETURN(Statement insert,
                          db_->Prepare("INSERT INTO strategy_state (model_version, num_values, "
                                       "sha256, state) VALUES (?, ?, ?, zeroblob(?))"));
      FM_RETURN_IF_ERROR(insert.BindAll(new_model_version, strategy_state.size(), digest,
                                        strategy_state.size_bytes()));
      FM_RETURN_IF_ERROR(insert.Run());
      FM_RETURN_IF_ERROR(WriteFloatBlob(*db_, "strategy_state", "state",
                                        static_cast<int64_t>(new_model_version), strategy_state));
    }
    {
      FM_ASSIGN_OR_RETURN(Statement close,
                          db_->Prepare("UPDATE rounds SET state = 'closed', model_version = ? "
                                       "WHERE round = ?"));
      FM_RETURN_IF_ERROR(close.BindAll(new_model_version, round));
      FM_RETURN_IF_ERROR(close.Run());
    }
    {
      FM_ASSIGN_OR_RETURN(
          Statement m, db_->Prepare("INSERT INTO round_metrics (round, test_accuracy, test_loss, "
                                    "bytes_up, bytes_down, wall_s, bytes_up_raw, bytes_down_raw, "
                                    "epsilon) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"));
      FM_RETURN_IF_ERROR(m.BindAll(round, metrics.test_accuracy, metrics.test_loss,
                                   metrics.bytes_up, metrics.bytes_down, metrics.wall_s,
                                   metrics.bytes_up_raw, metrics.bytes_down_raw, metrics.epsilon));
      FM_RETURN_IF_ERROR(m.Run());
    }
    // The blobs are freed (their pages go to SQLite's free list and hold the next round's
    // updates); the rows stay as the record of who contributed.
    FM_ASSIGN_OR_RETURN(Statement drop,
                        db_->Prepare("UPDATE updates SET params = NULL WHERE round = ?"));
    FM_RETURN_IF_ERROR(drop.BindAll(round));
    return drop.Run();
  });
}

Result<std::vector<float>> AggregatorStore::StrategyState(uint64_t model_version) {
  std::vector<float> out;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement stmt, db_->Prepare("SELECT num_values, sha256 FROM "
                                                     "strategy_state WHERE model_version = ?"));
    FM_RETURN_IF_ERROR(stmt.BindAll(model_version));
    FM_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return Status::OK();
    const auto n = static_cast<uint64_t>(stmt.ColumnInt64(0));
    const std::span<const uint8_t> sha = stmt.ColumnBlob(1);
    FM_ASSIGN_OR_RETURN(out, ReadFloatBlob(*db_, "strategy_state", "state",
                                           static_cast<int64_t>(model_version), n, sha,
                                           "the strategy state of model version " +
                                               Str(model_version)));
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return out;
}

Status AggregatorStore::AbandonRound(uint64_t round) {
  return db_->WithTransaction([&]() -> Status {
    FM_RETURN_IF_ERROR(RequireOpenRound(round, "abandon"));
    for (const char* sql :
         {"DELETE FROM updates WHERE round = ?", "DELETE FROM rejections WHERE round = ?",
          "DELETE FROM round_selection WHERE round = ?", "DELETE FROM rounds WHERE round = ?"}) {
      FM_ASSIGN_OR_RETURN(Statement del, db_->Prepare(sql));
      FM_RETURN_IF_ERROR(del.BindAll(round));
      FM_RETURN_IF_ERROR(del.Run());
    }
    return Status::OK();
  });
}

Status AggregatorStore::RetryRound(uint64_t round, uint32_t attempt,
                                   std::vector<std::string> selected, double deadline) {
  FM_RETURN_IF_ERROR(CheckSelection(path(), selected, round));
  return db_->WithTransaction([&]() -> Status {
    FM_RETURN_IF_ERROR(RequireOpenRound(round, "retry"));
    {
      FM_ASSIGN_OR_RETURN(Statement cur,
                          db_->Prepare("SELECT attempt FROM rounds WHERE round = ?"));
      FM_RETURN_IF_ERROR(cur.BindAll(round));
      FM_ASSIGN_OR_RETURN(bool row, cur.Step());
      if (!row) return Status::Internal(path() + ": open round " + Str(round) + " vanished");
      const int64_t current = cur.ColumnInt64(0);
      if (static_cast<int64_t>(attempt) <= current) {
        return Status::FailedPrecondition(path() + ": cannot retry round " + Str(round) +
                                          " as attempt " + std::to_string(attempt) + ": attempt " +
                                          std::to_string(current) +
                                          " is already under way; attempts only increase");
      }
    }
    for (const char* sql :
         {"DELETE FROM updates WHERE round = ?", "DELETE FROM rejections WHERE round = ?",
          "DELETE FROM round_selection WHERE round = ?"}) {
      FM_ASSIGN_OR_RETURN(Statement del, db_->Prepare(sql));
      FM_RETURN_IF_ERROR(del.BindAll(round));
      FM_RETURN_IF_ERROR(del.Run());
    }
    {
      FM_ASSIGN_OR_RETURN(
          Statement upd,
          db_->Prepare("UPDATE rounds SET attempt = ?, deadline = ? WHERE round = ?"));
      FM_RETURN_IF_ERROR(upd.BindAll(attempt, deadline, round));
      FM_RETURN_IF_ERROR(upd.Run());
    }
    return InsertSelection(round, selected);
  });
}

Status AggregatorStore::RecordRejection(uint64_t round, const std::string& node,
                                        const std::string& reason) {
  return db_->WithTransaction([&]() -> Status {
    {
      FM_ASSIGN_OR_RETURN(Statement exists, db_->Prepare("SELECT 1 FROM rounds WHERE round = ?"));
      FM_RETURN_IF_ERROR(exists.BindAll(round));
      FM_ASSIGN_OR_RETURN(bool row, exists.Step());
      if (!row) {
        return Status::NotFound(path() + ": cannot record a rejection for round " + Str(round) +
                                ": the round was never opened");
      }
    }
    FM_ASSIGN_OR_RETURN(Statement up,
                        db_->Prepare("INSERT INTO rejections (round, node, reason, count) "
                                     "VALUES (?, ?, ?, 1) ON CONFLICT (round, node, reason) "
                                     "DO UPDATE SET count = count + 1"));
    FM_RETURN_IF_ERROR(up.BindAll(round, node, reason));
    return up.Run();
  });
}

// ---------------------------------------------------------------------------------------
// Nodes and metrics

Status AggregatorStore::UpsertNode(const std::string& id, const std::string& public_key_z85,
                                   double now) {
  if (id.empty() || public_key_z85.empty()) {
    return Status::InvalidArgument(path() + ": a node record needs a non-empty id and public key");
  }
  return db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(
        Statement up, db_->Prepare("INSERT INTO nodes (id, public_key_z85, first_seen, last_seen) "
                                   "VALUES (?1, ?2, ?3, ?3) ON CONFLICT (id) DO UPDATE SET "
                                   "public_key_z85 = excluded.public_key_z85, "
                                   "last_seen = excluded.last_seen"));
    FM_RETURN_IF_ERROR(up.BindAll(id, public_key_z85, now));
    return up.Run();
  });
}

Result<std::vector<NodeRecord>> AggregatorStore::Nodes() {
  std::vector<NodeRecord> out;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement q,
                        db_->Prepare("SELECT id, public_key_z85, first_seen, last_seen "
                                     "FROM nodes ORDER BY id"));
    for (;;) {
      FM_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      out.push_back({std::string(q.ColumnText(0)), std::string(q.ColumnText(1)), q.ColumnDouble(2),
                     q.ColumnDouble(3)});
    }
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return out;
}

Result<std::vector<RoundMetrics>> AggregatorStore::Metrics() {
  std::vector<RoundMetrics> out;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(
        Statement q,
        db_->Prepare(
            "SELECT r.round, r.attempt, r.model_version, m.test_accuracy, m.test_loss, "
            "(SELECT count(*) FROM round_selection s WHERE s.round = r.round), "
            "(SELECT count(*) FROM updates u WHERE u.round = r.round), "
            "(SELECT coalesce(sum(j.count), 0) FROM rejections j WHERE j.round = r.round), "
            "m.bytes_up, m.bytes_down, m.wall_s, m.bytes_up_raw, m.bytes_down_raw, m.epsilon "
            "FROM rounds r JOIN round_metrics m ON m.round = r.round "
            "WHERE r.state = 'closed' ORDER BY r.round"));
    for (;;) {
      FM_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      RoundMetrics m;
      m.round = static_cast<uint64_t>(q.ColumnInt64(0));
      m.attempt = static_cast<uint32_t>(q.ColumnInt64(1));
      m.model_version = static_cast<uint64_t>(q.ColumnInt64(2));
      m.test_accuracy = NullableDouble(q, 3);
      m.test_loss = NullableDouble(q, 4);
      m.selected = static_cast<uint64_t>(q.ColumnInt64(5));
      m.received = static_cast<uint64_t>(q.ColumnInt64(6));
      m.rejected = static_cast<uint64_t>(q.ColumnInt64(7));
      m.bytes_up = static_cast<uint64_t>(q.ColumnInt64(8));
      m.bytes_down = static_cast<uint64_t>(q.ColumnInt64(9));
      m.wall_s = q.ColumnDouble(10);
      m.bytes_up_raw = static_cast<uint64_t>(q.ColumnInt64(11));
      m.bytes_down_raw = static_cast<uint64_t>(q.ColumnInt64(12));
      m.epsilon = NullableDouble(q, 13);
      out.push_back(m);
    }
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return out;
}

}  // namespace fedmesh
