#include "storage/aggregator_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/blake3.h"
#include "core/sha256.h"
#include "storage/node_store.h"
#include "storage/sqlite/database.h"
#include "tests/storage/temp_dir.h"

namespace fedmesh {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::ScopedTempDir;

// Deterministic parameters that cover more than "nice" floats: signed zeros, subnormals,
// infinities and a NaN with a payload, so a lossy round trip (through double, through text)
// would show.
std::vector<float> Params(uint32_t seed, size_t n) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<float>(static_cast<int32_t>(x)) / 1e9f;
  }
  const float specials[] = {-0.0f, std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::max()};
  for (size_t i = 0; i < std::size(specials) && i < n; ++i) v[i] = specials[i];
  if (n > 4) {
    const uint32_t nan_bits = 0x7fc01234u;
    std::memcpy(&v[4], &nan_bits, 4);
  }
  return v;
}

// Bit-for-bit equality (NaN == NaN when their bits are equal).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

std::string Node(int i) { return "node-" + std::to_string(i); }

std::vector<std::string> Nodes(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(Node(i));
  return v;
}

class AggregatorStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<AggregatorStore> Open() {
    auto store = AggregatorStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  // A plain connection to the same file, as an operator's sqlite3 shell would have.
  std::unique_ptr<Database> Raw() {
    auto db = Database::Open(path_, DatabaseOptions{});
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? std::move(db).value() : nullptr;
  }
  int64_t QueryInt(const std::string& sql) {
    auto db = Raw();
    auto stmt = db->Prepare(sql);
    EXPECT_TRUE(stmt.ok()) << stmt.status().ToString();
    auto row = stmt->Step();
    EXPECT_TRUE(row.ok() && *row) << sql;
    return stmt->ColumnInt64(0);
  }
  // Overwrites the blob `column` of the row matched by `where` with `bytes` via SQL.
  void RawUpdateBlob(const std::string& table, const std::string& column, const std::string& where,
                     const std::vector<uint8_t>& bytes) {
    auto db = Raw();
    auto stmt = db->Prepare("UPDATE " + table + " SET " + column + " = ? WHERE " + where);
    ASSERT_TRUE(stmt.ok()) << stmt.status().ToString();
    ASSERT_TRUE(stmt->Bind(1, std::span<const uint8_t>(bytes)).ok());
    ASSERT_TRUE(stmt->Run().ok());
    ASSERT_EQ(db->ChangedRows(), 1);
  }
  std::vector<uint8_t> RawBlob(const std::string& sql) {
    auto db = Raw();
    auto stmt = db->Prepare(sql);
    EXPECT_TRUE(stmt.ok()) << stmt.status().ToString();
    auto row = stmt->Step();
    EXPECT_TRUE(row.ok() && *row) << sql;
    auto blob = stmt->ColumnBlob(0);
    return {blob.begin(), blob.end()};
  }

  ScopedTempDir dir_;
  const std::string path_ = dir_.Path("aggregator.db");
};

// ---------------------------------------------------------------------------------------
// Models

TEST_F(AggregatorStoreTest, NewStoreHasNoModelNoRoundNoMetrics) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto latest = store->LatestModel();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_FALSE(latest->has_value());
  auto open = store->LoadOpenRound();
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_FALSE(open->has_value());
  EXPECT_TRUE(store->Metrics()->empty());
  EXPECT_TRUE(store->Nodes()->empty());
  EXPECT_EQ(QueryInt("PRAGMA user_version"), 9);
}

TEST_F(AggregatorStoreTest, ModelRoundTripIsBitExactAndStoredLittleEndianWithBlake3) {
  const std::vector<float> v0 = Params(1, 1000), v1 = Params(2, 1000);
  {
    auto store = Open();
    ASSERT_TRUE(store->SaveModel(0, v0).ok());
    ASSERT_TRUE(store->SaveModel(1, v1).ok());
  }
  auto store = Open();  // reopened: what is read comes from the file
  auto latest = store->LatestModel();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->version, 1u);
  EXPECT_TRUE(SameBits((*latest)->params, v1));
  auto loaded = store->LoadModel(0);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(SameBits(*loaded, v0));

  // The file format: float32 little-endian bytes, and the BLAKE3 of exactly those bytes
  // (in the column named sha256 before BLAKE3), tagged with its kind.
  const std::vector<uint8_t> blob = RawBlob("SELECT params FROM models WHERE version = 0");
  ASSERT_EQ(blob.size(), 4000u);
  uint32_t bits;
  std::memcpy(&bits, &v0[10], 4);
  EXPECT_EQ(blob[40], bits & 0xff);
  EXPECT_EQ(blob[43], bits >> 24);
  const Blake3Digest want = Blake3::Hash(std::span<const uint8_t>(blob));
  std::vector<uint8_t> tagged = {2};  // wire::DigestKind::kBlake3
  tagged.insert(tagged.end(), want.begin(), want.end());
  EXPECT_EQ(RawBlob("SELECT sha256 FROM models WHERE version = 0"), tagged);
}

