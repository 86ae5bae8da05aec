#include "storage/node_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/sha256.h"
#include "storage/aggregator_store.h"
#include "storage/sqlite/database.h"
#include "tests/storage/temp_dir.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTempDir;

std::vector<float> Values(uint32_t seed, size_t n) {
  std::vector<float> v(n);
  uint32_t x = seed * 2246822519u + 7u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<float>(static_cast<int32_t>(x)) / 3e8f;
  }
  if (n > 1) v[1] = -0.0f;
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

NodeCheckpoint Sample() {
  NodeCheckpoint cp;
  cp.model_version = 42;
  cp.model = Values(1, 5000);
  cp.velocity = Values(2, 5000);
  cp.last_round_served = 41;
  cp.tensors["codec/topk_residual"] = Values(3, 5000);
  cp.tensors["empty"] = {};
  cp.attributes["gossip/sequence"] = "1763700000000123";
  cp.attributes["gossip/members"] = "site-1 tcp://127.0.0.1:7001 ...\nsite-2 ...\n";
  cp.attributes["empty"] = "";
  return cp;
}

// Turns a current store file's tensors' digests back into what schema v2 wrote: SHA-256.
void DigestsBackToSha256(Database& db) {
  auto rows = db.Prepare("SELECT id, data FROM tensors");
  ASSERT_TRUE(rows.ok());
  std::vector<std::pair<int64_t, Sha256Digest>> digests;
  for (;;) {
    auto row = rows->Step();
    ASSERT_TRUE(row.ok());
    if (!*row) break;
    digests.emplace_back(rows->ColumnInt64(0), Sha256::Hash(rows->ColumnBlob(1)));
  }
  for (const auto& [id, digest] : digests) {
    auto set = db.Prepare("UPDATE tensors SET sha256 = ? WHERE id = ?");
    ASSERT_TRUE(set.ok());
    ASSERT_TRUE(set->BindAll(std::span<const uint8_t>(digest), id).ok());
    ASSERT_TRUE(set->Run().ok());
  }
}

class NodeStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<NodeStore> Open() {
    auto store = NodeStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  // Flips one bit of the tensor row matched by `where`, through plain SQL.
  void CorruptTensor(const std::string& where) {
    auto db = Database::Open(path_, DatabaseOptions{});
    ASSERT_TRUE(db.ok());
    auto sel = (*db)->Prepare("SELECT data FROM tensors WHERE " + where);
    ASSERT_TRUE(sel.ok());
    ASSERT_TRUE(*sel->Step());
    std::vector<uint8_t> bytes(sel->ColumnBlob(0).begin(), sel->ColumnBlob(0).end());
    sel->Reset();
    ASSERT_FALSE(bytes.empty());
    bytes[bytes.size() / 2] ^= 0x10;
    auto upd = (*db)->Prepare("UPDATE tensors SET data = ? WHERE " + where);
    ASSERT_TRUE(upd.ok());
    ASSERT_TRUE(upd->Bind(1, std::span<const uint8_t>(bytes)).ok());
    ASSERT_TRUE(upd->Run().ok());
    ASSERT_EQ((*db)->ChangedRows(), 1);
  }

  ScopedTempDir dir_;
  const std::string path_ = dir_.Path("node.db");
};

TEST_F(NodeStoreTest, NewStoreHasNoCheckpoint) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto cp = store->LoadCheckpoint();
  ASSERT_TRUE(cp.ok()) << cp.status().ToString();
  EXPECT_FALSE(cp->has_value());
}

TEST_F(NodeStoreTest, CheckpointRoundTripsBitExactAcrossReopen) {
  const NodeCheckpoint saved = Sample();
  {
    auto store = Open();
    Status s = store->SaveCheckpoint(saved);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  auto cp = Open()->LoadCheckpoint();
  ASSERT_TRUE(cp.ok()) << cp.status().ToString();
  ASSERT_TRUE(cp->has_value());
  EXPECT_EQ((*cp)->model_version, 42u);
  EXPECT_EQ((*cp)->last_round_served, std::optional<uint64_t>(41));
  EXPECT_TRUE(SameBits((*cp)->model, saved.model));
  EXPECT_TRUE(SameBits((*cp)->velocity, saved.velocity));
  ASSERT_EQ((*cp)->tensors.size(), 2u);
  EXPECT_TRUE(
      SameBits((*cp)->tensors.at("codec/topk_residual"), saved.tensors.at("codec/topk_residual")));
  EXPECT_TRUE((*cp)->tensors.at("empty").empty());
  EXPECT_EQ((*cp)->attributes, saved.attributes);
}

TEST_F(NodeStoreTest, AttributesSavedAloneSurviveWithAndWithoutACheckpoint) {
  {
    auto store = Open();
    ASSERT_TRUE(store->SaveAttributes({{"privacy/steps", "7"}, {"privacy/rdp", "0.5,1"}}).ok());
    ASSERT_TRUE(store->SaveAttributes({{"privacy/steps", "9"}}).ok());  // upsert, others kept
    EXPECT_FALSE(store->SaveAttributes({{"", "x"}}).ok());
  }
  auto store = Open();
  auto cp = store->LoadCheckpoint();
  ASSERT_TRUE(cp.ok());
  EXPECT_FALSE(cp->has_value());  // attributes alone are not a checkpoint
  auto a = store->LoadAttributes();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, (std::map<std::string, std::string>{{"privacy/rdp", "0.5,1"}, {"privacy/steps", "9"}}));
  // A checkpoint replaces every attribute: the one saved here holds the new value.
  NodeCheckpoint next = Sample();
  next.attributes["privacy/steps"] = "11";
  ASSERT_TRUE(store->SaveCheckpoint(next).ok());
  a = store->LoadAttributes();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->at("privacy/steps"), "11");
  EXPECT_EQ(a->count("privacy/rdp"), 0u);
  ASSERT_TRUE(store->SaveAttributes({{"privacy/rdp", "2"}}).ok());
  auto loaded = store->LoadCheckpoint();
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  EXPECT_EQ((*loaded)->attributes.at("privacy/rdp"), "2");
  EXPECT_EQ((*loaded)->model_version, 42u);
}

TEST_F(NodeStoreTest, VersionOneFileIsMigratedAndKeepsItsCheckpoint) {
  {  // a store as schema v1 left it: no attributes table
    auto store = Open();
    NodeCheckpoint v1 = Sample();
    v1.attributes.clear();
    ASSERT_TRUE(store->SaveCheckpoint(v1).ok());
  }
  {
    auto db = Database::Open(path_, DatabaseOptions{});
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec("DROP TABLE attributes").ok());
    DigestsBackToSha256(**db);
    ASSERT_TRUE((*db)->SetUserVersion(1).ok());
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto cp = store->LoadCheckpoint();
  ASSERT_TRUE(cp.ok() && cp->has_value()) << cp.status().ToString();
  EXPECT_EQ((*cp)->model_version, 42u);
  EXPECT_TRUE((*cp)->attributes.empty());
  ASSERT_TRUE(store->SaveCheckpoint(Sample()).ok());  // the new table works
  EXPECT_EQ((*store->LoadCheckpoint())->attributes, Sample().attributes);
}

// A v2 file (SHA-256 digests, before BLAKE3) is migrated: its checkpoint reads and checks
// with SHA-256, damage included; the next save writes BLAKE3.
TEST_F(NodeStoreTest, VersionTwoFileKeepsItsSha256CheckpointAndSavesBlake3) {
  { ASSERT_TRUE(Open()->SaveCheckpoint(Sample()).ok()); }
  {
    auto db = Database::Open(path_, DatabaseOptions{});
    ASSERT_TRUE(db.ok());
    DigestsBackToSha256(**db);
    ASSERT_TRUE((*db)->SetUserVersion(2).ok());
  }
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    auto cp = store->LoadCheckpoint();
    ASSERT_TRUE(cp.ok() && cp->has_value()) << cp.status().ToString();
    EXPECT_TRUE(SameBits((*cp)->model, Sample().model));
    EXPECT_TRUE(SameBits((*cp)->tensors.at("codec/topk_residual"), Sample().tensors.at("codec/topk_residual")));
  }
  CorruptTensor("kind = 'velocity'");
  auto bad = Open()->LoadCheckpoint();
  ASSERT_EQ(bad.status().code(), StatusCode::kCorruption) << bad.status().ToString();
  EXPECT_THAT(bad.status().message(), HasSubstr("the sha256 of its values is"));
  ASSERT_TRUE(Open()->SaveCheckpoint(Sample()).ok());
  auto db = Database::Open(path_, DatabaseOptions{});
  ASSERT_TRUE(db.ok());
  auto kinds = (*db)->Prepare("SELECT count(*) FROM tensors WHERE length(sha256) = 33");
  ASSERT_TRUE(kinds.ok() && *kinds->Step());
  EXPECT_EQ(kinds->ColumnInt64(0), 4);  // model, velocity, two named tensors
}

