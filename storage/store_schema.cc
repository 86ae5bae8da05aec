#include "storage/store_schema.h"

#include "core/check.h"
#include "storage/sqlite/migrations.h"

namespace fedmesh {
namespace {

Result<int64_t> PragmaInt(Database& db, const char* sql) {
  FM_ASSIGN_OR_RETURN(Statement stmt, db.Prepare(sql));
  FM_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Status::Internal(std::string(sql) + " returned no row on " + db.path());
  return stmt.ColumnInt64(0);
}

// Every fedmesh store stamps its kind; these are the ones this binary knows, for messages.
std::string KindOf(int64_t application_id) {
  switch (application_id) {
    case 0x464D4147:
      return "a fedmesh aggregator store";  // "FMAG"
    case 0x464D4E44:
      return "a fedmesh node store";  // "FMND"
    default:
      return "a database of some other program (application_id " + std::to_string(application_id) +
             ")";
  }
}

// `fresh_ok`: an empty file (no kind, no schema yet) is fine: it is about to be migrated.
Status CheckKind(Database& db, const StoreSchema& schema, bool fresh_ok) {
  FM_ASSIGN_OR_RETURN(int64_t app_id, PragmaInt(db, "PRAGMA application_id"));
  FM_ASSIGN_OR_RETURN(int64_t version, PragmaInt(db, "PRAGMA user_version"));
  if (app_id == schema.application_id) return Status::OK();
  if (app_id == 0 && version == 0) {
    if (fresh_ok) return Status::OK();  // new (or empty) file: migrate it
    return Status::FailedPrecondition(db.path() + " is an empty database, not a fedmesh " + schema.kind +
                                      "; check the path");
  }
  const std::string what = app_id == 0
                               ? "a SQLite database of some other program (schema version " +
                                     std::to_string(version) + ")"
                               : KindOf(app_id);
  return Status::FailedPrecondition(db.path() + " is " + what + ", not a fedmesh " + schema.kind +
                                    "; check the configured path");
}

}  // namespace

Result<std::unique_ptr<Database>> OpenStoreDatabase(const std::string& path,
                                                    const StoreSchema& schema) {
  FM_CHECK(schema.steps != nullptr && !schema.steps->empty());
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::Open(path, DatabaseOptions{}));
  FM_RETURN_IF_ERROR(CheckKind(*db, schema, /*fresh_ok=*/true));
  FM_RETURN_IF_ERROR(Migrate(*db, *schema.steps));
  FM_ASSIGN_OR_RETURN(int64_t app_id, PragmaInt(*db, "PRAGMA application_id"));
  if (app_id != schema.application_id) {
    return Status::Internal("the schema of the " + schema.kind + " at " + path +
                            " did not set application_id " + std::to_string(schema.application_id));
  }
  return db;
}

Result<std::unique_ptr<Database>> OpenStoreDatabaseReadOnly(const std::string& path,
                                                            const StoreSchema& schema) {
  FM_CHECK(schema.steps != nullptr && !schema.steps->empty());
  DatabaseOptions options;
  options.read_only = true;
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::Open(path, options));
  FM_RETURN_IF_ERROR(CheckKind(*db, schema, /*fresh_ok=*/false));
  FM_RETURN_IF_ERROR(CheckMigrated(*db, *schema.steps));
  return db;
}

}  // namespace fedmesh
