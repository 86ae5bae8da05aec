// Signed gossip models and the replay window: a valid signature verifies only for the
// signer, federation and exact fields it covers (each field tampered fails), unsigned or
// garbage signatures are refused, and replays (exact, reordered within the window, older
// than the window, after a restore) are caught while fresh sequence numbers pass.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/wire/wire_codec.h"
#include "crypto/identity.h"
#include "gossip/replay_window.h"
#include "gossip/signed_model.h"

namespace fedmesh {
namespace {

wire::GossipModel Sample() {
  wire::GossipModel m;
  m.kind = wire::GossipKind::kPush;
  m.sequence = 1'763'700'000'000'001u;
  m.step = 12;
  m.weight = 0.25;
  m.model = wire::FloatPayload(std::vector<float>{1.0f, -2.0f, 3.5f});
  return m;
}

TEST(SignedModel, VerifiesForTheSignerAndFederationOnly) {
  auto alice = Identity::Generate("alice").value();
  auto mallory = Identity::Generate("mallory").value();
  wire::GossipModel m = Sample();
  ASSERT_TRUE(SignModel(alice, "fed-a", &m).ok());
  EXPECT_EQ(m.signature.size(), 64u);
  EXPECT_TRUE(VerifyModel(alice.public_identity(), "fed-a", m).ok());
  // The same bytes claimed by another site, or replayed into another federation.
  EXPECT_EQ(VerifyModel(mallory.public_identity(), "fed-a", m).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(VerifyModel(alice.public_identity(), "fed-b", m).code(),
            StatusCode::kPermissionDenied);
  // Mallory signing with her key but naming alice as sender does not verify as alice.
  wire::GossipModel forged = Sample();
  ASSERT_TRUE(SignModel(mallory, "fed-a", &forged).ok());
  EXPECT_FALSE(VerifyModel(alice.public_identity(), "fed-a", forged).ok());
}

TEST(SignedModel, EveryCoveredFieldIsProtected) {
  auto alice = Identity::Generate("alice").value();
  wire::GossipModel signed_model = Sample();
  ASSERT_TRUE(SignModel(alice, "fed", &signed_model).ok());
  std::vector<std::pair<std::string, wire::GossipModel>> tampered;
  auto add = [&](std::string what, auto edit) {
    wire::GossipModel t = signed_model;
    edit(t);
    tampered.emplace_back(std::move(what), std::move(t));
  };
  add("sequence", [](auto& t) { t.sequence += 1; });
  add("kind", [](auto& t) { t.kind = wire::GossipKind::kExchange; });
  add("step", [](auto& t) { t.step = 13; });
  add("weight", [](auto& t) { t.weight = 0.5; });
  add("codec", [](auto& t) { t.model.codec = "zstd:3"; });
  add("element_count", [](auto& t) { t.model.element_count = 4; });
  add("shapes", [](auto& t) { t.model.shapes = {{3}}; });
  add("payload byte", [](auto& t) { t.model.bytes[5] ^= 1; });
  add("signature byte", [](auto& t) { t.signature[10] ^= 1; });
  add("model_sha256", [](auto& t) { t.model_sha256 = std::string(64, 'b'); });
  for (const auto& [what, t] : tampered) {
    Status s = VerifyModel(alice.public_identity(), "fed", t);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << what;
    EXPECT_NE(s.message().find("bad signature"), std::string::npos) << what << ": " << s.ToString();
  }
}

TEST(SignedModel, UnsignedOrMalformedSignaturesAreRefused) {
  auto alice = Identity::Generate("alice").value();
  wire::GossipModel m = Sample();
  Status s = VerifyModel(alice.public_identity(), "fed", m);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("unsigned"), std::string::npos);
  m.signature.assign(64, 0);
  EXPECT_FALSE(VerifyModel(alice.public_identity(), "fed", m).ok());
  m.signature.assign(63, 7);
  EXPECT_FALSE(VerifyModel(alice.public_identity(), "fed", m).ok());
}

TEST(ReplayWindow, AcceptsEachSequenceOnce) {
  ReplayWindow w;
  EXPECT_TRUE(w.Accept("a", 100));
  EXPECT_FALSE(w.Accept("a", 100));  // exact replay
  EXPECT_TRUE(w.Accept("a", 103));
  EXPECT_TRUE(w.Accept("a", 101));   // reordered, inside the window
  EXPECT_FALSE(w.Accept("a", 101));
  EXPECT_TRUE(w.Accept("a", 102));
  EXPECT_TRUE(w.Accept("b", 100));   // senders are independent
  EXPECT_EQ(w.highest("a"), 103u);
  EXPECT_TRUE(w.Accept("a", 103 + 200));
  EXPECT_FALSE(w.Accept("a", 104));  // older than the window: refused, cannot be told apart
  EXPECT_TRUE(w.Accept("a", 303 - 63));
  EXPECT_FALSE(w.Accept("a", 303 - 64));
}

TEST(ReplayWindow, RestoredHighWaterMarkRefusesEverythingAtOrBelowIt) {
  ReplayWindow w;
  w.Restore("a", 500);
  EXPECT_FALSE(w.Accept("a", 500));
  EXPECT_FALSE(w.Accept("a", 499));
  EXPECT_TRUE(w.Accept("a", 501));
  EXPECT_EQ(w.Highest().at("a"), 501u);
}

}  // namespace
}  // namespace fedmesh
