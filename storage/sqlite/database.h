// Database: the RAII owner of one SQLite connection, plus Statement, the RAII owner of one
// prepared statement. Every SQLite failure comes back as a Status carrying SQLite's own
// message and the database path, with a code that says what kind of failure it is
// (Corruption for a damaged file, Unavailable for a lock held too long, ...).
// Thread-safety: a Database and its Statements are used by one thread at a time (external
// synchronisation otherwise). Separate Database objects on the same file may be used from
// different threads or processes: with WAL, readers run alongside one writer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/status.h"

struct sqlite3;
struct sqlite3_blob;
struct sqlite3_stmt;

namespace fedmesh {

struct DatabaseOptions {
  // Create the file when it does not exist. Default: true. With false, a missing file is
  // NotFound (a node that expects its state should not silently start from nothing).
  bool create_if_missing = true;

  // Use the write-ahead log (journal_mode=WAL). Default: true. Readers then never block the
  // writer nor the writer the readers, and a commit is one sequential append plus fsync.
  bool wal = true;

  // How long a statement waits for another connection's lock before failing with
  // Unavailable. Default: 5000 ms. 0 fails at once.
  int busy_timeout_ms = 5000;

  // synchronous=FULL (true) or NORMAL (false). Default: true (FULL).
  // With WAL, NORMAL never corrupts the database, but a transaction that had committed in
  // the last moments before a power loss or OS crash can roll back, because the WAL is
  // fsynced only at checkpoints. FULL fsyncs the WAL on every commit. fedmesh tells a node
  // its update was accepted only after the commit, and an operator is promised that a
  // restarted aggregator keeps every accepted update, so the default must be FULL; the cost
  // is one fsync per transaction, and fedmesh commits per state change, not per row.
  // NORMAL is for data that can be regenerated, such as simulator metrics.
  bool synchronous_full = true;

  // Open for reading only (SQLITE_OPEN_READONLY): nothing is created, written or switched
  // (wal and synchronous_full are left as the file has them), a missing file is NotFound.
  // Default: false. For tools that read a store another process may be writing.
  bool read_only = false;
};

class Database;

// A prepared statement. Parameters are 1-based (SQLite's convention), columns 0-based.
// REQUIRES: the Database that prepared it outlives it.
class Statement {
 public:
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binding copies the value (SQLITE_TRANSIENT): the argument need not outlive the call.
  // A bad index is OutOfRange.
  Status Bind(int index, int64_t value);
  Status Bind(int index, double value);
  // Binds TEXT. An empty view binds an empty string, not NULL.
  Status Bind(int index, std::string_view text);
  // Binds a BLOB. An empty span binds an empty blob, not NULL.
  Status Bind(int index, std::span<const uint8_t> blob);
  Status BindNull(int index);
  // Binds a BLOB of `size` zero bytes without allocating them: with Blob (below) this
  // writes a large value in place, never holding a second full copy in a bound parameter.
  // A size above SQLite's maximum value length is OutOfRange (when the statement runs).
  Status BindZeroBlob(int index, uint64_t size);
  // Any other integer type (int, uint32_t, size_t, bool) binds as an INTEGER; unsigned
  // values above INT64_MAX do not fit SQLite's integers and are OutOfRange.
  template <typename T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, int64_t>) Status Bind(int index, T value) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      if (value > static_cast<T>(INT64_MAX)) return ValueTooLarge(index);
    }
    return Bind(index, static_cast<int64_t>(value));
  }

  // Binds args to parameters 1, 2, ... in order with the Bind overloads above; stops at
  // the first failure and returns it.
  template <typename... Args>
  Status BindAll(const Args&... args) {
    Status s;
    int index = 0;
    ((s.ok() ? static_cast<void>(s = Bind(++index, args)) : static_cast<void>(0)), ...);
    return s;
  }

  // Runs the statement to its next row: true when a row is available through the Column
  // getters, false when the statement has finished. After false, call Reset() to run again.
  Result<bool> Step();
  // Runs the statement to completion, discarding any rows, then rewinds it keeping the
  // bindings, ready to run again. For INSERT, UPDATE, DELETE and DDL.
  Status Run();
  // Rewinds to run again and clears every binding back to NULL. Cannot fail: an error of
  // the previous Step() was already returned by that Step().
  void Reset();

  // Column getters. REQUIRES: the last Step() returned true and 0 <= col < ColumnCount().
  // SQLite converts between types (NULL reads as 0, "" or an empty blob). The views stay
  // valid until the next Step(), Reset() or destruction.
  int ColumnCount() const;
  bool ColumnIsNull(int col) const;
  int64_t ColumnInt64(int col) const;
  double ColumnDouble(int col) const;
  std::string_view ColumnText(int col) const;
  std::span<const uint8_t> ColumnBlob(int col) const;

 private:
  friend class Database;
  Statement(sqlite3_stmt* stmt, const Database* db) : stmt_(stmt), db_(db) {}
  Status Check(int rc, std::string_view what) const;
  Status ValueTooLarge(int index) const;
  void CheckColumn(int col) const;

  sqlite3_stmt* stmt_ = nullptr;
  const Database* db_ = nullptr;
};

