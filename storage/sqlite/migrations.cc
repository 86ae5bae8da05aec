#include "storage/sqlite/migrations.h"

#include <string>

namespace fedmesh {
namespace {

Status NewerThanBinary(const Database& db, int version, int latest) {
  return Status::FailedPrecondition(
      db.path() + ": database schema version " + std::to_string(version) +
      " is newer than this binary supports (" + std::to_string(latest) + "); upgrade fedmesh");
}

}  // namespace

Status CheckMigrated(Database& db, const std::vector<std::string>& steps) {
  const int latest = static_cast<int>(steps.size());
  FM_ASSIGN_OR_RETURN(int version, db.UserVersion());
  if (version > latest) return NewerThanBinary(db, version, latest);
  if (version < latest) {
    return Status::FailedPrecondition(db.path() + ": database schema version " + std::to_string(version) +
                                      " is older than this binary's (" + std::to_string(latest) +
                                      ") and a read-only open cannot migrate it; start the binary that "
                                      "owns the store once (it migrates it), then read it again");
  }
  return Status::OK();
}

Status Migrate(Database& db, const std::vector<std::string>& steps) {
  const int latest = static_cast<int>(steps.size());
  // Read-only fast path: an up-to-date file (every start after the first) takes no lock.
  FM_ASSIGN_OR_RETURN(int version, db.UserVersion());
  if (version > latest) return NewerThanBinary(db, version, latest);
  if (version < 0) {
    return Status::Corruption(db.path() + " has a negative schema version (" +
                              std::to_string(version) + "); it was not written by fedmesh");
  }

  bool done = version == latest;
  while (!done) {
    Status s = db.WithTransaction([&]() -> Status {
      // Re-read under the write lock: another process may have migrated meanwhile, and
      // running a step twice ("table already exists") must not be possible.
      FM_ASSIGN_OR_RETURN(int v, db.UserVersion());
      if (v > latest) return NewerThanBinary(db, v, latest);
      if (v == latest) {
        done = true;
        return Status::OK();
      }
      Status step = db.Exec(steps[v]);
      if (!step.ok()) {
        return step.WithContext("migration step " + std::to_string(v + 1) + " of " +
                                std::to_string(latest) + " failed");
      }
      return db.SetUserVersion(v + 1);
    });
    FM_RETURN_IF_ERROR(s);
  }
  return Status::OK();
}

}  // namespace fedmesh
