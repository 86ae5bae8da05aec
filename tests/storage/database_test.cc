#include "storage/sqlite/database.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tests/storage/temp_dir.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTempDir;

// Opens or fails the test; the unique_ptr keeps the connection for the test's scope.
std::unique_ptr<Database> MustOpen(const std::string& path, const DatabaseOptions& options = {}) {
  auto db = Database::Open(path, options);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::move(db).value() : nullptr;
}

// The single value of a one-row, one-column query, as text.
std::string QueryText(Database& db, std::string_view sql) {
  auto stmt = db.Prepare(sql);
  EXPECT_TRUE(stmt.ok()) << stmt.status().ToString();
  if (!stmt.ok()) return "<prepare failed>";
  auto row = stmt->Step();
  EXPECT_TRUE(row.ok()) << row.status().ToString();
  if (!row.ok() || !*row) return "<no row>";
  return std::string(stmt->ColumnText(0));
}

int64_t QueryInt(Database& db, std::string_view sql) { return std::stoll(QueryText(db, sql)); }

class DatabaseTest : public ::testing::Test {
 protected:
  ScopedTempDir dir_;
  const std::string path_ = dir_.Path("fedmesh.db");
};

TEST_F(DatabaseTest, OpenCreatesFileInWalModeWithFullSync) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  EXPECT_TRUE(std::filesystem::exists(path_));
  EXPECT_EQ(QueryText(*db, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(QueryInt(*db, "PRAGMA synchronous"), 2);  // FULL
  EXPECT_EQ(QueryInt(*db, "PRAGMA foreign_keys"), 1);
  EXPECT_EQ(db->path(), path_);
}

TEST_F(DatabaseTest, OptionsSelectNormalSyncAndRollbackJournal) {
  DatabaseOptions options;
  options.wal = false;
  options.synchronous_full = false;
  auto db = MustOpen(path_, options);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryText(*db, "PRAGMA journal_mode"), "delete");
  EXPECT_EQ(QueryInt(*db, "PRAGMA synchronous"), 1);  // NORMAL
}

TEST_F(DatabaseTest, MissingFileWithoutCreateIsNotFound) {
  DatabaseOptions options;
  options.create_if_missing = false;
  auto db = Database::Open(path_, options);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(db.status().message(), HasSubstr(path_));
  EXPECT_FALSE(std::filesystem::exists(path_));
}

// A configuration mistake, said as one (SQLite says only "unable to open database file"):
// a missing directory is NotFound, a directory given as the file InvalidArgument, both
// naming the path (the binaries exit 2 for them).
TEST_F(DatabaseTest, MissingDirectoryOrADirectoryAsTheFileIsNamed) {
  const std::string path = dir_.Path("no/such/dir/fedmesh.db");
  auto db = Database::Open(path, {});
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(db.status().message(), HasSubstr(path));
  EXPECT_THAT(db.status().message(), HasSubstr("does not exist"));
  std::filesystem::create_directories(dir_.Path("a-dir.db"));
  auto dir = Database::Open(dir_.Path("a-dir.db"), {});
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(dir.status().message(), HasSubstr("a-dir.db is a directory"));
}

