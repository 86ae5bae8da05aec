// Store schema: opens the SQLite file behind one kind of fedmesh store (the aggregator's,
// a node's) and brings its schema to the version this binary knows. The kind is stamped
// in SQLite's header (PRAGMA application_id) by the store's first migration step, so a
// node's file handed to the aggregator, or any other SQLite file, is refused with a clear
// message instead of failing later at some query with "no such table".
// Thread-safety: as Database (one thread at a time); several processes may open the same
// file at once, Migrate runs each step exactly once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "storage/sqlite/database.h"

namespace fedmesh {

struct StoreSchema {
  // Names the store in messages: "aggregator store", "node store".
  std::string kind;
  // The value the first step writes to PRAGMA application_id.
  int32_t application_id = 0;
  // Migration steps (see storage/sqlite/migrations.h); steps[0] must set application_id.
  const std::vector<std::string>* steps = nullptr;
};

// Opens `path` (created when missing, WAL, synchronous=FULL), refuses a file that belongs
// to another kind of store or to something else (FailedPrecondition), and applies the
// missing migration steps; a file written by a newer schema is refused by Migrate with
// the "upgrade fedmesh" message.
Result<std::unique_ptr<Database>> OpenStoreDatabase(const std::string& path,
                                                    const StoreSchema& schema);
// The same for reading only: nothing is created or migrated (DatabaseOptions::read_only). A
// missing file is NotFound; a file of another kind, an empty or non-SQLite file, or one at
// an older or newer schema is refused with a message that says which.
Result<std::unique_ptr<Database>> OpenStoreDatabaseReadOnly(const std::string& path,
                                                            const StoreSchema& schema);

}  // namespace fedmesh
