// The split-training checkpoints in a node store (node/split_checkpoint_store.h): what is
// saved and committed reads back equal after the store is reopened, only the newest two
// (and the committed one) are kept, and the model beside them is left alone.
#include <gtest/gtest.h>

#include <filesystem>

#include "node/split_checkpoint_store.h"

namespace fedmesh {
namespace {

vertical::PartyCheckpoint Make(uint64_t step) {
  vertical::PartyCheckpoint c;
  c.step = step;
  c.alignment = "ab12,cd34";
  c.rows = {7, 3, 70000, 1};
  c.params = {{1.5f, -2.0f, static_cast<float>(step)}, {0.25f}};
  c.velocity = {{0.1f, 0.2f, 0.3f}, {-0.5f}};
  return c;
}

TEST(NodeCheckpointStoreTest, SavedAndCommittedCheckpointsSurviveAReopen) {
  const std::string db =
      (std::filesystem::path(::testing::TempDir()) / ("split_ckpt_" + std::to_string(getpid()) + ".db")).string();
  std::filesystem::remove(db);
  {
    auto store = NodeStore::Open(db);
    ASSERT_TRUE(store.ok());
    NodeCheckpoint model;
    model.model = {9, 8, 7};
    model.attributes["model/graph_sha256"] = "x";
    ASSERT_TRUE((*store)->SaveCheckpoint(model).ok());
    auto cs = NodeCheckpointStore::Open(store->get());
    ASSERT_TRUE(cs.ok());
    ASSERT_TRUE((*cs)->Save(Make(10)).ok());
    ASSERT_TRUE((*cs)->Commit(10).ok());
    ASSERT_TRUE((*cs)->Save(Make(20)).ok());
    ASSERT_TRUE((*cs)->Save(Make(30)).ok());
    EXPECT_EQ((*cs)->Commit(99).code(), StatusCode::kNotFound);
  }
  auto store = NodeStore::Open(db);
  ASSERT_TRUE(store.ok());
  auto cs = NodeCheckpointStore::Open(store->get());
  ASSERT_TRUE(cs.ok());
  auto committed = (*cs)->Load(std::nullopt);
  ASSERT_TRUE(committed.ok() && committed->has_value());
  EXPECT_EQ(**committed, Make(10));
  for (uint64_t s : {20, 30}) {
    auto c = (*cs)->Load(s);
    ASSERT_TRUE(c.ok() && c->has_value()) << s;
    EXPECT_EQ(**c, Make(s));
  }
  ASSERT_TRUE((*cs)->Save(Make(40)).ok());
  EXPECT_FALSE((*cs)->Load(20)->has_value()) << "only the newest two and the committed one are kept";
  EXPECT_TRUE((*cs)->Load(10)->has_value());
  auto cp = (*store)->LoadCheckpoint();
  ASSERT_TRUE(cp.ok() && cp->has_value());
  EXPECT_EQ((*cp)->model, (std::vector<float>{9, 8, 7}));
  EXPECT_EQ((*cp)->attributes.at("model/graph_sha256"), "x");
  std::filesystem::remove(db);
}

}  // namespace
}  // namespace fedmesh