// A store written before BLAKE3 (schema v8: 32-byte SHA-256 digests) is migrated on open
// and its rows read and checked with SHA-256; rows written after it keep a tagged BLAKE3. A
// digest column of any other form is damage, named.
TEST_F(AggregatorStoreTest, RowsWrittenBeforeBlake3AreCheckedWithSha256) {
  const std::vector<float> v0 = Params(1, 1000), v1 = Params(2, 1000);
  { ASSERT_TRUE(Open()->SaveModel(0, v0).ok()); }
  const std::vector<uint8_t> blob = RawBlob("SELECT params FROM models WHERE version = 0");
  const Sha256Digest sha = Sha256::Hash(std::span<const uint8_t>(blob));
  RawUpdateBlob("models", "sha256", "version = 0", {sha.begin(), sha.end()});
  ASSERT_TRUE(Raw()->SetUserVersion(8).ok());  // what a v8 store holds
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(QueryInt("PRAGMA user_version"), 9);
    auto loaded = store->LoadModel(0);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_TRUE(SameBits(*loaded, v0));
    ASSERT_TRUE(store->SaveModel(1, v1).ok());
  }
  EXPECT_EQ(QueryInt("SELECT length(sha256) FROM models WHERE version = 0"), 32);
  EXPECT_EQ(QueryInt("SELECT length(sha256) FROM models WHERE version = 1"), 33);
  // A SHA-256 row whose bytes change is still caught, by SHA-256.
  std::vector<uint8_t> flipped = blob;
  flipped[7] ^= 0x10;
  RawUpdateBlob("models", "params", "version = 0", flipped);
  auto bad = Open()->LoadModel(0);
  ASSERT_EQ(bad.status().code(), StatusCode::kCorruption) << bad.status().ToString();
  EXPECT_THAT(bad.status().message(), HasSubstr("the sha256 of its values is"));
  // A tag this build does not know.
  std::vector<uint8_t> unknown_tag = RawBlob("SELECT sha256 FROM models WHERE version = 1");
  unknown_tag[0] = 7;
  RawUpdateBlob("models", "sha256", "version = 1", unknown_tag);
  auto unknown = Open()->LoadModel(1);
  ASSERT_EQ(unknown.status().code(), StatusCode::kCorruption) << unknown.status().ToString();
  EXPECT_THAT(unknown.status().message(), HasSubstr("neither a SHA-256 (32) nor a tagged BLAKE3 (33)"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("model version 1"));
}

TEST_F(AggregatorStoreTest, EmptyModelRoundTrips) {
  auto store = Open();
  ASSERT_TRUE(store->SaveModel(0, std::vector<float>{}).ok());
  auto loaded = store->LoadModel(0);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->empty());
}

TEST_F(AggregatorStoreTest, TenMillionParameterModelRoundTripsThroughIncrementalBlobIo) {
  const size_t kParams = 10'000'000;
  const std::vector<float> big = Params(7, kParams);
  {
    auto store = Open();
    Status s = store->SaveModel(5, big);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(QueryInt("SELECT length(params) FROM models WHERE version = 5"),
            static_cast<int64_t>(kParams * 4));
  auto store = Open();
  auto loaded = store->LoadModel(5);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(SameBits(*loaded, big));
}

TEST_F(AggregatorStoreTest, ModelVersionsOnlyIncrease) {
  auto store = Open();
  ASSERT_TRUE(store->SaveModel(3, Params(1, 10)).ok());
  Status dup = store->SaveModel(3, Params(2, 10));
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists) << dup.ToString();
  Status older = store->SaveModel(2, Params(2, 10));
  EXPECT_EQ(older.code(), StatusCode::kFailedPrecondition) << older.ToString();
  EXPECT_THAT(older.message(), HasSubstr(path_));
  auto kept = store->LoadModel(3);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(SameBits(*kept, Params(1, 10)));  // the refused save changed nothing
  auto missing = store->LoadModel(4);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
}

TEST_F(AggregatorStoreTest, CorruptedModelBlobIsCorruptionNamingVersionAndFile) {
  {
    auto store = Open();
    ASSERT_TRUE(store->SaveModel(1, Params(1, 500)).ok());
    ASSERT_TRUE(store->SaveModel(2, Params(2, 500)).ok());
  }
  std::vector<uint8_t> bytes = RawBlob("SELECT params FROM models WHERE version = 2");
  bytes[777] ^= 0x01;  // one flipped bit: same length, different contents
  RawUpdateBlob("models", "params", "version = 2", bytes);

  auto store = Open();
  auto loaded = store->LoadModel(2);
  ASSERT_EQ(loaded.status().code(), StatusCode::kCorruption) << loaded.status().ToString();
  EXPECT_THAT(loaded.status().message(), HasSubstr("model version 2"));
  EXPECT_THAT(loaded.status().message(), HasSubstr(path_));
  EXPECT_THAT(loaded.status().message(), HasSubstr("the blake3 of its values is"));
  auto latest = store->LatestModel();  // never handed out silently through another door
  EXPECT_EQ(latest.status().code(), StatusCode::kCorruption);
  auto intact = store->LoadModel(1);
  ASSERT_TRUE(intact.ok()) << intact.status().ToString();
  EXPECT_TRUE(SameBits(*intact, Params(1, 500)));
}

TEST_F(AggregatorStoreTest, TruncatedModelBlobIsCorruption) {
  {
    auto store = Open();
    ASSERT_TRUE(store->SaveModel(1, Params(1, 500)).ok());
  }
  std::vector<uint8_t> bytes = RawBlob("SELECT params FROM models WHERE version = 1");
  bytes.resize(bytes.size() - 4);
  RawUpdateBlob("models", "params", "version = 1", bytes);
  auto loaded = Open()->LoadModel(1);
  ASSERT_EQ(loaded.status().code(), StatusCode::kCorruption) << loaded.status().ToString();
  EXPECT_THAT(loaded.status().message(), HasSubstr("model version 1"));
  EXPECT_THAT(loaded.status().message(), HasSubstr("500 float32 values"));
}

// ---------------------------------------------------------------------------------------
// Rounds

