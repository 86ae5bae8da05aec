#include "storage/node_store.h"

#include <utility>

#include "storage/float_blob.h"
#include "storage/store_schema.h"

namespace fedmesh {
namespace {

// Schema steps, append-only (storage/sqlite/migrations.h); see docs/storage.md.
// The model, the velocity and the named tensors are rows of one table, each its own blob:
// two large blobs in one row would make reading the second walk the first's pages.
const std::vector<std::string>& Steps() {
  static const std::vector<std::string> kSteps = {
      // v1
      R"sql(
PRAGMA application_id = 1179471428;  -- 0x464D4E44 "FMND"
CREATE TABLE checkpoint (
  id                INTEGER PRIMARY KEY CHECK (id = 1),
  model_version     INTEGER NOT NULL,
  last_round_served INTEGER
);
CREATE TABLE tensors (
  id         INTEGER PRIMARY KEY,
  kind       TEXT NOT NULL CHECK (kind IN ('model', 'velocity', 'named')),
  name       TEXT NOT NULL,
  num_values INTEGER NOT NULL CHECK (num_values >= 0),
  sha256     BLOB NOT NULL,
  data       BLOB NOT NULL,
  UNIQUE (kind, name)
);
)sql",
      // v2: named text values (gossip sequence numbers, incarnation, peers).
      R"sql(
CREATE TABLE attributes (
  name  TEXT PRIMARY KEY CHECK (length(name) > 0),
  value TEXT NOT NULL
);
)sql",
      // v3: tensors written from now on keep a tagged BLAKE3 digest (33 bytes,
      // storage/float_blob.h); the version tells older binaries the file is newer.
      R"sql(
-- digests: 32 bytes = SHA-256, 33 bytes = kind byte 2 (BLAKE3) + digest
)sql",
  };
  return kSteps;
}

StoreSchema Schema() { return StoreSchema{"node store", 0x464D4E44, &Steps()}; }

}  // namespace

Result<std::unique_ptr<NodeStore>> NodeStore::Open(const std::string& path) {
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenStoreDatabase(path, Schema()));
  return std::unique_ptr<NodeStore>(new NodeStore(std::move(db)));
}

Result<std::unique_ptr<NodeStore>> NodeStore::OpenReadOnly(const std::string& path) {
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenStoreDatabaseReadOnly(path, Schema()));
  return std::unique_ptr<NodeStore>(new NodeStore(std::move(db)));
}

Status NodeStore::SaveCheckpoint(const NodeCheckpoint& checkpoint) {
  for (const auto& [name, values] : checkpoint.tensors) {
    if (name.empty()) {
      return Status::InvalidArgument(path() + ": a checkpoint tensor needs a non-empty name");
    }
  }
  for (const auto& [name, value] : checkpoint.attributes) {
    if (name.empty()) {
      return Status::InvalidArgument(path() + ": a checkpoint attribute needs a non-empty name");
    }
  }
  return db_->WithTransaction([&]() -> Status {
    FM_RETURN_IF_ERROR(
        db_->Exec("DELETE FROM tensors; DELETE FROM checkpoint; DELETE FROM attributes"));
    {
      FM_ASSIGN_OR_RETURN(Statement cp, db_->Prepare("INSERT INTO checkpoint (id, model_version, "
                                                     "last_round_served) VALUES (1, ?, ?)"));
      FM_RETURN_IF_ERROR(cp.BindAll(checkpoint.model_version));
      if (checkpoint.last_round_served) {
        FM_RETURN_IF_ERROR(cp.Bind(2, *checkpoint.last_round_served));
      } else {
        FM_RETURN_IF_ERROR(cp.BindNull(2));
      }
      FM_RETURN_IF_ERROR(cp.Run());
    }
    FM_ASSIGN_OR_RETURN(Statement insert,
                        db_->Prepare("INSERT INTO tensors (kind, name, num_values, sha256, data) "
                                     "VALUES (?, ?, ?, ?, zeroblob(?))"));
    auto put = [&](std::string_view kind, std::string_view name,
                   const std::vector<float>& values) -> Status {
      const std::vector<uint8_t> digest = StoredDigestOf(values);
      FM_RETURN_IF_ERROR(insert.BindAll(kind, name, values.size(), digest, values.size() * 4));
      FM_RETURN_IF_ERROR(insert.Run());
      return WriteFloatBlob(*db_, "tensors", "data", db_->LastInsertRowId(), values);
    };
    FM_RETURN_IF_ERROR(put("model", "", checkpoint.model));
    FM_RETURN_IF_ERROR(put("velocity", "", checkpoint.velocity));
    for (const auto& [name, values] : checkpoint.tensors) {
      FM_RETURN_IF_ERROR(put("named", name, values));
    }
    FM_ASSIGN_OR_RETURN(Statement attr,
                        db_->Prepare("INSERT INTO attributes (name, value) VALUES (?, ?)"));
    for (const auto& [name, value] : checkpoint.attributes) {
      FM_RETURN_IF_ERROR(attr.BindAll(name, value));
      FM_RETURN_IF_ERROR(attr.Run());
    }
    return Status::OK();
  });
}