TEST_F(DatabaseTest, NegativeBusyTimeoutIsInvalidArgument) {
  DatabaseOptions options;
  options.busy_timeout_ms = -1;
  EXPECT_EQ(Database::Open(path_, options).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DatabaseTest, InMemoryDatabaseWorks) {
  auto db = MustOpen(":memory:");
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t(x); INSERT INTO t VALUES (42)").ok());
  EXPECT_EQ(QueryInt(*db, "SELECT x FROM t"), 42);
}

TEST_F(DatabaseTest, CommittedTransactionPersistsAcrossReopen) {
  {
    auto db = MustOpen(path_);
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(db->Exec("CREATE TABLE updates(round INTEGER, client TEXT)").ok());
    Status s = db->WithTransaction([&]() -> Status {
      FM_RETURN_IF_ERROR(db->Exec("INSERT INTO updates VALUES (1, 'a')"));
      return db->Exec("INSERT INTO updates VALUES (1, 'b')");
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_FALSE(db->InTransaction());
  }
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM updates"), 2);
}

TEST_F(DatabaseTest, FailingBodyRollsBackAndReturnsItsStatus) {
  {
    auto db = MustOpen(path_);
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(db->Exec("CREATE TABLE updates(round INTEGER)").ok());
    const Status failure = Status::InvalidArgument("update from client 7 is malformed");
    Status s = db->WithTransaction([&]() -> Status {
      FM_RETURN_IF_ERROR(db->Exec("INSERT INTO updates VALUES (1)"));
      return failure;
    });
    EXPECT_EQ(s, failure);
    EXPECT_FALSE(db->InTransaction());
    EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM updates"), 0);
    // The connection is usable for the next transaction.
    ASSERT_TRUE(
        db->WithTransaction([&] { return db->Exec("INSERT INTO updates VALUES (2)"); }).ok());
  }
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryText(*db, "SELECT group_concat(round) FROM updates"), "2");
}

TEST_F(DatabaseTest, FailingStatementInBodyRollsBack) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t(id INTEGER PRIMARY KEY)").ok());
  Status s = db->WithTransaction([&]() -> Status {
    FM_RETURN_IF_ERROR(db->Exec("INSERT INTO t VALUES (1)"));
    return db->Exec("INSERT INTO t VALUES (1)");  // duplicate key
  });
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM t"), 0);
}

TEST_F(DatabaseTest, NestedTransactionIsFailedPrecondition) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t(x)").ok());
  Status inner;
  Status outer = db->WithTransaction([&]() -> Status {
    FM_RETURN_IF_ERROR(db->Exec("INSERT INTO t VALUES (1)"));
    inner = db->WithTransaction([&] { return db->Exec("INSERT INTO t VALUES (2)"); });
    return inner;
  });
  EXPECT_EQ(inner.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(inner.message(), HasSubstr("nested transactions are not supported"));
  EXPECT_EQ(outer, inner);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM t"), 0);

  // A transaction opened by hand counts too.
  ASSERT_TRUE(db->Exec("BEGIN").ok());
  EXPECT_EQ(db->WithTransaction([] { return Status::OK(); }).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(db->Exec("ROLLBACK").ok());
}

TEST_F(DatabaseTest, BodyThatCommitsByItselfIsFailedPrecondition) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  Status s = db->WithTransaction([&] { return db->Exec("COMMIT"); });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(db->InTransaction());
}

TEST_F(DatabaseTest, WriterLockHeldTooLongIsUnavailable) {
  auto holder = MustOpen(path_);
  DatabaseOptions impatient;
  impatient.busy_timeout_ms = 50;
  auto waiter = MustOpen(path_, impatient);
  ASSERT_TRUE(holder && waiter);
  ASSERT_TRUE(holder->Exec("CREATE TABLE t(x)").ok());
  ASSERT_TRUE(holder->Exec("BEGIN IMMEDIATE; INSERT INTO t VALUES (1)").ok());

  // WAL: a reader is not blocked by the writer and sees the last committed state.
  EXPECT_EQ(QueryInt(*waiter, "SELECT count(*) FROM t"), 0);
  // A second writer waits busy_timeout_ms, then gets a clear Unavailable.
  Status s = waiter->WithTransaction([&] { return waiter->Exec("INSERT INTO t VALUES (2)"); });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("database is locked"));
  EXPECT_THAT(s.message(), HasSubstr(path_));

  ASSERT_TRUE(holder->Exec("COMMIT").ok());
  EXPECT_EQ(QueryInt(*waiter, "SELECT count(*) FROM t"), 1);
}

