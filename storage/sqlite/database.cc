#include "storage/sqlite/database.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <filesystem>
#include <thread>
#include <utility>

#include "core/check.h"

namespace fedmesh {
namespace {

// SQL quoted in error messages is cut short: the message is for a person reading a log.
std::string Snippet(std::string_view sql) {
  constexpr size_t kMax = 120;
  while (!sql.empty() && (sql.front() == ' ' || sql.front() == '\n' || sql.front() == '\t')) {
    sql.remove_prefix(1);
  }
  // Appended piecewise: `"\"" + std::string(...)` trips GCC 12's false -Wrestrict at -O3.
  std::string out(1, '"');
  out.append(sql.substr(0, kMax));
  if (sql.size() > kMax) out.append("...");
  out.push_back('"');
  return out;
}

// Owns a statement inside Exec/Prepare until it is handed on.
struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

}  // namespace

// ---------------------------------------------------------------------------------------
// Database

Result<std::unique_ptr<Database>> Database::Open(const std::string& path,
                                                 const DatabaseOptions& options) {
  if (path.empty()) return Status::InvalidArgument("database path is empty");
  if (options.busy_timeout_ms < 0) {
    return Status::InvalidArgument("busy_timeout_ms must be >= 0, got " +
                                   std::to_string(options.busy_timeout_ms));
  }
  const bool in_memory = path == ":memory:";
  if (!in_memory) {
    // SQLite says only "unable to open database file" for these; they are configuration
    // mistakes, so say which.
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument("database " + path + " is a directory; name a file in it");
    }
    const std::string parent = std::filesystem::path(path).parent_path().string();
    if (!parent.empty() && ::stat(parent.c_str(), &st) != 0 && errno == ENOENT) {
      return Status::NotFound("database " + path + ": its directory " + parent + " does not exist");
    }
  }
  if ((!options.create_if_missing || options.read_only) && !in_memory) {
    // SQLite would only say "unable to open database file"; say what is actually wrong.
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) {
      return Status::NotFound("database " + path + " does not exist" +
                              (options.read_only ? "" : " (and create_if_missing is false)"));
    }
  }

  int flags = options.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  if (options.create_if_missing && !options.read_only) flags |= SQLITE_OPEN_CREATE;
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  // Even a failed open allocates a handle (it carries the error message); the Database
  // owns it from here so every exit path closes it.
  std::unique_ptr<Database> db(new Database(raw, path, options.busy_timeout_ms));
  if (rc != SQLITE_OK) {
    if (raw == nullptr) return Status::Internal("sqlite3_open_v2 could not allocate a handle");
    return db->Error(rc, "opening the file");
  }
  // Extended codes tell a UNIQUE violation from a NOT NULL one, and a busy snapshot from a lock.
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);

  // Opening is lazy: SQLite reads nothing until the first statement. Read the schema now so
  // a file that is not a database fails here, with a clear error, not at some later query.
  {
    sqlite3_stmt* probe = nullptr;
    rc = sqlite3_prepare_v2(raw, "SELECT count(*) FROM sqlite_master", -1, &probe, nullptr);
    StmtPtr guard(probe);
    if (rc == SQLITE_OK) rc = sqlite3_step(probe);
    if (rc != SQLITE_ROW) return db->Error(rc, "reading the database header and schema");
  }
  if (options.read_only) return db;

  if (!in_memory) {
    const char* wanted = options.wal ? "wal" : "delete";
    // Switching the journal mode of a new file takes an exclusive lock, and SQLite returns
    // SQLITE_BUSY at once, without its busy handler, when another connection is switching
    // too (waiting could deadlock). Several processes opening one new store at the same
    // moment is normal (tests, a node and its tools): retry until busy_timeout_ms.
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(options.busy_timeout_ms);
    std::string got;
    for (;;) {
      FM_ASSIGN_OR_RETURN(Statement mode,
                          db->Prepare(std::string("PRAGMA journal_mode=") + wanted));
      Result<bool> has_row = mode.Step();
      if (has_row.ok()) {
        // SQLite answers with the mode now in force; it keeps the old one when it cannot
        // switch (WAL needs shared memory, which some network file systems lack).
        got = *has_row ? std::string(mode.ColumnText(0)) : std::string();
        break;
      }
      if (has_row.status().code() != StatusCode::kUnavailable ||
          std::chrono::steady_clock::now() >= give_up) {
        return has_row.status();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (got != wanted) {
      return Status::FailedPrecondition(
          "database " + path + ": could not set journal_mode=" + wanted + " (SQLite kept '" + got +
          "'); WAL needs a local file system. Move the file to local disk" +
          (options.wal ? ", or open it with wal = false" : ""));
    }
  }
  FM_RETURN_IF_ERROR(
      db->Exec(options.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  FM_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys=ON"));
  return db;
}

Database::~Database() {
  // close_v2 defers the close until the last Statement is finalized, so destruction order
  // between a Database and a leaked Statement cannot crash. An open transaction (only
  // possible if WithTransaction's body threw past us) is rolled back by SQLite.
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Status Database::Error(int rc, std::string_view what) const {
  const int primary = rc & 0xff;
  if (primary == SQLITE_OK || primary == SQLITE_ROW || primary == SQLITE_DONE) return Status::OK();

  std::string detail = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  const std::string generic = sqlite3_errstr(rc);
  if (detail != generic) detail += " (" + generic + ")";
  std::string msg = "sqlite error on " + path_ + " while " + std::string(what) + ": " + detail;

  switch (primary) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Status::Corruption(std::move(msg) +
                                "; restore the file from a backup or move it aside");
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Unavailable(std::move(msg) +
                                 "; another connection held the lock for more "
                                 "than busy_timeout_ms (" +
                                 std::to_string(busy_timeout_ms_) + ")");
    case SQLITE_CANTOPEN:
      return Status::IOError(std::move(msg) +
                             "; check that the directory exists and is writable by this user");
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_PROTOCOL:
      return Status::IOError(std::move(msg));
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return Status::PermissionDenied(std::move(msg));
    case SQLITE_CONSTRAINT:
      // A duplicate key is the one constraint callers routinely branch on (a re-sent update).
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return Status::AlreadyExists(std::move(msg));
      }
      return Status::FailedPrecondition(std::move(msg));
    case SQLITE_RANGE:
    case SQLITE_TOOBIG:
      return Status::OutOfRange(std::move(msg));
    case SQLITE_ERROR:
    case SQLITE_MISMATCH:
      // Bad SQL or a missing table/column: the statement does not fit this database.
      return Status::InvalidArgument(std::move(msg));
    default:
      return Status::Internal(std::move(msg));
  }
}

Status Database::Exec(std::string_view sql) {
  if (sql.size() > static_cast<size_t>(INT_MAX)) {
    return Status::InvalidArgument("SQL text of " + std::to_string(sql.size()) +
                                   " bytes is too long for " + path_);
  }
  const char* p = sql.data();
  const char* const end = sql.data() + sql.size();
  while (p < end) {
    sqlite3_stmt* raw = nullptr;
    const char* tail = nullptr;
    const std::string_view rest(p, static_cast<size_t>(end - p));
    int rc = sqlite3_prepare_v2(db_, p, static_cast<int>(end - p), &raw, &tail);
    StmtPtr stmt(raw);
    if (rc != SQLITE_OK) return Error(rc, "preparing " + Snippet(rest));
    if (stmt == nullptr) break;  // only whitespace or comments remain
    while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    }
    if (rc != SQLITE_DONE) {
      return Error(rc, "executing " + Snippet(rest.substr(0, static_cast<size_t>(tail - p))));
    }
    p = tail;
  }
  return Status::OK();
}

Result<Statement> Database::Prepare(std::string_view sql) {
  if (sql.size() > static_cast<size_t>(INT_MAX)) {
    return Status::InvalidArgument("SQL text of " + std::to_string(sql.size()) +
                                   " bytes is too long for " + path_);
  }
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &raw, &tail);
  StmtPtr stmt(raw);
  if (rc != SQLITE_OK) return Error(rc, "preparing " + Snippet(sql));
  if (stmt == nullptr) {
    return Status::InvalidArgument("Prepare on " + path_ + " got no SQL statement in " +
                                   Snippet(sql));
  }
  // A second statement would be silently ignored by sqlite3_prepare; refuse it instead.
  const char* end = sql.data() + sql.size();
  if (tail != nullptr && tail < end) {
    sqlite3_stmt* extra = nullptr;
    sqlite3_prepare_v2(db_, tail, static_cast<int>(end - tail), &extra, nullptr);
    const bool more = extra != nullptr;
    sqlite3_finalize(extra);
    if (more) {
      return Status::InvalidArgument("Prepare takes one SQL statement but " + Snippet(sql) +
                                     " has more; use Exec for scripts");
    }
  }
  return Statement(stmt.release(), this);
}