Status NodeStore::SaveAttributes(const std::map<std::string, std::string>& attributes) {
  for (const auto& [name, value] : attributes) {
    if (name.empty()) return Status::InvalidArgument(path() + ": an attribute needs a non-empty name");
  }
  return db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement attr, db_->Prepare("INSERT INTO attributes (name, value) VALUES "
                                                     "(?, ?) ON CONFLICT (name) DO UPDATE SET "
                                                     "value = excluded.value"));
    for (const auto& [name, value] : attributes) {
      FM_RETURN_IF_ERROR(attr.BindAll(name, value));
      FM_RETURN_IF_ERROR(attr.Run());
    }
    return Status::OK();
  });
}

Result<std::map<std::string, std::string>> NodeStore::LoadAttributes() {
  std::map<std::string, std::string> out;
  FM_RETURN_IF_ERROR(db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare("SELECT name, value FROM attributes"));
    for (;;) {
      FM_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return Status::OK();
      out.emplace(std::string(q.ColumnText(0)), std::string(q.ColumnText(1)));
    }
  }));
  return out;
}

Result<std::optional<NodeCheckpoint>> NodeStore::LoadCheckpoint() {
  std::optional<NodeCheckpoint> out;
  Status s = db_->WithTransaction([&]() -> Status {
    NodeCheckpoint cp;
    {
      FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare("SELECT model_version, last_round_served "
                                                    "FROM checkpoint WHERE id = 1"));
      FM_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return Status::OK();
      cp.model_version = static_cast<uint64_t>(q.ColumnInt64(0));
      if (!q.ColumnIsNull(1)) cp.last_round_served = static_cast<uint64_t>(q.ColumnInt64(1));
    }
    struct Meta {
      int64_t id;
      std::string kind, name;
      uint64_t num_values;
      std::vector<uint8_t> sha;
    };
    std::vector<Meta> metas;
    {
      FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare("SELECT id, kind, name, num_values, sha256 "
                                                    "FROM tensors ORDER BY id"));
      for (;;) {
        FM_ASSIGN_OR_RETURN(bool row, q.Step());
        if (!row) break;
        const std::span<const uint8_t> sha = q.ColumnBlob(4);
        metas.push_back({q.ColumnInt64(0), std::string(q.ColumnText(1)),
                         std::string(q.ColumnText(2)), static_cast<uint64_t>(q.ColumnInt64(3)),
                         std::vector<uint8_t>(sha.begin(), sha.end())});
      }
    }
    {
      FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare("SELECT name, value FROM attributes"));
      for (;;) {
        FM_ASSIGN_OR_RETURN(bool row, q.Step());
        if (!row) break;
        cp.attributes.emplace(std::string(q.ColumnText(0)), std::string(q.ColumnText(1)));
      }
    }
    bool have_model = false;
    for (const Meta& m : metas) {
      const std::string what =
          m.kind == "named"   ? "checkpoint tensor '" + m.name + "'"
          : m.kind == "model" ? "the checkpoint's model version " + std::to_string(cp.model_version)
                              : "the checkpoint's optimizer velocity";
      FM_ASSIGN_OR_RETURN(std::vector<float> values,
                          ReadFloatBlob(*db_, "tensors", "data", m.id, m.num_values, m.sha, what));
      if (m.kind == "model") {
        cp.model = std::move(values);
        have_model = true;
      } else if (m.kind == "velocity") {
        cp.velocity = std::move(values);
      } else {
        cp.tensors.emplace(m.name, std::move(values));
      }
    }
    if (!have_model) {
      return Status::Corruption(path() +
                                ": the checkpoint has no model row; restore the file "
                                "from a backup or move it aside to start from an empty store");
    }
    out = std::move(cp);
    return Status::OK();
  });
  FM_RETURN_IF_ERROR(s);
  return out;
}

}  // namespace fedmesh