TEST_F(DatabaseTest, GarbageFileIsCorruption) {
  {
    std::ofstream out(path_, std::ios::binary);
    for (int i = 0; i < 1024; ++i) out << "not a database!\n";
  }
  auto db = Database::Open(path_, {});
  ASSERT_FALSE(db.ok()) << "a garbage file must not open as a database";
  EXPECT_EQ(db.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(db.status().message(), HasSubstr(path_));
  EXPECT_THAT(db.status().message(), HasSubstr("not a database"));
}

TEST_F(DatabaseTest, DamagedTablePageIsCorruptionOnQuery) {
  {
    DatabaseOptions options;
    options.wal = false;  // every page lands in the main file at commit
    auto db = MustOpen(path_, options);
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(db->Exec("PRAGMA page_size=4096; CREATE TABLE t(x)").ok());
    ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (randomblob(100)), (randomblob(100))").ok());
    ASSERT_EQ(QueryInt(*db, "SELECT rootpage FROM sqlite_master WHERE name='t'"), 2);
  }
  {
    // Overwrite page 2, the table's root, keeping page 1 (header + schema) intact.
    std::fstream f(path_, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(4096);
    const std::string junk(4096, '\xAB');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  DatabaseOptions options;
  options.wal = false;
  auto db = MustOpen(path_, options);  // the header and schema are still fine
  ASSERT_NE(db, nullptr);
  auto stmt = db->Prepare("SELECT count(*) FROM t");
  ASSERT_TRUE(stmt.ok()) << stmt.status().ToString();
  auto row = stmt->Step();
  ASSERT_FALSE(row.ok());
  EXPECT_EQ(row.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(row.status().message(), HasSubstr("malformed"));
  EXPECT_THAT(row.status().message(), HasSubstr(path_));
}

TEST_F(DatabaseTest, BlobsRoundTripExactly) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE blobs(id INTEGER PRIMARY KEY, data BLOB)").ok());

  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> every_byte;
  for (int rep = 0; rep < 3; ++rep) {
    for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<uint8_t>(b));
  }
  payloads.push_back(every_byte);                     // embedded zeros and 0xff
  payloads.push_back({});                             // empty must stay an empty blob, not NULL
  payloads.push_back(std::vector<uint8_t>(1 << 20));  // 1 MiB, a small model
  for (size_t i = 0; i < payloads[2].size(); ++i) {
    payloads[2][i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  }

  auto insert = db->Prepare("INSERT INTO blobs(id, data) VALUES (?, ?)");
  ASSERT_TRUE(insert.ok()) << insert.status().ToString();
  for (size_t i = 0; i < payloads.size(); ++i) {
    ASSERT_TRUE(insert->Bind(1, i).ok());
    ASSERT_TRUE(insert->Bind(2, std::span<const uint8_t>(payloads[i])).ok());
    ASSERT_TRUE(insert->Run().ok());
  }

  auto select = db->Prepare("SELECT data, typeof(data) FROM blobs WHERE id = ?");
  ASSERT_TRUE(select.ok());
  for (size_t i = 0; i < payloads.size(); ++i) {
    select->Reset();
    ASSERT_TRUE(select->Bind(1, i).ok());
    auto row = select->Step();
    ASSERT_TRUE(row.ok() && *row) << "payload " << i;
    EXPECT_EQ(select->ColumnText(1), "blob") << "payload " << i;
    EXPECT_FALSE(select->ColumnIsNull(0));
    std::span<const uint8_t> got = select->ColumnBlob(0);
    EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.end()), payloads[i]) << "payload " << i;
  }
}

TEST_F(DatabaseTest, ScalarBindingsRoundTrip) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE v(i INTEGER, d REAL, s TEXT, n)").ok());
  auto insert = db->Prepare("INSERT INTO v VALUES (?, ?, ?, ?)");
  ASSERT_TRUE(insert.ok());
  const std::string text("caf\xc3\xa9\0tail", 10);  // UTF-8 with an embedded NUL
  ASSERT_TRUE(insert->Bind(1, std::numeric_limits<int64_t>::min()).ok());
  ASSERT_TRUE(insert->Bind(2, 0.1).ok());
  ASSERT_TRUE(insert->Bind(3, std::string_view(text)).ok());
  ASSERT_TRUE(insert->BindNull(4).ok());
  ASSERT_TRUE(insert->Run().ok());
  EXPECT_EQ(db->LastInsertRowId(), 1);
  EXPECT_EQ(db->ChangedRows(), 1);

  auto select = db->Prepare("SELECT i, d, s, n FROM v");
  ASSERT_TRUE(select.ok());
  auto row = select->Step();
  ASSERT_TRUE(row.ok() && *row);
  ASSERT_EQ(select->ColumnCount(), 4);
  EXPECT_EQ(select->ColumnInt64(0), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(select->ColumnDouble(1), 0.1);
  EXPECT_EQ(select->ColumnText(2), text);
  EXPECT_TRUE(select->ColumnIsNull(3));
  auto done = select->Step();
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done);
}

TEST_F(DatabaseTest, BindErrorsAreOutOfRange) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  auto stmt = db->Prepare("SELECT ?");
  ASSERT_TRUE(stmt.ok());
  EXPECT_EQ(stmt->Bind(2, int64_t{1}).code(), StatusCode::kOutOfRange);
  Status too_big = stmt->Bind(1, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(too_big.code(), StatusCode::kOutOfRange);
  EXPECT_THAT(too_big.message(), HasSubstr("INT64_MAX"));
  EXPECT_TRUE(stmt->Bind(1, uint64_t{INT64_MAX}).ok());
}

TEST_F(DatabaseTest, ResetClearsBindingsAndRerunsTheStatement) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  auto stmt = db->Prepare("SELECT ? * 2");
  ASSERT_TRUE(stmt.ok());
  ASSERT_TRUE(stmt->Bind(1, 21).ok());
  ASSERT_TRUE(*stmt->Step());
  EXPECT_EQ(stmt->ColumnInt64(0), 42);
  stmt->Reset();
  ASSERT_TRUE(*stmt->Step());
  EXPECT_TRUE(stmt->ColumnIsNull(0)) << "Reset must clear the old binding";
  stmt->Reset();
  ASSERT_TRUE(stmt->Bind(1, 5).ok());
  ASSERT_TRUE(*stmt->Step());
  EXPECT_EQ(stmt->ColumnInt64(0), 10);
}

