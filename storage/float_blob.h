// Float blobs: how fedmesh keeps a float32 vector (model parameters, an accepted update,
// optimizer state) in a SQLite BLOB column. The bytes are the values as little-endian
// IEEE-754 float32, 4 bytes each, in order; the row also holds the value count and a digest
// of exactly those bytes (the column named `sha256`: 32 bytes of SHA-256 in rows written
// before BLAKE3, 33 bytes - the kind, then the digest - since; docs/storage.md), and every
// read checks both before handing the vector out, so a damaged blob is a Corruption error,
// never a silently wrong model.
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

#include "core/status.h"
#include "core/wire/payload_digest.h"
#include "storage/sqlite/database.h"

namespace fedmesh {

// The digest new rows are written with: BLAKE3, 2-3x faster than SHA-256 on this project's
// machine (bench/RESULTS.md, "BLAKE3 payload digests"); the aggregator hashes each accepted
// 40 MB update once more when it stores it.
inline constexpr wire::DigestKind kStoredDigestKind = wire::DigestKind::kBlake3;

// The digest column's bytes for `values` in their stored form (little-endian float32): of
// `kind`, as the column holds it: a SHA-256 as its 32 bytes (the form before BLAKE3), any
// other kind as one byte (wire::DigestKind's value) followed by the 32 bytes.
std::vector<uint8_t> StoredDigestOf(std::span<const float> values,
                                    wire::DigestKind kind = kStoredDigestKind);

// Streams `values` into the BLOB in `table`.`column` of row `rowid`.
// REQUIRES: the BLOB is exactly 4 * values.size() bytes (insert it as zeroblob(4 * n)).
Status WriteFloatBlob(Database& db, std::string_view table, std::string_view column, int64_t rowid,
                      std::span<const float> values);

// Reads the BLOB in `table`.`column` of row `rowid` back into `num_values` floats and checks
// its length and its digest against `stored_digest` (the row's digest column, in either form
// above). Any mismatch (wrong length, NULL, a digest column of another size or an unknown
// kind, a digest that differs) is Corruption; the message names `what` (e.g. "model version
// 7") and the database file, and says to restore the file.
Result<std::vector<float>> ReadFloatBlob(Database& db, std::string_view table,
                                         std::string_view column, int64_t rowid,
                                         uint64_t num_values,
                                         std::span<const uint8_t> stored_digest,
                                         std::string_view what);

}  // namespace fedmesh