TEST_F(AggregatorStoreTest, OpenRoundRules) {
  auto store = Open();
  EXPECT_EQ(store->OpenRound(1, 1, {}, 10.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->OpenRound(1, 1, {"a", "b", "a"}, 10.0).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store->OpenRound(1, 1, {"a", "b"}, 10.0).ok());
  Status second = store->OpenRound(2, 1, {"a"}, 20.0);
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition) << second.ToString();
  EXPECT_THAT(second.message(), HasSubstr("round 1 is still open"));
  ASSERT_TRUE(store->CloseRound(1, 1, Params(1, 4), RoundMetrics{}).ok());
  Status again = store->OpenRound(1, 1, {"a"}, 20.0);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.ToString();
  EXPECT_TRUE(store->OpenRound(3, 1, {"a"}, 30.0).ok());  // gaps are allowed
}

TEST_F(AggregatorStoreTest, AnAbandonedRoundLeavesNothingOpenAndTheNextOneOpens) {
  auto store = Open();
  ASSERT_TRUE(store->SaveModel(0, Params(0, 4)).ok());
  ASSERT_TRUE(store->OpenRound(5, 2, {"a", "b"}, 10.0).ok());
  ASSERT_TRUE(store->AcceptUpdate(5, "a", 10, Params(1, 4), 0.5).ok());
  EXPECT_EQ(store->AbandonRound(4).code(), StatusCode::kFailedPrecondition);  // not the open one
  ASSERT_TRUE(store->AbandonRound(5).ok());
  auto open = store->LoadOpenRound();
  ASSERT_TRUE(open.ok());
  EXPECT_FALSE(open->has_value());
  EXPECT_EQ(store->AbandonRound(5).code(), StatusCode::kFailedPrecondition);  // nothing open
  ASSERT_TRUE(store->OpenRound(6, 1, {"a", "b"}, 20.0).ok());
  auto reopened = store->LoadOpenRound();
  ASSERT_TRUE(reopened.ok() && reopened->has_value());
  EXPECT_EQ((*reopened)->round, 6u);
  EXPECT_TRUE((*reopened)->updates.empty());
}

TEST_F(AggregatorStoreTest, ReopenWithoutClosingResumesRoundWithEveryAcceptedUpdate) {
  const std::vector<std::string> selected = {"site-c", "site-a", "site-e", "site-b", "site-d"};
  {
    auto store = Open();
    ASSERT_TRUE(store->SaveModel(0, Params(0, 300)).ok());
    ASSERT_TRUE(store->OpenRound(7, 2, selected, 1234.5).ok());
    ASSERT_TRUE(store->AcceptUpdate(7, "site-e", 100, Params(11, 300), 0.75).ok());
    ASSERT_TRUE(store->AcceptUpdate(7, "site-a", 50, Params(12, 300), 1.5).ok());
    ASSERT_TRUE(store
                    ->AcceptUpdate(7, "site-d", 25, Params(13, 300),
                                   std::numeric_limits<double>::quiet_NaN())
                    .ok());
    // Destroyed here without CloseRound: what a crash leaves.
  }
  auto store = Open();
  auto open = store->LoadOpenRound();
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  ASSERT_TRUE(open->has_value());
  const OpenRoundState& st = **open;
  EXPECT_EQ(st.round, 7u);
  EXPECT_EQ(st.attempt, 2u);
  EXPECT_EQ(st.deadline, 1234.5);
  EXPECT_EQ(st.selected, selected);  // selection order kept
  ASSERT_EQ(st.updates.size(), 3u);
  EXPECT_EQ(st.updates[0].node, "site-e");  // acceptance order kept
  EXPECT_EQ(st.updates[1].node, "site-a");
  EXPECT_EQ(st.updates[2].node, "site-d");
  EXPECT_EQ(st.updates[0].num_examples, 100u);
  EXPECT_EQ(st.updates[1].num_examples, 50u);
  EXPECT_EQ(st.updates[0].train_loss, 0.75);
  EXPECT_TRUE(std::isnan(st.updates[2].train_loss));
  EXPECT_TRUE(SameBits(st.updates[0].params, Params(11, 300)));
  EXPECT_TRUE(SameBits(st.updates[1].params, Params(12, 300)));
  EXPECT_TRUE(SameBits(st.updates[2].params, Params(13, 300)));
  // The resumed round goes on: more updates, then close.
  EXPECT_TRUE(store->AcceptUpdate(7, "site-b", 10, Params(14, 300), 0.5).ok());
  EXPECT_EQ(store->AcceptUpdate(7, "site-a", 50, Params(12, 300), 1.5).code(),
            StatusCode::kAlreadyExists);
}

// Update i of the kill test: a shared large body, cheap to vary, so the child spends its
// time inside AcceptUpdate rather than making parameters.
std::vector<float> KillTestUpdate(const std::vector<float>& base, uint32_t i) {
  std::vector<float> v = base;
  for (size_t k = 0; k < 8; ++k) v[k * 4099] = static_cast<float>(i * 8 + k);
  return v;
}