TEST_F(DatabaseTest, SqlErrorsCarrySqliteMessageAndPath) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  Status syntax = db->Exec("SELEC 1");
  EXPECT_EQ(syntax.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(syntax.message(), HasSubstr("syntax error"));
  EXPECT_THAT(syntax.message(), HasSubstr(path_));
  EXPECT_THAT(syntax.message(), HasSubstr("SELEC 1"));

  auto missing = db->Prepare("SELECT * FROM no_such_table");
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("no such table: no_such_table"));

  ASSERT_TRUE(db->Exec("CREATE TABLE t(x NOT NULL, y UNIQUE)").ok());
  EXPECT_EQ(db->Exec("INSERT INTO t VALUES (NULL, 1)").code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (1, 1)").ok());
  EXPECT_EQ(db->Exec("INSERT INTO t VALUES (2, 1)").code(), StatusCode::kAlreadyExists);
}

TEST_F(DatabaseTest, PrepareRefusesMoreThanOneStatement) {
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  auto two = db->Prepare("SELECT 1; SELECT 2");
  EXPECT_EQ(two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(two.status().message(), HasSubstr("use Exec"));
  EXPECT_TRUE(db->Prepare("SELECT 1;  -- trailing comment\n").ok());
  EXPECT_EQ(db->Prepare("  ").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DatabaseTest, UserVersionPersists) {
  {
    auto db = MustOpen(path_);
    ASSERT_NE(db, nullptr);
    auto v = db->UserVersion();
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(*v, 0);
    ASSERT_TRUE(db->SetUserVersion(7).ok());
    EXPECT_EQ(db->SetUserVersion(-1).code(), StatusCode::kInvalidArgument);
  }
  auto db = MustOpen(path_);
  ASSERT_NE(db, nullptr);
  auto v = db->UserVersion();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
}

TEST_F(DatabaseTest, BlobWritesInPlaceIntoAZeroBlobAndReadsBack) {
  auto db = MustOpen(path_);
  ASSERT_TRUE(db->Exec("CREATE TABLE b (id INTEGER PRIMARY KEY, v BLOB)").ok());
  auto insert = db->Prepare("INSERT INTO b (id, v) VALUES (7, ?)");
  ASSERT_TRUE(insert.ok());
  ASSERT_TRUE(insert->BindZeroBlob(1, 100000).ok());
  ASSERT_TRUE(insert->Run().ok());
  EXPECT_EQ(QueryInt(*db, "SELECT length(v) FROM b WHERE id = 7"), 100000);

  std::vector<uint8_t> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31 + 1);
  {
    auto blob = db->OpenBlob("b", "v", 7, /*writable=*/true);
    ASSERT_TRUE(blob.ok()) << blob.status().ToString();
    EXPECT_EQ(blob->size(), 100000u);
    ASSERT_TRUE(blob->Write(0, std::span<const uint8_t>(data).first(60000)).ok());
    ASSERT_TRUE(blob->Write(60000, std::span<const uint8_t>(data).subspan(60000)).ok());
  }
  auto blob = db->OpenBlob("b", "v", 7, /*writable=*/false);
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();
  std::vector<uint8_t> back(data.size());
  ASSERT_TRUE(blob->Read(0, back).ok());
  EXPECT_EQ(back, data);
  std::vector<uint8_t> tail(10);
  ASSERT_TRUE(blob->Read(99990, tail).ok());
  EXPECT_EQ(tail, std::vector<uint8_t>(data.end() - 10, data.end()));
}

TEST_F(DatabaseTest, BlobRefusesOutOfRangeAccessAndMissingRows) {
  auto db = MustOpen(path_);
  ASSERT_TRUE(db->Exec("CREATE TABLE b (id INTEGER PRIMARY KEY, v BLOB); "
                       "INSERT INTO b VALUES (1, zeroblob(16)), (2, NULL)")
                  .ok());
  auto blob = db->OpenBlob("b", "v", 1, /*writable=*/true);
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();
  std::vector<uint8_t> buf(8);
  Status past = blob->Read(10, buf);
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange) << past.ToString();
  EXPECT_THAT(past.message(), HasSubstr(path_));
  EXPECT_EQ(blob->Write(9, buf).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(blob->Write(8, buf).ok());

  auto missing = db->OpenBlob("b", "v", 3, /*writable=*/false);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("b.v of row 3"));
  EXPECT_FALSE(db->OpenBlob("b", "v", 2, /*writable=*/false).ok());  // NULL is not a blob
  EXPECT_EQ(db->OpenBlob("nope", "v", 1, false).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedmesh
