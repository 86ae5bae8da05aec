// Self-signed member records (gossip/signed_member.h): a record verifies only for its own
// member and federation, every signed field tampered fails while the state may change, a
// member cannot sign another's record, and the signature survives the wire while a
// signature of the wrong length is refused there.
#include "gossip/signed_member.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/wire/wire_codec.h"
#include "crypto/identity.h"

namespace fedmesh {
namespace {

wire::MemberUpdate Own(const Identity& who, uint64_t incarnation = 7) {
  wire::MemberUpdate u;
  u.id = who.name();
  u.endpoint = "tcp://10.0.0.7:7001";
  u.curve_public = who.public_identity().curve_public;
  u.sign_public = who.public_identity().sign_public;
  u.incarnation = incarnation;
  return u;
}

TEST(SignedMember, VerifiesForItsMemberAndFederationOnly) {
  auto alice = Identity::Generate("alice").value();
  auto mallory = Identity::Generate("mallory").value();
  wire::MemberUpdate u = Own(alice);
  ASSERT_TRUE(SignMember(alice, "fed-a", &u).ok());
  EXPECT_EQ(u.signature.size(), 64u);
  EXPECT_TRUE(VerifyMember(alice.public_identity(), "fed-a", u).ok());
  EXPECT_EQ(VerifyMember(alice.public_identity(), "fed-b", u).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(VerifyMember(mallory.public_identity(), "fed-a", u).code(),
            StatusCode::kPermissionDenied);
  // The state is not signed: anyone may report alice suspect or dead at this incarnation.
  for (auto state : {wire::MemberState::kSuspect, wire::MemberState::kDead}) {
    wire::MemberUpdate reported = u;
    reported.state = state;
    EXPECT_TRUE(VerifyMember(alice.public_identity(), "fed-a", reported).ok());
  }
  // Everything else is.
  std::vector<wire::MemberUpdate> tampered(5, u);
  tampered[0].endpoint = "tcp://10.0.0.66:7001";
  tampered[1].incarnation += 1;
  tampered[2].curve_public[0] ^= 1;
  tampered[3].signature[10] ^= 1;
  tampered[4].signature.clear();
  for (size_t i = 0; i < tampered.size(); ++i) {
    Status s = VerifyMember(alice.public_identity(), "fed-a", tampered[i]);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << i;
  }
  EXPECT_NE(VerifyMember(alice.public_identity(), "fed-a", tampered[4]).message().find("unsigned"),
            std::string::npos);
  // Mallory computes the bytes of alice's record and signs them herself.
  wire::MemberUpdate forged = Own(alice, 1u << 30);
  auto sig = mallory.Sign(MemberSigningBytes("fed-a", forged));
  ASSERT_TRUE(sig.ok());
  forged.signature.assign(sig->begin(), sig->end());
  EXPECT_EQ(VerifyMember(alice.public_identity(), "fed-a", forged).code(),
            StatusCode::kPermissionDenied);
}

TEST(SignedMember, OnlyTheMemberItselfCanSign) {
  auto alice = Identity::Generate("alice").value();
  auto mallory = Identity::Generate("mallory").value();
  wire::MemberUpdate u = Own(alice);
  Status s = SignMember(mallory, "fed", &u);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(u.signature.empty());
  u.sign_public = mallory.public_identity().sign_public;  // alice's name, mallory's key
  EXPECT_EQ(SignMember(mallory, "fed", &u).code(), StatusCode::kInvalidArgument);
}

TEST(SignedMember, SignatureSurvivesTheWireAndAWrongLengthIsRefused) {
  auto alice = Identity::Generate("alice").value();
  wire::MemberUpdate u = Own(alice);
  ASSERT_TRUE(SignMember(alice, "fed", &u).ok());
  u.state = wire::MemberState::kSuspect;
  wire::Membership m;
  m.kind = wire::MembershipKind::kSync;
  m.updates = {u, Own(alice, 8)};  // the second unsigned
  wire::Header h;
  h.federation_id = "fed";
  h.sender_id = "alice";
  h.message_id = 1;
  auto frames = wire::Encode(wire::Message{h, m});
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  auto back = wire::Decode(*frames);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto& got = std::get<wire::Membership>(back->body);
  ASSERT_EQ(got.updates.size(), 2u);
  EXPECT_EQ(got.updates[0], u);
  EXPECT_TRUE(got.updates[1].signature.empty());
  EXPECT_TRUE(VerifyMember(alice.public_identity(), "fed", got.updates[0]).ok());

  m.updates[0].signature.resize(65);
  frames = wire::Encode(wire::Message{h, m});
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  back = wire::Decode(*frames);
  EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument) << back.status().ToString();
  EXPECT_NE(back.status().message().find("signature"), std::string::npos);
}

}  // namespace
}  // namespace fedmesh