// The child accepts updates and acknowledges each one through a pipe after AcceptUpdate
// returned; the parent SIGKILLs it mid-stream, at a different point of the update cycle in
// each trial. Every acknowledged update must be in the file, intact; the only other update
// allowed is the next one, whose commit can complete between the last acknowledgement and
// the kill. A torn transaction (row without its blob, half-written blob) would fail the
// SHA-256 check and the test.
TEST_F(AggregatorStoreTest, SigkillMidRoundKeepsExactlyTheAcknowledgedUpdates) {
  constexpr int kNodes = 200;
  constexpr size_t kParams = 1 << 20;  // 4 MiB per update: most of the time is in a commit
  constexpr uint32_t kAcksBeforeKill = 5;
  const std::vector<float> base = Params(77, kParams);
  for (double fraction : {0.0, 0.2, 0.4, 0.6, 0.8}) {
    SCOPED_TRACE("kill at fraction " + std::to_string(fraction) + " of an update cycle");
    const std::string path = dir_.Path("kill_" + std::to_string(fraction) + ".db");
    {
      auto store = AggregatorStore::Open(path);
      ASSERT_TRUE(store.ok());
      ASSERT_TRUE((*store)->OpenRound(1, 1, Nodes(kNodes), 99.0).ok());
    }
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      auto store = AggregatorStore::Open(path);
      if (!store.ok()) ::_exit(2);
      for (uint32_t i = 0; i < kNodes; ++i) {
        const std::vector<float> params = KillTestUpdate(base, i);
        if (!(*store)->AcceptUpdate(1, Node(static_cast<int>(i)), i + 1, params, 0.25).ok()) {
          ::_exit(3);
        }
        if (::write(fds[1], &i, sizeof i) != sizeof i) ::_exit(4);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    uint32_t acked = 0;  // acknowledgements are 0, 1, 2, ... in order
    auto read_ack = [&]() {
      uint32_t i;
      if (::read(fds[0], &i, sizeof i) != sizeof i) return false;
      EXPECT_EQ(i, acked);
      ++acked;
      return true;
    };
    ASSERT_TRUE(read_ack());
    const auto first = std::chrono::steady_clock::now();
    while (acked < kAcksBeforeKill && read_ack()) {
    }
    ASSERT_EQ(acked, kAcksBeforeKill) << "the child stopped early";
    const auto cycle = (std::chrono::steady_clock::now() - first) / (kAcksBeforeKill - 1);
    std::this_thread::sleep_for(
        std::chrono::duration_cast<std::chrono::microseconds>(cycle * fraction));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "the child was not killed mid-stream (status " << wstatus << ")";
    while (read_ack()) {  // acknowledgements already in the pipe when it died
    }
    ::close(fds[0]);
    ASSERT_LT(acked, static_cast<uint32_t>(kNodes));

    auto store = AggregatorStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto open = (*store)->LoadOpenRound();
    ASSERT_TRUE(open.ok()) << open.status().ToString();
    ASSERT_TRUE(open->has_value());
    const auto& updates = (*open)->updates;
    ASSERT_GE(updates.size(), acked) << "an acknowledged update was lost";
    ASSERT_LE(updates.size(), acked + 1) << "updates appeared that were never sent";
    for (uint32_t i = 0; i < updates.size(); ++i) {
      EXPECT_EQ(updates[i].node, Node(static_cast<int>(i)));
      EXPECT_EQ(updates[i].num_examples, i + 1);
      EXPECT_TRUE(SameBits(updates[i].params, KillTestUpdate(base, i))) << "update " << i;
    }
    // The store is usable after recovery.
    EXPECT_TRUE((*store)->AcceptUpdate(1, Node(kNodes - 1), 1, Params(0, 8), 0.0).ok());
  }
}

TEST_F(AggregatorStoreTest, DuplicateAcceptIsAlreadyExistsAndChangesNothing) {
  auto store = Open();
  ASSERT_TRUE(store->OpenRound(1, 1, {"a", "b"}, 10.0).ok());
  ASSERT_TRUE(store->AcceptUpdate(1, "a", 10, Params(1, 64), 0.5).ok());
  Status dup = store->AcceptUpdate(1, "a", 99, Params(2, 64), 9.0);
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists) << dup.ToString();
  EXPECT_THAT(dup.message(), HasSubstr("node a"));
  auto open = store->LoadOpenRound();
  ASSERT_TRUE(open.ok() && open->has_value());
  ASSERT_EQ((*open)->updates.size(), 1u);
  EXPECT_EQ((*open)->updates[0].num_examples, 10u);
  EXPECT_EQ((*open)->updates[0].train_loss, 0.5);
  EXPECT_TRUE(SameBits((*open)->updates[0].params, Params(1, 64)));
}

TEST_F(AggregatorStoreTest, AcceptRequiresTheOpenRoundAndASelectedNode) {
  auto store = Open();
  Status none = store->AcceptUpdate(1, "a", 1, Params(1, 4), 0);
  EXPECT_EQ(none.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.message(), HasSubstr("no round is open"));
  ASSERT_TRUE(store->OpenRound(2, 1, {"a"}, 10.0).ok());
  Status wrong_round = store->AcceptUpdate(1, "a", 1, Params(1, 4), 0);
  EXPECT_EQ(wrong_round.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong_round.message(), HasSubstr("round 2 is open"));
  Status stranger = store->AcceptUpdate(2, "z", 1, Params(1, 4), 0);
  EXPECT_EQ(stranger.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(stranger.message(), HasSubstr("not selected"));
  EXPECT_TRUE((*store->LoadOpenRound())->updates.empty());
}

TEST_F(AggregatorStoreTest, CloseRoundSavesModelDropsUpdateBlobsAndStoresMetrics) {
  auto store = Open();
  ASSERT_TRUE(store->SaveModel(0, Params(0, 128)).ok());
  ASSERT_TRUE(store->OpenRound(1, 1, {"a", "b", "c"}, 10.0).ok());
  ASSERT_TRUE(store->AcceptUpdate(1, "a", 10, Params(1, 128), 0.5).ok());
  ASSERT_TRUE(store->AcceptUpdate(1, "b", 20, Params(2, 128), 0.6).ok());
  ASSERT_TRUE(store->RecordRejection(1, "c", "non-finite").ok());
  RoundMetrics in;
  in.test_accuracy = 0.8125;
  in.test_loss = 0.5;
  in.bytes_up = 1024;
  in.bytes_down = 4096;
  in.bytes_up_raw = 800000;
  in.bytes_down_raw = 7123;
  in.wall_s = 2.25;
  in.epsilon = 1.5;
  in.received = 999;  // store-kept fields are ignored on input
  Status s = store->CloseRound(1, 1, Params(100, 128), in);
  ASSERT_TRUE(s.ok()) << s.ToString();

  EXPECT_EQ(QueryInt("SELECT count(*) FROM updates WHERE round = 1"), 2);  // who contributed
  EXPECT_EQ(QueryInt("SELECT count(*) FROM updates WHERE params IS NOT NULL"), 0);
  auto latest = store->LatestModel();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->version, 1u);
  EXPECT_TRUE(SameBits((*latest)->params, Params(100, 128)));
  EXPECT_FALSE(store->LoadOpenRound()->has_value());
  EXPECT_EQ(store->AcceptUpdate(1, "c", 1, Params(3, 128), 0).code(),
            StatusCode::kFailedPrecondition);

  auto metrics = store->Metrics();
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  ASSERT_EQ(metrics->size(), 1u);
  const RoundMetrics& m = (*metrics)[0];
  EXPECT_EQ(m.round, 1u);
  EXPECT_EQ(m.attempt, 1u);
  EXPECT_EQ(m.model_version, 1u);
  EXPECT_EQ(m.test_accuracy, 0.8125);
  EXPECT_EQ(m.test_loss, 0.5);
  EXPECT_EQ(m.selected, 3u);
  EXPECT_EQ(m.received, 2u);
  EXPECT_EQ(m.rejected, 1u);
  EXPECT_EQ(m.bytes_up, 1024u);
  EXPECT_EQ(m.bytes_down, 4096u);
  EXPECT_EQ(m.bytes_up_raw, 800000u);
  EXPECT_EQ(m.bytes_down_raw, 7123u);
  EXPECT_EQ(m.wall_s, 2.25);
  EXPECT_EQ(m.epsilon, 1.5);

  // A late update for the closed round is still counted as a rejection.
  ASSERT_TRUE(store->RecordRejection(1, "c", "late").ok());
  EXPECT_EQ((*store->Metrics())[0].rejected, 2u);
}