TEST_F(NodeStoreTest, SaveReplacesTheWholeCheckpoint) {
  auto store = Open();
  ASSERT_TRUE(store->SaveCheckpoint(Sample()).ok());
  NodeCheckpoint next;
  next.model_version = 43;
  next.model = Values(9, 10);  // no velocity, no tensors, no round served
  ASSERT_TRUE(store->SaveCheckpoint(next).ok());
  auto cp = store->LoadCheckpoint();
  ASSERT_TRUE(cp.ok() && cp->has_value()) << cp.status().ToString();
  EXPECT_EQ(**cp, next);
  NodeCheckpoint bad = next;
  bad.tensors[""] = {1.0f};
  EXPECT_EQ(store->SaveCheckpoint(bad).code(), StatusCode::kInvalidArgument);
  bad = next;
  bad.attributes[""] = "x";
  EXPECT_EQ(store->SaveCheckpoint(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(**store->LoadCheckpoint(), next);  // the refused save changed nothing
}

TEST_F(NodeStoreTest, LargeModelRoundTrips) {
  NodeCheckpoint cp;
  cp.model_version = 1;
  cp.model = Values(5, 3'000'000);
  cp.velocity = Values(6, 3'000'000);
  { ASSERT_TRUE(Open()->SaveCheckpoint(cp).ok()); }
  auto loaded = Open()->LoadCheckpoint();
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status().ToString();
  EXPECT_TRUE(SameBits((*loaded)->model, cp.model));
  EXPECT_TRUE(SameBits((*loaded)->velocity, cp.velocity));
}

TEST_F(NodeStoreTest, CorruptedModelIsCorruptionNamingIt) {
  { ASSERT_TRUE(Open()->SaveCheckpoint(Sample()).ok()); }
  CorruptTensor("kind = 'model'");
  auto cp = Open()->LoadCheckpoint();
  ASSERT_EQ(cp.status().code(), StatusCode::kCorruption) << cp.status().ToString();
  EXPECT_THAT(cp.status().message(), HasSubstr("model version 42"));
  EXPECT_THAT(cp.status().message(), HasSubstr(path_));
}

TEST_F(NodeStoreTest, CorruptedVelocityAndNamedTensorAreCorruption) {
  { ASSERT_TRUE(Open()->SaveCheckpoint(Sample()).ok()); }
  CorruptTensor("kind = 'velocity'");
  auto cp = Open()->LoadCheckpoint();
  ASSERT_EQ(cp.status().code(), StatusCode::kCorruption) << cp.status().ToString();
  EXPECT_THAT(cp.status().message(), HasSubstr("optimizer velocity"));

  { ASSERT_TRUE(Open()->SaveCheckpoint(Sample()).ok()); }  // a fresh save repairs it
  ASSERT_TRUE(Open()->LoadCheckpoint().ok());
  CorruptTensor("name = 'codec/topk_residual'");
  cp = Open()->LoadCheckpoint();
  ASSERT_EQ(cp.status().code(), StatusCode::kCorruption) << cp.status().ToString();
  EXPECT_THAT(cp.status().message(), HasSubstr("codec/topk_residual"));
}

TEST_F(NodeStoreTest, DatabaseFromNewerSchemaIsRefusedWithUpgradeMessage) {
  { ASSERT_NE(Open(), nullptr); }
  {
    auto db = Database::Open(path_, DatabaseOptions{});
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->SetUserVersion(7).ok());
  }
  auto store = NodeStore::Open(path_);
  ASSERT_EQ(store.status().code(), StatusCode::kFailedPrecondition) << store.status().ToString();
  EXPECT_THAT(store.status().message(), HasSubstr("upgrade fedmesh"));
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
}

TEST_F(NodeStoreTest, AggregatorStoreFileIsRefused) {
  { ASSERT_TRUE(AggregatorStore::Open(path_).ok()); }
  auto store = NodeStore::Open(path_);
  ASSERT_EQ(store.status().code(), StatusCode::kFailedPrecondition) << store.status().ToString();
  EXPECT_THAT(store.status().message(),
              HasSubstr("is a fedmesh aggregator store, not a fedmesh node store"));
}

}  // namespace
}  // namespace fedmesh
