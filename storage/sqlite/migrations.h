// Schema migrations: a database's schema version is the number of migration steps applied
// to it, kept in SQLite's header (PRAGMA user_version). The code lists every step it knows
// in order; Migrate applies the ones the file lacks, each in its own transaction together
// with the version bump, so a crash mid-upgrade leaves the file at a whole step and the next
// start resumes from there. Steps are append-only: once released, a step is never edited
// (files in the field already ran it); a change is a new step.
// Thread-safety: safe to run from several processes or connections on the same file at
// once; each step runs exactly once (the version is re-read under the write lock).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "storage/sqlite/database.h"

namespace fedmesh {

// Applies steps[user_version], steps[user_version + 1], ... and sets user_version to
// steps.size(). Idempotent: a database already at steps.size() is left untouched (no write).
// A database whose version is higher than steps.size() was written by a newer fedmesh and
// is refused with FailedPrecondition, before anything is changed. A failing step is
// rolled back and its error returned, naming the step; earlier steps stay applied.
// REQUIRES: no step contains BEGIN, COMMIT or ROLLBACK (each already runs in a transaction).
Status Migrate(Database& db, const std::vector<std::string>& steps);

// For a read-only connection, which cannot migrate: OK when the file is at the latest of
// `steps`; FailedPrecondition when it is older (start the binary that owns the store once
// to migrate it) or newer (upgrade fedmesh).
Status CheckMigrated(Database& db, const std::vector<std::string>& steps);

}  // namespace fedmesh