TEST_F(AggregatorStoreTest, StrategyStateIsCommittedWithTheModelAndChecked) {
  {
    auto store = Open();
    ASSERT_TRUE(store->SaveModel(0, Params(0, 64)).ok());
    ASSERT_TRUE(store->OpenRound(1, 1, {"a"}, 10.0).ok());
    ASSERT_TRUE(store->CloseRound(1, 1, Params(1, 64), RoundMetrics{}).ok());  // stateless
    ASSERT_TRUE(store->OpenRound(2, 1, {"a"}, 10.0).ok());
    ASSERT_TRUE(store->CloseRound(2, 2, Params(2, 64), RoundMetrics{}, Params(7, 128)).ok());
  }
  auto store = Open();
  auto none = store->StrategyState(1);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
  EXPECT_TRUE(store->StrategyState(0)->empty());
  auto state = store->StrategyState(2);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_TRUE(SameBits(*state, Params(7, 128)));
  store.reset();

  std::vector<uint8_t> bytes = RawBlob("SELECT state FROM strategy_state WHERE model_version = 2");
  ASSERT_EQ(bytes.size(), 4u * 128);
  bytes[100] ^= 0x10;
  RawUpdateBlob("strategy_state", "state", "model_version = 2", bytes);
  store = Open();
  auto bad = store->StrategyState(2);
  ASSERT_EQ(bad.status().code(), StatusCode::kCorruption) << bad.status().ToString();
  EXPECT_THAT(bad.status().message(), HasSubstr("strategy state of model version 2"));
}