bool Database::InTransaction() const { return in_transaction_ || sqlite3_get_autocommit(db_) == 0; }

Status Database::Rollback(Status cause) {
  in_transaction_ = false;
  // SQLite rolls back by itself after some errors (disk full, out of memory); a second
  // ROLLBACK would then fail with "no transaction is active".
  if (sqlite3_get_autocommit(db_) == 0) {
    Status r = Exec("ROLLBACK");
    if (!r.ok()) {
      return Status(cause.code(), cause.message() + "; the rollback also failed: " + r.message());
    }
  }
  return cause;
}

Status Database::WithTransaction(const std::function<Status()>& body) {
  if (InTransaction()) {
    return Status::FailedPrecondition(
        "WithTransaction on " + path_ +
        " was called inside another transaction; nested transactions are not supported, "
        "run the inner work as part of the outer body");
  }
  FM_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  in_transaction_ = true;
  Status s;
  try {
    s = body();
  } catch (...) {
    // fedmesh code does not throw, but a std::bad_alloc must not leave the write lock held.
    (void)Rollback(Status::Internal("exception in transaction body"));
    throw;
  }
  if (!s.ok()) return Rollback(std::move(s));
  if (sqlite3_get_autocommit(db_) != 0) {
    in_transaction_ = false;
    return Status::FailedPrecondition(
        "the body passed to WithTransaction on " + path_ +
        " ended the transaction itself (COMMIT or ROLLBACK); let WithTransaction do it");
  }
  Status c = Exec("COMMIT");
  if (!c.ok()) return Rollback(std::move(c));
  in_transaction_ = false;
  return Status::OK();
}

