// GossipNode security and life cycle, over the in-process network: two allowlisted sites
// join, pull and gossip; a signed model replayed verbatim, a model with a tampered
// payload, an unsigned model, one whose header names another sender or federation, and
// one from a site outside the allowlist are each dropped, counted by cause, and change
// nothing; a checkpoint restores the model, step, sequence numbers and peers.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "crypto/identity.h"
#include "gossip/gossip_node.h"
#include "gossip/signed_model.h"
#include "sim/in_process_network.h"
#include "sim/virtual_clock_env.h"

namespace fedmesh {
namespace {

class GossipNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"a", "b", "mallory"}) {
      ids_.emplace(name, Identity::Generate(name).value());
    }
    allow_ = {ids_.at("a").public_identity(), ids_.at("b").public_identity()};
    net_.SetHandler([this](const std::string& from, const std::string& to, wire::Message m) {
      if (to == "spy") {
        captured_.push_back(m);
        return;
      }
      auto it = nodes_.find(to);
      if (it != nodes_.end()) (void)it->second->OnMessage(from, m);
    });
  }

  GossipNode& Start(const std::string& id, std::vector<Seed> seeds, float init,
                    const NodeCheckpoint* restored = nullptr, std::string model_sha256 = "") {
    GossipNodeOptions o;
    o.federation_id = "fed";
    o.model_sha256 = std::move(model_sha256);
    o.period_s = 1.0;
    o.join_pull_timeout_s = 3.0;
    o.averaging.protocol = GossipProtocol::kPushPull;
    o.averaging.topology = Topology::kRandom;
    auto node = GossipNode::Create(o, ids_.at(id), "inproc://" + id, allow_, std::move(seeds),
                                   std::vector<float>(8, init), env_, restored);
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    nodes_[id] = std::move(*node);
    return *nodes_[id];
  }

  // Drives every node: timers, ticks (no training), and the network, until `t`.
  void RunUntil(double t) {
    while (env_.NowSeconds() < t) {
      for (auto& [id, node] : nodes_) {
        node->OnTimer();
        if (node->TickDue()) node->Tick();
        for (auto& s : node->TakeSends()) (void)net_.Send(id, Redirect(s.to), s.message);
      }
      net_.RunUntil(env_.NowSeconds() + 0.05);
    }
  }
  std::string Redirect(const std::string& to) { return spy_on_ == to ? "spy" : to; }

  VirtualClockEnv env_{7};
  InProcessNetwork net_{env_, LinkModel{}, 3};
  std::map<std::string, Identity> ids_;
  std::vector<PublicIdentity> allow_;
  std::map<std::string, std::unique_ptr<GossipNode>> nodes_;
  std::vector<wire::Message> captured_;
  std::string spy_on_;
};

TEST_F(GossipNodeTest, NewNodePullsTheRunningModelThenBothMix) {
  GossipNode& a = Start("a", {}, 1.0f);
  RunUntil(4.0);  // nobody to pull from: a starts on its own
  ASSERT_TRUE(a.running());
  GossipNode& b = Start("b", {Seed{"a", "inproc://a"}}, 5.0f);
  RunUntil(6.0);
  ASSERT_TRUE(b.running());
  EXPECT_EQ(a.peers_alive(), 1u);
  EXPECT_EQ(b.peers_alive(), 1u);
  // b adopted a's model instead of training from its own initial 5.0, and push-pull keeps
  // the two equal (both start from 1.0; no training here).
  EXPECT_EQ(b.params()[0], 1.0f);
  EXPECT_GE(b.step(), a.step() > 2 ? a.step() - 2 : 0);
  EXPECT_EQ(a.drops().total() + b.drops().total(), 0u);
}

