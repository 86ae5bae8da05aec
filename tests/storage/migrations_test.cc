#include "storage/sqlite/migrations.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "storage/sqlite/database.h"
#include "tests/storage/temp_dir.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTempDir;

// Each step also records itself in applied_steps: a step that ran twice shows up twice.
const std::vector<std::string> kStepsV2 = {
    "CREATE TABLE applied_steps(step INTEGER);"
    "CREATE TABLE rounds(id INTEGER PRIMARY KEY, model_version INTEGER NOT NULL);"
    "INSERT INTO applied_steps VALUES (1);",
    "ALTER TABLE rounds ADD COLUMN quorum INTEGER NOT NULL DEFAULT 0;"
    "INSERT INTO applied_steps VALUES (2);",
};
std::vector<std::string> StepsV3() {
  std::vector<std::string> steps = kStepsV2;
  steps.push_back(
      "CREATE INDEX rounds_by_version ON rounds(model_version);"
      "INSERT INTO applied_steps VALUES (3);");
  return steps;
}

class MigrationsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Database> Open() {
    auto db = Database::Open(path_, {});
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? std::move(db).value() : nullptr;
  }
  static int Version(Database& db) {
    auto v = db.UserVersion();
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : -1;
  }
  static std::string AppliedSteps(Database& db) {
    auto stmt = db.Prepare(
        "SELECT group_concat(step, ',') FROM (SELECT step FROM applied_steps ORDER BY rowid)");
    EXPECT_TRUE(stmt.ok()) << stmt.status().ToString();
    if (!stmt.ok()) return "";
    auto row = stmt->Step();
    EXPECT_TRUE(row.ok() && *row);
    return std::string(stmt->ColumnText(0));
  }

  ScopedTempDir dir_;
  const std::string path_ = dir_.Path("aggregator.db");
};

TEST_F(MigrationsTest, AppliesEveryStepToANewDatabase) {
  auto db = Open();
  ASSERT_NE(db, nullptr);
  Status s = Migrate(*db, kStepsV2);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Version(*db), 2);
  EXPECT_EQ(AppliedSteps(*db), "1,2");
  EXPECT_TRUE(db->Exec("INSERT INTO rounds(id, model_version, quorum) VALUES (1, 1, 3)").ok());
}

TEST_F(MigrationsTest, IdempotentAcrossReopen) {
  {
    auto db = Open();
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(Migrate(*db, kStepsV2).ok());
    ASSERT_TRUE(db->Exec("INSERT INTO rounds(id, model_version) VALUES (1, 9)").ok());
    ASSERT_TRUE(Migrate(*db, kStepsV2).ok());  // same connection, nothing to do
  }
  auto db = Open();
  ASSERT_NE(db, nullptr);
  Status s = Migrate(*db, kStepsV2);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Version(*db), 2);
  EXPECT_EQ(AppliedSteps(*db), "1,2") << "no step may run twice";
  auto stmt = db->Prepare("SELECT model_version FROM rounds WHERE id = 1");
  ASSERT_TRUE(stmt.ok());
  ASSERT_TRUE(*stmt->Step());
  EXPECT_EQ(stmt->ColumnInt64(0), 9) << "data survives a re-run of Migrate";
}

TEST_F(MigrationsTest, NewerCodeAppliesOnlyTheNewSteps) {
  {
    auto db = Open();
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(Migrate(*db, kStepsV2).ok());
  }
  auto db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db, StepsV3()).ok());
  EXPECT_EQ(Version(*db), 3);
  EXPECT_EQ(AppliedSteps(*db), "1,2,3");
}

TEST_F(MigrationsTest, DatabaseFromNewerBinaryIsRefusedUntouched) {
  auto db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->SetUserVersion(5).ok());
  Status s = Migrate(*db, StepsV3());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), path_ +
                             ": database schema version 5 is newer than this binary supports "
                             "(3); upgrade fedmesh");
  EXPECT_EQ(Version(*db), 5);
  EXPECT_FALSE(db->Prepare("SELECT * FROM applied_steps").ok()) << "no step may have run";
}

TEST_F(MigrationsTest, FailingStepRollsBackAndKeepsEarlierSteps) {
  std::vector<std::string> steps = kStepsV2;
  steps.push_back("CREATE TABLE half_done(x); INSERT INTO no_such_table VALUES (1);");
  auto db = Open();
  ASSERT_NE(db, nullptr);
  Status s = Migrate(*db, steps);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("migration step 3 of 3 failed"));
  EXPECT_THAT(s.message(), HasSubstr("no such table: no_such_table"));
  EXPECT_EQ(Version(*db), 2);
  EXPECT_EQ(AppliedSteps(*db), "1,2");
  EXPECT_FALSE(db->Prepare("SELECT * FROM half_done").ok()) << "the failed step left a table";
  EXPECT_FALSE(db->InTransaction());
}

TEST_F(MigrationsTest, ConcurrentMigratorsRunEachStepOnce) {
  // Several processes (here: connections on threads) starting at once on a new file.
  constexpr int kMigrators = 6;
  std::vector<Status> results(kMigrators);
  std::vector<std::thread> threads;
  for (int i = 0; i < kMigrators; ++i) {
    threads.emplace_back([&, i] {
      auto db = Database::Open(path_, {});
      results[i] = db.ok() ? Migrate(**db, StepsV3()) : db.status();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kMigrators; ++i) EXPECT_TRUE(results[i].ok()) << results[i].ToString();
  auto db = Open();
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(Version(*db), 3);
  EXPECT_EQ(AppliedSteps(*db), "1,2,3");
}

TEST_F(MigrationsTest, NoStepsLeavesVersionZero) {
  auto db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db, {}).ok());
  EXPECT_EQ(Version(*db), 0);
}

}  // namespace
}  // namespace fedmesh