TEST_F(AggregatorStoreTest, FailedCloseLeavesTheRoundOpenWithItsUpdates) {
  auto store = Open();
  ASSERT_TRUE(store->SaveModel(4, Params(0, 16)).ok());
  ASSERT_TRUE(store->OpenRound(1, 1, {"a"}, 10.0).ok());
  ASSERT_TRUE(store->AcceptUpdate(1, "a", 10, Params(1, 16), 0.5).ok());
  Status s = store->CloseRound(1, 4, Params(2, 16), RoundMetrics{});  // version 4 exists
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  auto open = store->LoadOpenRound();
  ASSERT_TRUE(open.ok() && open->has_value());
  ASSERT_EQ((*open)->updates.size(), 1u);
  EXPECT_TRUE(SameBits((*open)->updates[0].params, Params(1, 16)));
  EXPECT_TRUE(store->Metrics()->empty());
  EXPECT_EQ(store->CloseRound(2, 5, Params(2, 16), RoundMetrics{}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store->CloseRound(1, 5, Params(2, 16), RoundMetrics{}).ok());
}

TEST_F(AggregatorStoreTest, CorruptedUpdateBlobIsCorruptionOnResume) {
  {
    auto store = Open();
    ASSERT_TRUE(store->OpenRound(3, 1, {"a", "b"}, 10.0).ok());
    ASSERT_TRUE(store->AcceptUpdate(3, "b", 10, Params(1, 64), 0.5).ok());
  }
  std::vector<uint8_t> bytes = RawBlob("SELECT params FROM updates WHERE node = 'b'");
  bytes[0] ^= 0x80;
  RawUpdateBlob("updates", "params", "node = 'b'", bytes);
  auto open = Open()->LoadOpenRound();
  ASSERT_EQ(open.status().code(), StatusCode::kCorruption) << open.status().ToString();
  EXPECT_THAT(open.status().message(), HasSubstr("update of node b in round 3"));
  EXPECT_THAT(open.status().message(), HasSubstr(path_));
}

TEST_F(AggregatorStoreTest, RetryRoundStartsANewAttemptKeepingNothingOfTheFailedOne) {
  auto store = Open();
  ASSERT_TRUE(store->OpenRound(4, 1, {"a", "b", "c"}, 10.0).ok());
  ASSERT_TRUE(store->AcceptUpdate(4, "a", 10, Params(1, 32), 0.5).ok());
  ASSERT_TRUE(store->RecordRejection(4, "b", "wrong shape").ok());

  EXPECT_EQ(store->RetryRound(4, 1, {"d"}, 20.0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->RetryRound(5, 2, {"d"}, 20.0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->RetryRound(4, 2, {}, 20.0).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store->RetryRound(4, 2, {"d", "a"}, 20.0).ok());

  auto open = store->LoadOpenRound();
  ASSERT_TRUE(open.ok() && open->has_value());
  EXPECT_EQ((*open)->round, 4u);
  EXPECT_EQ((*open)->attempt, 2u);
  EXPECT_EQ((*open)->deadline, 20.0);
  EXPECT_THAT((*open)->selected, ElementsAre("d", "a"));
  EXPECT_TRUE((*open)->updates.empty());
  EXPECT_EQ(QueryInt("SELECT count(*) FROM updates"), 0);
  // "a" was selected again and sends a fresh update; "b" is no longer selected.
  EXPECT_TRUE(store->AcceptUpdate(4, "a", 11, Params(2, 32), 0.4).ok());
  EXPECT_EQ(store->AcceptUpdate(4, "b", 11, Params(2, 32), 0.4).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->CloseRound(4, 1, Params(3, 32), RoundMetrics{}).ok());
  auto metrics = store->Metrics();
  ASSERT_EQ(metrics->size(), 1u);
  EXPECT_EQ((*metrics)[0].attempt, 2u);
  EXPECT_EQ((*metrics)[0].selected, 2u);
  EXPECT_EQ((*metrics)[0].received, 1u);
  EXPECT_EQ((*metrics)[0].rejected, 0u);  // the failed attempt's rejection went with it
}

TEST_F(AggregatorStoreTest, RejectionsAreCountedPerRound) {
  auto store = Open();
  Status unknown = store->RecordRejection(9, "a", "late");
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound) << unknown.ToString();
  ASSERT_TRUE(store->OpenRound(1, 1, {"a"}, 10.0).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store->RecordRejection(1, "a", "bad signature").ok());
  ASSERT_TRUE(store->RecordRejection(1, "x", "not selected").ok());
  EXPECT_EQ(QueryInt("SELECT count FROM rejections WHERE node = 'a'"), 3);
  ASSERT_TRUE(store->CloseRound(1, 1, Params(1, 4), RoundMetrics{}).ok());
  EXPECT_EQ((*store->Metrics())[0].rejected, 4u);
}

// ---------------------------------------------------------------------------------------
// Nodes and metrics

TEST_F(AggregatorStoreTest, UpsertNodeKeepsFirstSeenAndUpdatesLastSeen) {
  {
    auto store = Open();
    ASSERT_TRUE(store->UpsertNode("site-b", "keyB", 100.0).ok());
    ASSERT_TRUE(store->UpsertNode("site-a", "keyA", 110.0).ok());
    ASSERT_TRUE(store->UpsertNode("site-b", "keyB2", 150.5).ok());
    EXPECT_EQ(store->UpsertNode("", "k", 1.0).code(), StatusCode::kInvalidArgument);
  }
  auto nodes = Open()->Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].id, "site-a");
  EXPECT_EQ((*nodes)[0].first_seen, 110.0);
  EXPECT_EQ((*nodes)[0].last_seen, 110.0);
  EXPECT_EQ((*nodes)[1].id, "site-b");
  EXPECT_EQ((*nodes)[1].public_key_z85, "keyB2");
  EXPECT_EQ((*nodes)[1].first_seen, 100.0);
  EXPECT_EQ((*nodes)[1].last_seen, 150.5);
}

TEST_F(AggregatorStoreTest, MetricsListClosedRoundsInRoundOrderWithNaNForUnmeasured) {
  auto store = Open();
  for (uint64_t r : {2u, 5u, 11u}) {
    ASSERT_TRUE(store->OpenRound(r, 1, {"a"}, 0.0).ok());
    RoundMetrics m;
    m.test_accuracy = r == 5 ? std::numeric_limits<double>::quiet_NaN() : 0.01 * r;
    m.wall_s = static_cast<double>(r);
    ASSERT_TRUE(store->CloseRound(r, r, Params(static_cast<uint32_t>(r), 4), m).ok());
  }
  ASSERT_TRUE(store->OpenRound(12, 1, {"a"}, 0.0).ok());  // open: no metrics yet
  auto metrics = store->Metrics();
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  ASSERT_EQ(metrics->size(), 3u);
  EXPECT_EQ((*metrics)[0].round, 2u);
  EXPECT_EQ((*metrics)[1].round, 5u);
  EXPECT_EQ((*metrics)[2].round, 11u);
  EXPECT_EQ((*metrics)[2].model_version, 11u);
  EXPECT_EQ((*metrics)[0].test_accuracy, 0.02);
  EXPECT_TRUE(std::isnan((*metrics)[1].test_accuracy));
  EXPECT_TRUE(std::isnan((*metrics)[1].test_loss));
  EXPECT_EQ((*metrics)[2].wall_s, 11.0);
}

