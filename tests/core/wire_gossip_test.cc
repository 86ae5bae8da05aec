// Wire codec, gossip messages: Membership and GossipModel survive Encode -> Decode field by
// field (keys, states, incarnations, signatures, payloads), and hostile values (unknown
// kinds or states, keys of the wrong length, oversized member lists, bad weights or
// signature lengths, NaN model values) are refused with a Status naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/wire/fedmesh.pb.h"
#include "core/wire/wire_codec.h"

namespace fedmesh::wire {
namespace {

Header GossipHeader() {
  Header h;
  h.federation_id = "fed-gossip";
  h.sender_id = "site-3";
  h.message_id = 9;
  return h;
}

MemberUpdate Member(int i, MemberState state = MemberState::kAlive) {
  MemberUpdate u;
  u.id = "site-" + std::to_string(i);
  u.endpoint = "tcp://127.0.0.1:" + std::to_string(7000 + i);
  for (size_t k = 0; k < 32; ++k) {
    u.curve_public[k] = static_cast<uint8_t>(i * 7 + k);
    u.sign_public[k] = static_cast<uint8_t>(255 - i - k);
  }
  u.incarnation = 1000u + static_cast<uint64_t>(i);
  u.state = state;
  return u;
}

GossipModel Model(std::vector<float> values) {
  GossipModel g;
  g.kind = GossipKind::kExchange;
  g.sequence = 1'700'000'000'000'123u;
  g.step = 77;
  g.weight = 0.125;
  g.model = FloatPayload(values);
  g.signature.assign(64, 0xAB);
  return g;
}

Status EncodeStatus(const Body& body) { return Encode(Message{GossipHeader(), body}).status(); }

TEST(WireGossip, MembershipRoundTripsFieldByField) {
  Membership m;
  m.kind = MembershipKind::kPingReq;
  m.probe_id = 123456789012345u;
  m.target = "site-9";
  m.updates = {Member(1), Member(2, MemberState::kSuspect), Member(3, MemberState::kDead)};
  auto frames = Encode(Message{GossipHeader(), m});
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  EXPECT_EQ(frames->size(), 1u);  // no payload: one header frame
  auto got = Decode(*frames);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(TypeOf(got->body), MessageType::kMembership);
  EXPECT_EQ(MessageTypeName(TypeOf(got->body)), "Membership");
  EXPECT_TRUE(std::get<Membership>(got->body) == m);
}

TEST(WireGossip, GossipModelRoundTripsWithItsPayloadAndSignature) {
  std::vector<float> values(50000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.001f * static_cast<float>(i) - 3.0f;
  WireLimits small;
  small.max_chunk_bytes = 64 * 1024;  // several chunks
  const GossipModel g = Model(values);
  auto frames = Encode(Message{GossipHeader(), g}, small);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  EXPECT_EQ(frames->size(), 1u + 4u);  // 200,000 bytes in 64 KiB chunks
  auto got = Decode(*frames, small);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(TypeOf(got->body), MessageType::kGossipModel);
  const auto& r = std::get<GossipModel>(got->body);
  EXPECT_EQ(r.kind, GossipKind::kExchange);
  EXPECT_EQ(r.sequence, g.sequence);
  EXPECT_EQ(r.step, 77u);
  EXPECT_EQ(r.weight, 0.125);
  EXPECT_EQ(r.signature, g.signature);
  EXPECT_EQ(PayloadFloats(r.model).value(), values);
  ASSERT_TRUE(r.model.digest.has_value());
}

TEST(WireGossip, PullRequestWithoutPayloadOrSignatureIsOneFrame) {
  GossipModel g;
  g.kind = GossipKind::kPullRequest;
  g.sequence = 5;
  auto frames = Encode(Message{GossipHeader(), g});
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  EXPECT_EQ(frames->size(), 1u);
  auto got = Decode(*frames);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(std::get<GossipModel>(got->body).signature.empty());
  EXPECT_EQ(std::get<GossipModel>(got->body).model.element_count, 0u);
}

TEST(WireGossip, BadMembershipFieldsAreRefusedNamingTheField) {
  Membership m;
  m.kind = static_cast<MembershipKind>(42);
  EXPECT_EQ(EncodeStatus(m).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(EncodeStatus(m).message().find("Membership kind 42 is unknown"), std::string::npos);

  m.kind = MembershipKind::kAck;  // an Ack must name who answered
  EXPECT_NE(EncodeStatus(m).message().find("Membership target is empty"), std::string::npos);

  m.kind = MembershipKind::kPing;
  m.updates = {Member(1)};
  m.updates[0].state = static_cast<MemberState>(0);
  EXPECT_NE(EncodeStatus(m).message().find("update 0 state 0 is unknown"), std::string::npos);
  m.updates[0] = Member(1);
  m.updates[0].endpoint = "tcp://host name";  // a space
  EXPECT_NE(EncodeStatus(m).message().find("update 0 endpoint"), std::string::npos);

  WireLimits few;
  few.max_members = 2;
  m.updates = {Member(1), Member(2), Member(3)};
  auto over = Encode(Message{GossipHeader(), m}, few);
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(over.status().message().find("3 member updates; the limit is 2"), std::string::npos);
  // The receiver makes the same check on what arrived.
  auto frames = Encode(Message{GossipHeader(), m});
  ASSERT_TRUE(frames.ok());
  EXPECT_EQ(Decode(*frames, few).status().code(), StatusCode::kOutOfRange);
}

TEST(WireGossip, KeysOfTheWrongLengthAreRefusedOnReceipt) {
  Membership m;
  m.kind = MembershipKind::kSync;
  m.updates = {Member(4)};
  auto frames = Encode(Message{GossipHeader(), m});
  ASSERT_TRUE(frames.ok());
  pb::Envelope env;
  ASSERT_TRUE(env.ParseFromArray((*frames)[0].data(), static_cast<int>((*frames)[0].size())));
  env.mutable_membership()->mutable_updates(0)->set_sign_public(std::string(31, 'k'));
  std::vector<Frame> bad(1);
  bad[0].resize(env.ByteSizeLong());
  ASSERT_TRUE(env.SerializeToArray(bad[0].data(), static_cast<int>(bad[0].size())));
  auto got = Decode(bad);
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("keys of 32 and 31 bytes"), std::string::npos)
      << got.status().ToString();
}

TEST(WireGossip, BadGossipModelFieldsAreRefusedNamingTheField) {
  GossipModel g = Model({1.0f, 2.0f});
  g.kind = static_cast<GossipKind>(0);
  EXPECT_NE(EncodeStatus(g).message().find("GossipModel kind 0 is unknown"), std::string::npos);
  g = Model({1.0f, 2.0f});
  g.weight = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(EncodeStatus(g).message().find("weight is nan"), std::string::npos)
      << EncodeStatus(g).ToString();
  g.weight = -0.5;
  EXPECT_NE(EncodeStatus(g).message().find("weight is -0.5"), std::string::npos);
  g = Model({1.0f, 2.0f});
  g.signature.resize(63);
  EXPECT_NE(EncodeStatus(g).message().find("signature is 63 bytes"), std::string::npos);
  g = Model({1.0f, std::numeric_limits<float>::infinity()});
  EXPECT_NE(EncodeStatus(g).message().find("GossipModel.model value at index 1 is +Inf"),
            std::string::npos)
      << EncodeStatus(g).ToString();
  g = Model({1.0f, 2.0f});
  g.model.codec = "gzip";
  EXPECT_NE(EncodeStatus(g).message().find("GossipModel.model"), std::string::npos);
}

}  // namespace
}  // namespace fedmesh::wire