// An open handle on one BLOB value for incremental I/O (sqlite3_blob_*): reads and writes
// go straight between the caller's buffer and the database pages, so a value of hundreds
// of megabytes is never copied whole. The value's size is fixed when it is written (use
// zeroblob(n) or BindZeroBlob, then Write); Blob cannot grow or shrink it.
// Changing the row through SQL while the handle is open expires it: later calls fail.
// Close it (destroy it) before the transaction it belongs to commits.
// REQUIRES: the Database that opened it outlives it.
class Blob {
 public:
  ~Blob();
  Blob(Blob&& other) noexcept;
  Blob& operator=(Blob&& other) noexcept;
  Blob(const Blob&) = delete;
  Blob& operator=(const Blob&) = delete;

  // Size of the value in bytes.
  uint64_t size() const;
  // Reads out.size() bytes starting at `offset`. Past the end is OutOfRange.
  Status Read(uint64_t offset, std::span<uint8_t> out);
  // Overwrites data.size() bytes starting at `offset`. Past the end is OutOfRange.
  // REQUIRES: the Blob was opened writable.
  Status Write(uint64_t offset, std::span<const uint8_t> data);

 private:
  friend class Database;
  Blob(sqlite3_blob* blob, const Database* db, std::string what)
      : blob_(blob), db_(db), what_(std::move(what)) {}
  Status CheckRange(uint64_t offset, uint64_t n, std::string_view op) const;

  sqlite3_blob* blob_ = nullptr;
  const Database* db_ = nullptr;
  std::string what_;  // "table.column of row N", for error messages
};

class Database {
 public:
  // Opens (or creates, see options) the database at `path` and applies the options.
  // A file that is not a SQLite database, or whose header is damaged, is Corruption.
  // Foreign keys are always enforced (PRAGMA foreign_keys=ON): SQLite leaves them off for
  // backward compatibility, which would let a store keep rows that point at nothing.
  // ":memory:" opens a private in-memory database (WAL does not apply to it).
  static Result<std::unique_ptr<Database>> Open(const std::string& path,
                                                const DatabaseOptions& options);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs one or more ';'-separated SQL statements, discarding any rows they return.
  Status Exec(std::string_view sql);
  // Compiles one SQL statement. Text after the first statement is InvalidArgument.
  Result<Statement> Prepare(std::string_view sql);

  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT and returns its Status. When the body
  // fails, the transaction is rolled back and the body's Status is returned; when COMMIT
  // fails, the transaction is rolled back and that failure is returned. IMMEDIATE takes
  // the write lock up front: a deferred transaction that reads first and writes later can
  // fail half-way with SQLITE_BUSY, which the busy timeout cannot resolve in WAL mode.
  // Calling it inside another transaction (nested, or after a manual BEGIN) is
  // FailedPrecondition: SQLite has no nested transactions, and silently joining the outer
  // one would make the inner body's "commit" a lie.
  Status WithTransaction(const std::function<Status()>& body);
  bool InTransaction() const;

  // The schema version stored in the file header (PRAGMA user_version); 0 for a new file.
  Result<int> UserVersion();
  // REQUIRES: version >= 0 (InvalidArgument otherwise).
  Status SetUserVersion(int version);

  // Opens the BLOB in `column` of the row whose rowid is `rowid` in `table` (of the main
  // database) for incremental I/O. A missing row, a NULL or a numeric value is an error;
  // a table or column that does not exist is InvalidArgument.
  Result<Blob> OpenBlob(std::string_view table, std::string_view column, int64_t rowid,
                        bool writable);

  // The rowid of the last successful INSERT on this connection.
  int64_t LastInsertRowId() const;
  // Rows changed by the last INSERT, UPDATE or DELETE on this connection.
  int64_t ChangedRows() const;

  const std::string& path() const { return path_; }

 private:
  friend class Statement;
  friend class Blob;
  Database(sqlite3* db, std::string path, int busy_timeout_ms)
      : db_(db), path_(std::move(path)), busy_timeout_ms_(busy_timeout_ms) {}
  // Turns a SQLite result code into a Status naming the file, `what` was being done and
  // SQLite's message. OK for SQLITE_OK, SQLITE_ROW and SQLITE_DONE.
  Status Error(int rc, std::string_view what) const;
  // Rolls back an open transaction; failures are folded into `cause`.
  Status Rollback(Status cause);

  sqlite3* db_;
  std::string path_;
  int busy_timeout_ms_;
  bool in_transaction_ = false;  // set only by WithTransaction
};

}  // namespace fedmesh