// Federated evaluation rows: per site and "*", replaced by a later save of the same round,
// read back ordered by site; a NaN loss reads back as NaN.
TEST_F(AggregatorStoreTest, SiteEvalRowsRoundTrip) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->SaveSiteEval(3, 3, {{3, 3, "site-b", 40, 0.5, "{\"accuracy\":0.75}"},
                                         {3, 3, "*", 100, 0.4, "{\"accuracy\":0.8}"},
                                         {3, 3, "site-a", 60, 0.3333, "{\"accuracy\":0.8333}"}})
                  .ok());
  ASSERT_TRUE(store->SaveSiteEval(3, 3, {{3, 3, "site-b", 40, std::nan(""), "{}"}}).ok());
  ASSERT_TRUE(store->SaveSiteEval(1, 1, {{1, 1, "*", 90, 0.6, "{\"accuracy\":0.7}"}}).ok());
  auto rows = store->SiteEvals(3);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].site, "*");
  EXPECT_EQ((*rows)[0].num_examples, 100u);
  EXPECT_EQ((*rows)[1].site, "site-a");
  EXPECT_EQ((*rows)[1].metrics_json, "{\"accuracy\":0.8333}");
  EXPECT_EQ((*rows)[2].site, "site-b");
  EXPECT_TRUE(std::isnan((*rows)[2].loss));
  EXPECT_TRUE(store->SiteEvals(4)->empty());
  auto history = store->SiteEvalHistory("*");
  ASSERT_TRUE(history.ok()) << history.status().ToString();
  ASSERT_EQ(history->size(), 2u);
  EXPECT_EQ((*history)[0].round, 1u);
  EXPECT_EQ((*history)[1].round, 3u);
  EXPECT_EQ((*history)[1].model_version, 3u);
  EXPECT_EQ((*history)[1].metrics_json, "{\"accuracy\":0.8}");
}

// ---------------------------------------------------------------------------------------
// Retention (issue 26 item 11)

class PruneModelsTest : public AggregatorStoreTest {
 protected:
  // Version 0, then rounds 1..n each closing with version r; round r's test accuracy is
  // accuracy(r) (NaN: not evaluated), and each version carries a strategy state.
  void RunRounds(AggregatorStore& store, uint64_t n, double (*accuracy)(uint64_t)) {
    ASSERT_TRUE(store.SaveModel(0, Params(0, 64)).ok());
    for (uint64_t r = 1; r <= n; ++r) {
      ASSERT_TRUE(store.OpenRound(r, 1, {"a"}, 0.0).ok());
      ASSERT_TRUE(store.AcceptUpdate(r, "a", 10, Params(1000 + r, 64), 0.5).ok());
      RoundMetrics m;
      m.test_accuracy = accuracy(r);
      const auto v = static_cast<uint32_t>(r);
      ASSERT_TRUE(store.CloseRound(r, r, Params(v, 64), m, Params(500 + v, 8)).ok());
    }
  }
  static double NoAccuracy(uint64_t) { return std::numeric_limits<double>::quiet_NaN(); }
  // Best at round 3, and a tie at round 7 that the earlier round wins.
  static double PeakAtThree(uint64_t r) { return r == 3 || r == 7 ? 0.9 : 0.1 * r / 10; }

  // Which of versions 0..n still load, as a string ("0123" = all of 0..3).
  static std::string Loadable(AggregatorStore& store, uint64_t n) {
    std::string out;
    for (uint64_t v = 0; v <= n; ++v) {
      if (store.LoadModel(v).ok()) out += std::to_string(v);
    }
    return out;
  }
};

TEST_F(PruneModelsTest, KeepsTheNewestTheBestAndTheLatest) {
  auto store = Open();
  RunRounds(*store, 10, PeakAtThree);
  ASSERT_EQ(*store->BestModelVersion(), std::optional<uint64_t>(3));

  auto pruned = store->PruneModels(2);
  ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
  EXPECT_THAT(*pruned, ElementsAre(0u, 1u, 2u, 4u, 5u, 6u, 7u, 8u));
  EXPECT_EQ(Loadable(*store, 10), "3910");
  // What is kept is bit-exact, and the latest carries its strategy state for a restart.
  EXPECT_TRUE(SameBits(*store->LoadModel(3), Params(3, 64)));
  EXPECT_TRUE(SameBits(*store->LoadModel(9), Params(9, 64)));
  EXPECT_TRUE(SameBits(*store->StrategyState(10), Params(510, 8)));
  EXPECT_TRUE(store->StrategyState(5)->empty()) << "a pruned version's state is freed too";
  // The rows stay, with empty blobs: the rounds still name their model.
  EXPECT_EQ(QueryInt("SELECT count(*) FROM models"), 11);
  EXPECT_EQ(QueryInt("SELECT count(*) FROM models WHERE length(params) = 0"), 8);
  EXPECT_EQ(store->Metrics()->size(), 10u);
}

TEST_F(PruneModelsTest, PrunedVersionLoadsWithAClearErrorAfterAReopen) {
  {
    auto store = Open();
    RunRounds(*store, 5, NoAccuracy);
    ASSERT_TRUE(store->PruneModels(1).ok());
  }
  auto store = Open();  // as a restarted aggregator or fedmesh-model export would
  auto pruned = store->LoadModel(2);
  EXPECT_EQ(pruned.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(pruned.status().message(),
              HasSubstr(path_ + ": model version 2 was pruned by [storage] keep_models"));
  // Never stored is still told apart from pruned.
  EXPECT_THAT(store->LoadModel(99).status().message(), HasSubstr("is not stored"));
  // A restart resumes from the latest version, which is always kept.
  auto latest = store->LatestModel();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->version, 5u);
  EXPECT_TRUE(SameBits((*latest)->params, Params(5, 64)));
  EXPECT_TRUE(SameBits(*store->StrategyState(5), Params(505, 8)));
  // The next round commits as usual after a prune.
  ASSERT_TRUE(store->OpenRound(6, 1, {"a"}, 0.0).ok());
  ASSERT_TRUE(store->CloseRound(6, 6, Params(6, 64), RoundMetrics{}).ok());
  EXPECT_EQ(Loadable(*store, 6), "56");
}

TEST_F(PruneModelsTest, PruningTwiceIsIdempotent) {
  auto store = Open();
  RunRounds(*store, 6, PeakAtThree);
  auto first = store->PruneModels(2);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_THAT(*first, ElementsAre(0u, 1u, 2u, 4u));
  auto second = store->PruneModels(2);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->empty());
  EXPECT_EQ(Loadable(*store, 6), "356");
  EXPECT_EQ(QueryInt("SELECT count(*) FROM pruned_models"), 4);
}

TEST_F(PruneModelsTest, ZeroKeepsEveryVersion) {
  auto store = Open();
  RunRounds(*store, 4, NoAccuracy);
  auto pruned = store->PruneModels(0);
  ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
  EXPECT_TRUE(pruned->empty());
  EXPECT_EQ(Loadable(*store, 4), "01234");
  EXPECT_TRUE(store->PruneModels(100)->empty()) << "more than stored keeps all too";
  EXPECT_EQ(Loadable(*store, 4), "01234");
}

// Without the aggregator's own test accuracy the best is the federated evaluation's:
// its "accuracy" when reported, else its loss.
TEST_F(PruneModelsTest, BestFallsBackToFederatedAccuracyThenFederatedLoss) {
  auto store = Open();
  RunRounds(*store, 6, NoAccuracy);
  EXPECT_FALSE(store->BestModelVersion()->has_value());
  auto eval = [&](uint64_t round, double loss, const std::string& json) {
    const std::vector<SiteEvalRow> rows = {{round, round, "*", 10, loss, json},
                                           {round, round, "site-a", 10, 0.0, "{\"accuracy\":1}"}};
    ASSERT_TRUE(store->SaveSiteEval(round, round, rows).ok());
  };
  eval(1, 0.9, "{}");
  eval(2, 0.2, "{\"mse\":3}");
  EXPECT_EQ(*store->BestModelVersion(), std::optional<uint64_t>(2)) << "lowest loss";
  eval(3, 0.5, "{\"accuracy\":0.8,\"finetuned_accuracy\":0.99}");
  eval(4, 0.4, "{\"accuracy\":0.7}");
  eval(5, 0.1, "not json");  // a damaged row is skipped, not an error
  EXPECT_EQ(*store->BestModelVersion(), std::optional<uint64_t>(3)) << "highest accuracy";
  auto pruned = store->PruneModels(1);
  ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
  EXPECT_EQ(Loadable(*store, 6), "36");
}

// ---------------------------------------------------------------------------------------
// Admin control (schema v8)

TEST_F(AggregatorStoreTest, AdminActionsAndControlStateSurviveAReopen) {
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->RecordAdminAction({100.5, "alice", "admin", "pause", "", "ok"}).ok());
    ASSERT_TRUE(store->RecordAdminAction({101.0, "bob", "observer", "abort", "x", "may only read"}).ok());
    ASSERT_TRUE(store->RecordAdminAction({102.0, "alice", "admin", "kick", "site-3", "ok"}).ok());
    ASSERT_TRUE(store->SetControl("paused", "by alice").ok());
    ASSERT_TRUE(store->SetControl("aborted", "by alice").ok());
    ASSERT_TRUE(store->SetControl("aborted", "").ok());  // erased
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto all = store->AdminActions(10);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].admin, "alice");
  EXPECT_EQ((*all)[0].time, 100.5);
  EXPECT_EQ((*all)[1].role, "observer");
  EXPECT_EQ((*all)[1].result, "may only read");
  EXPECT_EQ((*all)[2].argument, "site-3");
  auto last = store->AdminActions(2);  // the latest two, oldest first
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(last->size(), 2u);
  EXPECT_EQ((*last)[0].action, "abort");
  EXPECT_EQ((*last)[1].action, "kick");
  auto paused = store->Control("paused");
  ASSERT_TRUE(paused.ok());
  EXPECT_EQ(*paused, std::optional<std::string>("by alice"));
  auto aborted = store->Control("aborted");
  ASSERT_TRUE(aborted.ok());
  EXPECT_FALSE(aborted->has_value());
}

// ---------------------------------------------------------------------------------------
// Schema

TEST_F(AggregatorStoreTest, DatabaseFromNewerSchemaIsRefusedWithUpgradeMessage) {
  { ASSERT_NE(Open(), nullptr); }
  ASSERT_TRUE(Raw()->SetUserVersion(10).ok());
  auto store = AggregatorStore::Open(path_);
  ASSERT_EQ(store.status().code(), StatusCode::kFailedPrecondition) << store.status().ToString();
  EXPECT_THAT(store.status().message(), HasSubstr("upgrade fedmesh"));
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
  EXPECT_EQ(QueryInt("PRAGMA user_version"), 10);  // left untouched
}

TEST_F(AggregatorStoreTest, NodeStoreFileOrForeignDatabaseIsRefused) {
  { ASSERT_TRUE(NodeStore::Open(path_).ok()); }
  auto store = AggregatorStore::Open(path_);
  ASSERT_EQ(store.status().code(), StatusCode::kFailedPrecondition) << store.status().ToString();
  EXPECT_THAT(store.status().message(), HasSubstr("is a fedmesh node store"));

  const std::string other = dir_.Path("other.db");
  {
    auto db = Database::Open(other, DatabaseOptions{});
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec("CREATE TABLE t (x); PRAGMA user_version = 3").ok());
  }
  auto foreign = AggregatorStore::Open(other);
  ASSERT_EQ(foreign.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(foreign.status().message(), HasSubstr("some other program"));
}

TEST_F(AggregatorStoreTest, FileThatIsNotADatabaseIsCorruption) {
  { std::ofstream(path_) << std::string(8192, 'x'); }
  auto store = AggregatorStore::Open(path_);
  EXPECT_EQ(store.status().code(), StatusCode::kCorruption) << store.status().ToString();
}

}  // namespace
}  // namespace fedmesh