TEST_F(GossipNodeTest, ReplayedTamperedUnsignedSpoofedAndOutsiderModelsAreDropped) {
  GossipNode& a = Start("a", {}, 1.0f);
  RunUntil(4.0);
  GossipNode& b = Start("b", {Seed{"a", "inproc://a"}}, 1.0f);
  RunUntil(6.0);
  // Capture one real signed model b sends to a.
  spy_on_ = "a";
  RunUntil(9.0);
  spy_on_.clear();
  const wire::Message* model = nullptr;
  for (const auto& m : captured_) {
    if (std::holds_alternative<wire::GossipModel>(m.body) && m.header.sender_id == "b") model = &m;
  }
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(a.OnMessage("b", *model).ok());  // delivered once: accepted
  const std::vector<float> before(a.params().begin(), a.params().end());

  Status replay = a.OnMessage("b", *model);
  EXPECT_EQ(replay.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(a.drops().replayed, 1u);

  wire::Message tampered = *model;
  auto& g = std::get<wire::GossipModel>(tampered.body);
  g.sequence += 1000;  // fresh number, but the signature covers it
  EXPECT_EQ(a.OnMessage("b", tampered).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(a.drops().bad_signature, 1u);

  wire::Message unsigned_model = *model;
  std::get<wire::GossipModel>(unsigned_model.body).signature.clear();
  std::get<wire::GossipModel>(unsigned_model.body).sequence += 2000;
  EXPECT_FALSE(a.OnMessage("b", unsigned_model).ok());
  EXPECT_EQ(a.drops().unsigned_model, 1u);

  EXPECT_FALSE(a.OnMessage("mallory-relay", *model).ok());  // header says b, link says other
  EXPECT_EQ(a.drops().spoofed_sender, 1u);
  wire::Message other_fed = *model;
  other_fed.header.federation_id = "other";
  EXPECT_FALSE(a.OnMessage("b", other_fed).ok());
  EXPECT_EQ(a.drops().wrong_federation, 1u);

  // Mallory signs a well-formed model with her own real key: not in the allowlist.
  wire::Message outsider = *model;
  outsider.header.sender_id = "mallory";
  auto& og = std::get<wire::GossipModel>(outsider.body);
  og.sequence += 3000;
  ASSERT_TRUE(SignModel(ids_.at("mallory"), "fed", &og).ok());
  EXPECT_EQ(a.OnMessage("mallory", outsider).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(a.drops().not_allowlisted, 1u);

  EXPECT_EQ(std::vector<float>(a.params().begin(), a.params().end()), before);
  EXPECT_EQ(a.drops().total(), 6u);
  (void)b;
}

// Issue 18: peers that run different model graphs never mix: each drops the other's
// models (signed, well-formed, allowlisted) as wrong_model, and keeps its own values.
TEST_F(GossipNodeTest, PeersWithAnotherGraphHashAreNotMixed) {
  GossipNode& a = Start("a", {}, 1.0f, nullptr, std::string(64, 'a'));
  RunUntil(4.0);
  GossipNode& b = Start("b", {Seed{"a", "inproc://a"}}, 5.0f, nullptr, std::string(64, 'b'));
  RunUntil(12.0);
  EXPECT_GT(a.drops().wrong_model + b.drops().wrong_model, 0u);
  EXPECT_EQ(a.drops().bad_signature + b.drops().bad_signature, 0u);
  for (float v : a.params()) EXPECT_EQ(v, 1.0f);
  for (float v : b.params()) EXPECT_EQ(v, 5.0f);
}

TEST_F(GossipNodeTest, CheckpointRestoresModelStepSequenceAndPeers) {
  GossipNode& a = Start("a", {}, 2.5f);
  RunUntil(4.0);
  Start("b", {Seed{"a", "inproc://a"}}, 1.0f);
  RunUntil(8.0);
  const NodeCheckpoint cp = a.Checkpoint();
  EXPECT_EQ(cp.model_version, a.step());
  EXPECT_EQ(cp.model, std::vector<float>(a.params().begin(), a.params().end()));
  ASSERT_TRUE(cp.attributes.contains("gossip/sequence"));
  ASSERT_TRUE(cp.attributes.contains("gossip/members"));
  EXPECT_NE(cp.attributes.at("gossip/members").find("b inproc://b"), std::string::npos);
  EXPECT_NE(cp.attributes.at("gossip/replay").find("b "), std::string::npos);
  const uint64_t step = a.step();
  nodes_.erase("a");  // crash
  GossipNode& again = Start("a", {}, 9.0f, &cp);
  EXPECT_TRUE(again.running());  // resumes at once, no pull
  EXPECT_EQ(again.step(), step);
  EXPECT_EQ(again.params()[0], cp.model[0]);
  EXPECT_EQ(again.peers_alive(), 1u);  // b restored from the checkpoint
  NodeCheckpoint bad = cp;
  bad.attributes["gossip/members"] = "b only-two-fields\n";
  GossipNodeOptions o;
  o.federation_id = "fed";
  auto refused = GossipNode::Create(o, ids_.at("a"), "inproc://a", allow_, {},
                                    std::vector<float>(8, 0.0f), env_, &bad);
  EXPECT_EQ(refused.status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace fedmesh
