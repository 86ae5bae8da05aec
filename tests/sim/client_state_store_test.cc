#include "sim/client_state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "storage/sqlite/database.h"
#include "tests/storage/temp_dir.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTempDir;

std::vector<float> RandomFloats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A state whose three fields have sizes and contents that differ from client to client,
// so a row handed back for the wrong client cannot pass. Odd clients have no momentum,
// which exercises empty blobs.
ClientState MakeState(uint64_t client, size_t residual_floats = 1000) {
  std::mt19937 rng(static_cast<uint32_t>(client) * 7919u + 1u);
  ClientState s;
  if (client % 2 == 0) s.velocity = RandomFloats(rng, residual_floats + client);
  s.residual = RandomFloats(rng, residual_floats);
  s.dgc_velocity = RandomFloats(rng, 17 + client);
  return s;
}

void ExpectSameState(const ClientState& got, const ClientState& want) {
  EXPECT_EQ(got.velocity, want.velocity);
  EXPECT_EQ(got.residual, want.residual);
  EXPECT_EQ(got.dgc_velocity, want.dgc_velocity);
}

std::unique_ptr<ClientStateStore> MustCreate(ClientStateStoreOptions options) {
  auto store = ClientStateStore::Create(std::move(options));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

ClientState MustTake(ClientStateStore& store, uint64_t client) {
  auto state = store.Take(client);
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  return state.ok() ? std::move(state).value() : ClientState{};
}

TEST(ClientStateStoreTest, StateSizeCountsAllThreeBuffers) {
  ClientState s;
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.bytes(), 0u);
  s.residual.resize(3);
  s.dgc_velocity.resize(2);
  EXPECT_FALSE(s.empty());
  EXPECT_EQ(s.bytes(), 20u);
}

TEST(ClientStateStoreTest, PutTakeRoundTripInMemory) {
  auto store = MustCreate({});
  ASSERT_NE(store, nullptr);
  const ClientState want = MakeState(4);
  ASSERT_TRUE(store->Put(4, want).ok());
  EXPECT_EQ(store->size(), 1u);
  EXPECT_EQ(store->spilled(), 0u);
  EXPECT_EQ(store->bytes_in_memory(), want.bytes());

  ExpectSameState(MustTake(*store, 4), want);
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(store->bytes_in_memory(), 0u);
  EXPECT_TRUE(MustTake(*store, 4).empty());  // Take removed it
}

TEST(ClientStateStoreTest, TakeOfUnknownClientIsEmpty) {
  auto store = MustCreate({});
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put(1, MakeState(1)).ok());
  EXPECT_TRUE(MustTake(*store, 2).empty());
  EXPECT_EQ(store->size(), 1u);
}

TEST(ClientStateStoreTest, SpillsLeastRecentlyPutStatesBeyondTheBudget) {
  // Same-sized states (odd clients, fixed dgc size) so "3 states worth" is exact.
  auto make = [](uint64_t c) {
    ClientState s = MakeState(c);
    s.velocity.clear();
    s.dgc_velocity.resize(32, 0.5f);
    return s;
  };
  const size_t one = make(0).bytes();
  ClientStateStoreOptions options;
  options.memory_budget_bytes = 3 * one;
  auto store = MustCreate(options);
  ASSERT_NE(store, nullptr);

  std::vector<ClientState> want;
  for (uint64_t c = 0; c < 10; ++c) {
    want.push_back(make(c));
    ASSERT_TRUE(store->Put(c, want.back()).ok());
  }
  EXPECT_EQ(store->size(), 10u);
  EXPECT_EQ(store->spilled(), 7u);
  EXPECT_LE(store->bytes_in_memory(), options.memory_budget_bytes);
  EXPECT_EQ(store->bytes_in_memory(), 3 * one);

  // The three most recently Put (7, 8, 9) are in memory, the oldest on disk.
  ExpectSameState(MustTake(*store, 9), want[9]);
  EXPECT_EQ(store->spilled(), 7u);
  ExpectSameState(MustTake(*store, 0), want[0]);
  EXPECT_EQ(store->spilled(), 6u);
  for (uint64_t c = 1; c < 9; ++c) ExpectSameState(MustTake(*store, c), want[c]);
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(store->spilled(), 0u);
  EXPECT_EQ(store->bytes_in_memory(), 0u);
}

TEST(ClientStateStoreTest, PutReplacesInMemoryAndSpilledStates) {
  const size_t one = MakeState(1).bytes();
  ClientStateStoreOptions options;
  options.memory_budget_bytes = one;  // room for client 1's state only
  auto store = MustCreate(options);
  ASSERT_NE(store, nullptr);

  ASSERT_TRUE(store->Put(1, MakeState(1)).ok());
  ASSERT_TRUE(store->Put(3, MakeState(3, 900)).ok());  // spills 1
  ASSERT_EQ(store->spilled(), 1u);

  // Replacing the spilled state brings the new one into memory and spills 3.
  ClientState new1 = MakeState(101, 10);
  ASSERT_TRUE(store->Put(1, new1).ok());
  EXPECT_EQ(store->size(), 2u);
  EXPECT_EQ(store->spilled(), 1u);
  EXPECT_EQ(store->bytes_in_memory(), new1.bytes());

  // Replacing the in-memory state.
  ClientState newer1 = MakeState(201, 20);
  ASSERT_TRUE(store->Put(1, newer1).ok());
  EXPECT_EQ(store->size(), 2u);
  EXPECT_EQ(store->bytes_in_memory(), newer1.bytes());

  ExpectSameState(MustTake(*store, 1), newer1);
  ExpectSameState(MustTake(*store, 3), MakeState(3, 900));
  EXPECT_EQ(store->size(), 0u);
}

