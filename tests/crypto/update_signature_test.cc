// Issue 26 item 7: updates in aggregator mode are signed by their site.
#include "crypto/update_signature.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/sha256.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {

wire::FitResult Update() {
  wire::FitResult r;
  r.round = 4;
  r.num_examples = 120;
  r.train_loss = 0.25;
  r.update = wire::FloatPayload(std::vector<float>{0.5f, -1.0f, 2.0f});
  r.bytes_before_codec = r.bytes_after_codec = r.update.bytes.size();
  return r;
}

TEST(UpdateSignature, SignedUpdateVerifiesAndAnyChangeBreaksIt) {
  Identity site = Identity::Generate("site-a").value();
  Identity other = Identity::Generate("site-b").value();
  wire::FitResult r = Update();
  EXPECT_EQ(VerifyUpdate(site.public_identity(), "fed", 3, r).code(),
            StatusCode::kPermissionDenied);  // unsigned
  ASSERT_TRUE(SignUpdate(site, "fed", 3, &r).ok());
  ASSERT_EQ(r.signature.size(), 64u);
  EXPECT_TRUE(VerifyUpdate(site.public_identity(), "fed", 3, r).ok());

  // Another site's key, federation, model version, weight or byte: refused.
  EXPECT_FALSE(VerifyUpdate(other.public_identity(), "fed", 3, r).ok());
  EXPECT_FALSE(VerifyUpdate(site.public_identity(), "fed-2", 3, r).ok());
  EXPECT_FALSE(VerifyUpdate(site.public_identity(), "fed", 4, r).ok());
  wire::FitResult heavier = r;
  heavier.num_examples = 1000000000;
  auto weight = VerifyUpdate(site.public_identity(), "fed", 3, heavier);
  EXPECT_EQ(weight.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(weight.message().find("bad signature"), std::string::npos) << weight.ToString();
  wire::FitResult flipped = r;
  flipped.update.bytes[0] ^= 1;
  flipped.update.digest.reset();  // as the bytes arrive: a receiver hashes what it got
  EXPECT_FALSE(VerifyUpdate(site.public_identity(), "fed", 3, flipped).ok());
  // A relay that re-signs with its own key cannot pass as the site.
  wire::FitResult resigned = heavier;
  ASSERT_TRUE(SignUpdate(other, "fed", 3, &resigned).ok());
  EXPECT_FALSE(VerifyUpdate(site.public_identity(), "fed", 3, resigned).ok());
}

TEST(UpdateSignature, TheReceiversVerifiedDigestIsUsed) {
  Identity site = Identity::Generate("site-a").value();
  wire::FitResult r = Update();
  ASSERT_TRUE(SignUpdate(site, "fed", 0, &r).ok());
  r.update.digest = HashPayload(wire::DigestKind::kBlake3, r.update.bytes);  // as the Reassembler sets it
  EXPECT_TRUE(VerifyUpdate(site.public_identity(), "fed", 0, r).ok());
  r.update.digest->bytes.at(0) ^= 1;
  EXPECT_FALSE(VerifyUpdate(site.public_identity(), "fed", 0, r).ok());
}

// A site answering a task that came with SHA-256 (an aggregator built before BLAKE3) signs
// the "fedmesh/update/v1" bytes over the SHA-256, which such an aggregator checks; the kind
// is part of what is signed, so relabelling the digest breaks the signature.
TEST(UpdateSignature, Sha256SignaturesKeepTheFormatBeforeBlake3) {
  Identity site = Identity::Generate("site-a").value();
  wire::FitResult r = Update();
  ASSERT_TRUE(SignUpdate(site, "fed", 3, &r, wire::DigestKind::kSha256).ok());
  ASSERT_TRUE(r.update.digest.has_value());
  EXPECT_EQ(r.update.digest->kind, wire::DigestKind::kSha256);
  EXPECT_EQ(r.update.digest->bytes, Sha256::Hash(r.update.bytes));
  EXPECT_TRUE(VerifyUpdate(site.public_identity(), "fed", 3, r).ok());
  const std::vector<uint8_t> signed_bytes =
      UpdateSigningBytes("fed", "site-a", 3, r, *r.update.digest);
  const std::string_view v1 = "fedmesh/update/v1";
  ASSERT_GT(signed_bytes.size(), 8 + v1.size() + 32);
  EXPECT_EQ(std::string(signed_bytes.begin() + 8, signed_bytes.begin() + 8 + v1.size()), v1);
  EXPECT_TRUE(std::equal(signed_bytes.end() - 32, signed_bytes.end(), r.update.digest->bytes.begin()));
  // The same bytes signed over BLAKE3 use v2; neither passes as the other.
  wire::FitResult b = Update();
  ASSERT_TRUE(SignUpdate(site, "fed", 3, &b).ok());
  EXPECT_EQ(b.update.digest->kind, wire::DigestKind::kBlake3);
  EXPECT_TRUE(VerifyUpdate(site.public_identity(), "fed", 3, b).ok());
  wire::FitResult mixed = b;
  mixed.update.digest = r.update.digest;
  EXPECT_FALSE(VerifyUpdate(site.public_identity(), "fed", 3, mixed).ok());
  // Through the wire: each is sent and checked in its own kind.
  for (const wire::FitResult* x : {&r, &b}) {
    auto frames = wire::Encode(wire::Message{{"fed", "site-a", 4, 3, 1}, *x});
    ASSERT_TRUE(frames.ok()) << frames.status().ToString();
    auto back = wire::Decode(*frames);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(std::get<wire::FitResult>(back->body).update.digest, x->update.digest);
    EXPECT_TRUE(VerifyUpdate(site.public_identity(), "fed", 3, std::get<wire::FitResult>(back->body)).ok());
  }
}

// A signature of any length but 64 is refused on the wire, both ways.
TEST(UpdateSignature, AWrongLengthSignatureIsRefusedOnTheWire) {
  Identity site = Identity::Generate("site-a").value();
  wire::FitResult r = Update();
  ASSERT_TRUE(SignUpdate(site, "fed", 3, &r).ok());
  auto frames = wire::Encode(wire::Message{{"fed", "site-a", 4, 3, 1}, r});
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  auto back = wire::Decode(*frames);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(std::get<wire::FitResult>(back->body).signature, r.signature);
  r.signature.pop_back();
  auto bad = wire::Encode(wire::Message{{"fed", "site-a", 4, 3, 1}, r});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("signature is 63 bytes"), std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace fedmesh