Result<int> Database::UserVersion() {
  FM_ASSIGN_OR_RETURN(Statement stmt, Prepare("PRAGMA user_version"));
  FM_ASSIGN_OR_RETURN(bool has_row, stmt.Step());
  if (!has_row) return Status::Internal("PRAGMA user_version returned no row on " + path_);
  return static_cast<int>(stmt.ColumnInt64(0));
}

Status Database::SetUserVersion(int version) {
  if (version < 0) {
    return Status::InvalidArgument("schema version must be >= 0, got " + std::to_string(version));
  }
  // PRAGMA arguments cannot be bound parameters; an int formats safely.
  return Exec("PRAGMA user_version = " + std::to_string(version));
}

Result<Blob> Database::OpenBlob(std::string_view table, std::string_view column, int64_t rowid,
                               bool writable) {
  const std::string t(table), c(column);
  std::string what = t + "." + c + " of row " + std::to_string(rowid);
  sqlite3_blob* raw = nullptr;
  const int rc = sqlite3_blob_open(db_, "main", t.c_str(), c.c_str(), rowid, writable ? 1 : 0, &raw);
  if (rc != SQLITE_OK) {
    sqlite3_blob_close(raw);  // a failed open may still hand back a handle; null is a no-op
    return Error(rc, "opening the blob " + what);
  }
  return Blob(raw, this, std::move(what));
}

int64_t Database::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }

int64_t Database::ChangedRows() const { return sqlite3_changes64(db_); }

