// Float blobs: how fedmesh keeps a float32 vector (model parameters, an accepted update,
// optimizer state) in a SQLite BLOB column. The bytes are the values as little-endian
// IEEE-754 float32, 4 bytes each, in order; the row also holds the value count and the
// SHA-256 of exactly those bytes, and every read checks both before handing the vector
// out, so a damaged blob is a Corruption error, never a silently wrong model.
// Writes and reads use incremental blob I/O: a row is inserted with zeroblob(4 * n) and
// the values are streamed in place, so a 10M-parameter vector is never copied whole into
// a bound parameter, nor out of SQLite into a temporary on the way back.
// Thread-safety: stateless functions; the Database they are given is used by one thread
// at a time (see storage/sqlite/database.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/sha256.h"
#include "core/status.h"
#include "storage/sqlite/database.h"

namespace fedmesh {

// The SHA-256 of `values` in their stored form (little-endian float32 bytes).
Sha256Digest HashFloats(std::span<const float> values);

// Streams `values` into the BLOB in `table`.`column` of row `rowid`.
// REQUIRES: the BLOB is exactly 4 * values.size() bytes (insert it as zeroblob(4 * n)).
Status WriteFloatBlob(Database& db, std::string_view table, std::string_view column, int64_t rowid,
                      std::span<const float> values);

// Reads the BLOB in `table`.`column` of row `rowid` back into `num_values` floats and checks
// its length and its SHA-256 against `expected_sha256`. Any mismatch (wrong length, NULL,
// digest not 32 bytes, digest differs) is Corruption; the message names `what` (e.g.
// "model version 7") and the database file, and says to restore the file.
Result<std::vector<float>> ReadFloatBlob(Database& db, std::string_view table,
                                         std::string_view column, int64_t rowid,
                                         uint64_t num_values,
                                         std::span<const uint8_t> expected_sha256,
                                         std::string_view what);

}  // namespace fedmesh