TEST(ClientStateStoreTest, EmptyPutErasesInMemoryAndSpilledStates) {
  ClientStateStoreOptions options;
  options.memory_budget_bytes = MakeState(3).bytes();  // room for one of the two
  auto store = MustCreate(options);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put(1, MakeState(1)).ok());
  ASSERT_TRUE(store->Put(3, MakeState(3)).ok());  // spills 1
  ASSERT_EQ(store->spilled(), 1u);

  ASSERT_TRUE(store->Put(1, ClientState{}).ok());
  EXPECT_EQ(store->spilled(), 0u);
  ASSERT_TRUE(store->Put(3, ClientState{}).ok());
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(store->bytes_in_memory(), 0u);
  EXPECT_TRUE(MustTake(*store, 1).empty());
  EXPECT_TRUE(MustTake(*store, 3).empty());
}

TEST(ClientStateStoreTest, StateLargerThanTheBudgetGoesStraightToDisk) {
  ClientStateStoreOptions options;
  options.memory_budget_bytes = MakeState(1, 100).bytes();
  auto store = MustCreate(options);
  ASSERT_NE(store, nullptr);
  const ClientState small = MakeState(1, 100);
  const ClientState big = MakeState(2, 50000);
  ASSERT_TRUE(store->Put(1, small).ok());
  ASSERT_TRUE(store->Put(2, big).ok());
  // The big one did not push the small one out.
  EXPECT_EQ(store->spilled(), 1u);
  EXPECT_EQ(store->bytes_in_memory(), small.bytes());

  ExpectSameState(MustTake(*store, 2), big);
  EXPECT_EQ(store->spilled(), 0u);
  ExpectSameState(MustTake(*store, 1), small);
}

TEST(ClientStateStoreTest, DefaultSpillFileIsTemporaryAndRemoved) {
  std::string path;
  {
    auto store = MustCreate({});
    ASSERT_NE(store, nullptr);
    path = store->spill_path();
    EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::temp_directory_path());
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ClientStateStoreTest, ExplicitSpillPathIsTruncatedAndRemoved) {
  ScopedTempDir dir;
  const std::string path = dir.Path("spill.db");
  { std::ofstream(path) << "left over from an earlier run, not a database"; }
  {
    ClientStateStoreOptions options;
    options.spill_path = path;
    options.memory_budget_bytes = 0;  // everything on disk
    auto store = MustCreate(options);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->size(), 0u);
    ASSERT_TRUE(store->Put(5, MakeState(5)).ok());
    EXPECT_EQ(store->spilled(), 1u);
    EXPECT_TRUE(std::filesystem::exists(path));
    ExpectSameState(MustTake(*store, 5), MakeState(5));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ClientStateStoreTest, UnwritableSpillPathFailsCreate) {
  ClientStateStoreOptions options;
  options.spill_path = "/nonexistent-dir/x.db";
  auto store = ClientStateStore::Create(options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kNotFound) << store.status().ToString();
  EXPECT_THAT(store.status().message(), HasSubstr("/nonexistent-dir/x.db: its directory /nonexistent-dir does not exist"));
}

TEST(ClientStateStoreTest, DamagedSpilledRowIsCorruptionNamingTheClient) {
  ScopedTempDir dir;
  ClientStateStoreOptions options;
  options.spill_path = dir.Path("spill.db");
  options.memory_budget_bytes = 0;
  auto store = MustCreate(options);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put(7, MakeState(7)).ok());
  ASSERT_TRUE(store->Put(8, MakeState(8)).ok());
  ASSERT_EQ(store->spilled(), 2u);

  {  // A second connection damages the rows behind the store's back.
    DatabaseOptions db_options;
    db_options.wal = false;
    auto db = Database::Open(options.spill_path, db_options);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_TRUE(
        (*db)->Exec("UPDATE client_state SET residual = x'0102030405' WHERE client = 7").ok());
    ASSERT_TRUE((*db)->Exec("DELETE FROM client_state WHERE client = 8").ok());
  }

  auto damaged = store->Take(7);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(damaged.status().message(), HasSubstr("client 7"));
  EXPECT_THAT(damaged.status().message(), HasSubstr("5 bytes"));
  auto missing = store->Take(8);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(missing.status().message(), HasSubstr("client 8"));

  // The damaged row is kept until the caller drops it with an empty Put.
  EXPECT_EQ(store->size(), 2u);
  ASSERT_TRUE(store->Put(7, ClientState{}).ok());
  ASSERT_TRUE(store->Put(8, ClientState{}).ok());
  EXPECT_EQ(store->size(), 0u);
  EXPECT_TRUE(MustTake(*store, 7).empty());
}

}  // namespace
}  // namespace fedmesh