// ---------------------------------------------------------------------------------------
// Statement

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : stmt_(std::exchange(other.stmt_, nullptr)), db_(std::exchange(other.db_, nullptr)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

Status Statement::Check(int rc, std::string_view what) const {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return Status::OK();
  return db_->Error(rc, std::string(what) + " " + Snippet(sqlite3_sql(stmt_)));
}

Status Statement::ValueTooLarge(int index) const {
  return Status::OutOfRange("value bound to parameter " + std::to_string(index) + " of " +
                            Snippet(sqlite3_sql(stmt_)) + " on " + db_->path() +
                            " exceeds INT64_MAX, the largest SQLite integer");
}

Status Statement::Bind(int index, int64_t value) {
  return Check(sqlite3_bind_int64(stmt_, index, value),
               "binding parameter " + std::to_string(index) + " of");
}

Status Statement::Bind(int index, double value) {
  return Check(sqlite3_bind_double(stmt_, index, value),
               "binding parameter " + std::to_string(index) + " of");
}

Status Statement::Bind(int index, std::string_view text) {
  // A null data pointer would bind NULL; an empty string must stay an empty string.
  const char* data = text.data() != nullptr ? text.data() : "";
  return Check(sqlite3_bind_text64(stmt_, index, data, text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
               "binding parameter " + std::to_string(index) + " of");
}

Status Statement::Bind(int index, std::span<const uint8_t> blob) {
  // sqlite3_bind_blob with a null pointer binds NULL, so an empty blob is a zero-length
  // zeroblob: reading it back gives an empty blob, as written.
  const int rc =
      blob.empty() ? sqlite3_bind_zeroblob(stmt_, index, 0)
                   : sqlite3_bind_blob64(stmt_, index, blob.data(), blob.size(), SQLITE_TRANSIENT);
  return Check(rc, "binding parameter " + std::to_string(index) + " of");
}

Status Statement::BindNull(int index) {
  return Check(sqlite3_bind_null(stmt_, index),
               "binding parameter " + std::to_string(index) + " of");
}

Status Statement::BindZeroBlob(int index, uint64_t size) {
  return Check(sqlite3_bind_zeroblob64(stmt_, index, size),
               "binding parameter " + std::to_string(index) + " of");
}

Result<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return Check(rc, "executing");
}

Status Statement::Run() {
  int rc;
  while ((rc = sqlite3_step(stmt_)) == SQLITE_ROW) {
  }
  Status s = Check(rc, "executing");
  sqlite3_reset(stmt_);  // its return code repeats the step's error, reported above
  return s;
}

void Statement::Reset() {
  sqlite3_reset(stmt_);  // its return code repeats the last Step()'s error, already reported
  sqlite3_clear_bindings(stmt_);
}

int Statement::ColumnCount() const { return sqlite3_column_count(stmt_); }

void Statement::CheckColumn(int col) const {
  FM_CHECK_GE(col, 0);
  FM_CHECK_LT(col, sqlite3_column_count(stmt_));
}

bool Statement::ColumnIsNull(int col) const {
  CheckColumn(col);
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

int64_t Statement::ColumnInt64(int col) const {
  CheckColumn(col);
  return sqlite3_column_int64(stmt_, col);
}

double Statement::ColumnDouble(int col) const {
  CheckColumn(col);
  return sqlite3_column_double(stmt_, col);
}

std::string_view Statement::ColumnText(int col) const {
  CheckColumn(col);
  // text before bytes: bytes then reports the length of the (possibly converted) text.
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  if (text == nullptr) return {};
  return {text, static_cast<size_t>(n)};
}

std::span<const uint8_t> Statement::ColumnBlob(int col) const {
  CheckColumn(col);
  const auto* blob = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  if (blob == nullptr) return {};
  return {blob, static_cast<size_t>(n)};
}

// ---------------------------------------------------------------------------------------
// Blob

namespace {
// sqlite3_blob_read/write take int sizes and offsets; values never exceed INT_MAX bytes
// (SQLITE_MAX_LENGTH), so chunks of 1 GiB cover any value in at most two calls.
constexpr uint64_t kBlobChunk = uint64_t{1} << 30;
}  // namespace

Blob::~Blob() {
  if (blob_ != nullptr) sqlite3_blob_close(blob_);
}

Blob::Blob(Blob&& other) noexcept
    : blob_(std::exchange(other.blob_, nullptr)),
      db_(std::exchange(other.db_, nullptr)),
      what_(std::move(other.what_)) {}

Blob& Blob::operator=(Blob&& other) noexcept {
  if (this != &other) {
    if (blob_ != nullptr) sqlite3_blob_close(blob_);
    blob_ = std::exchange(other.blob_, nullptr);
    db_ = std::exchange(other.db_, nullptr);
    what_ = std::move(other.what_);
  }
  return *this;
}

uint64_t Blob::size() const { return static_cast<uint64_t>(sqlite3_blob_bytes(blob_)); }

Status Blob::CheckRange(uint64_t offset, uint64_t n, std::string_view op) const {
  const uint64_t total = size();
  if (offset > total || n > total - offset) {
    return Status::OutOfRange(std::string(op) + " of " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + " is past the end of the blob " + what_ +
                              " (" + std::to_string(total) + " bytes) on " + db_->path());
  }
  return Status::OK();
}

Status Blob::Read(uint64_t offset, std::span<uint8_t> out) {
  FM_RETURN_IF_ERROR(CheckRange(offset, out.size(), "reading"));
  for (uint64_t done = 0; done < out.size();) {
    const uint64_t n = std::min<uint64_t>(kBlobChunk, out.size() - done);
    const int rc = sqlite3_blob_read(blob_, out.data() + done, static_cast<int>(n),
                                     static_cast<int>(offset + done));
    if (rc != SQLITE_OK) return db_->Error(rc, "reading the blob " + what_);
    done += n;
  }
  return Status::OK();
}

Status Blob::Write(uint64_t offset, std::span<const uint8_t> data) {
  FM_RETURN_IF_ERROR(CheckRange(offset, data.size(), "writing"));
  for (uint64_t done = 0; done < data.size();) {
    const uint64_t n = std::min<uint64_t>(kBlobChunk, data.size() - done);
    const int rc = sqlite3_blob_write(blob_, data.data() + done, static_cast<int>(n),
                                      static_cast<int>(offset + done));
    if (rc != SQLITE_OK) return db_->Error(rc, "writing the blob " + what_);
    done += n;
  }
  return Status::OK();
}

}  // namespace fedmesh
