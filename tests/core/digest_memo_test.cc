// DigestMemo (core/wire/digest_memo.h) and the wire codec hashing through one: the same
// digests, frames and messages as without, fewer SHA-256 passes, and damaged bytes caught.
#include "core/wire/digest_memo.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/rng.h"
#include "core/wire/fedmesh.pb.h"
#include "core/wire/wire_codec.h"
#include "tests/core/status_assertions.h"

namespace fedmesh::wire {
namespace {

using fedmesh::testing::HasCode;

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng.NextU64());
  return v;
}

TEST(DigestMemo, EqualBytesAreServedAndDifferentBytesHashed) {
  DigestMemo memo;
  const auto a = RandomBytes(100000, 1);
  auto b = a;
  b.back() ^= 1;  // same size, last byte differs: only a full comparison tells them apart
  EXPECT_EQ(memo.Hash(DigestKind::kBlake3, a), HashPayload(DigestKind::kBlake3, a));
  const auto copy = a;  // equal bytes elsewhere in memory
  EXPECT_EQ(memo.Hash(DigestKind::kBlake3, copy), HashPayload(DigestKind::kBlake3, a));
  EXPECT_EQ(memo.hits(), 1u);
  EXPECT_EQ(memo.Hash(DigestKind::kBlake3, b), HashPayload(DigestKind::kBlake3, b));
  EXPECT_NE(HashPayload(DigestKind::kBlake3, a), HashPayload(DigestKind::kBlake3, b));
  EXPECT_EQ(memo.Hash(DigestKind::kBlake3, a), HashPayload(DigestKind::kBlake3, a));  // only the last payload is kept
  EXPECT_EQ(memo.hits(), 1u);
  EXPECT_EQ(memo.misses(), 3u);
  EXPECT_EQ(memo.Hash(DigestKind::kBlake3, std::vector<uint8_t>{}), HashPayload(DigestKind::kBlake3, std::vector<uint8_t>{}));
  const auto shorter = std::vector<uint8_t>(a.begin(), a.end() - 1);
  EXPECT_EQ(memo.Hash(DigestKind::kBlake3, shorter), HashPayload(DigestKind::kBlake3, shorter));
  EXPECT_EQ(memo.hits(), 1u);
}

TEST(DigestMemo, PayloadsOverTheLimitAreHashedButNotKept) {
  DigestMemo memo(/*max_bytes=*/1000);
  const auto big = RandomBytes(1001, 2);
  EXPECT_EQ(memo.Hash(DigestKind::kBlake3, big), HashPayload(DigestKind::kBlake3, big));
  EXPECT_EQ(memo.Hash(DigestKind::kBlake3, big), HashPayload(DigestKind::kBlake3, big));
  EXPECT_EQ(memo.hits(), 0u);
  EXPECT_EQ(memo.misses(), 2u);
}

// The FitTask of one node: a round's tasks differ only in their headers' message ids.
Message TaskMessage(std::span<const float> model, uint64_t message_id) {
  FitTask t;
  t.round = 3;
  t.global_model = FloatPayload(model);
  return Message{Header{"fed", "aggregator", 3, 3, message_id}, t};
}

std::vector<float> Model(size_t n) {
  Rng rng(7);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

// A round's FitTasks to many nodes: one hash pass for the model, on both ends; the frames
// and the decoded messages are exactly those made without a memo.
TEST(WireDigestMemo, OnePayloadForManyReceiversIsHashedOnce) {
  WireLimits l;
  l.max_chunk_bytes = 4096;  // several chunks: the memo sees the reassembled whole
  const auto model = Model(5000);
  DigestMemo memo;
  for (uint64_t id = 1; id <= 5; ++id) {
    const Message m = TaskMessage(model, id);
    auto with = Encode(m, l, &memo);
    auto without = Encode(m, l);
    ASSERT_TRUE(with.ok() && without.ok());
    ASSERT_GT(with->size(), 2u);
    EXPECT_EQ(*with, *without);
    auto decoded = Decode(*with, l, &memo);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    auto plain = Decode(*without, l);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(*decoded, *plain);
    EXPECT_EQ(std::get<FitTask>(decoded->body).global_model.digest,
              HashPayload(DigestKind::kBlake3, std::get<FitTask>(m.body).global_model.bytes));
  }
  EXPECT_EQ(memo.misses(), 1u);
  EXPECT_EQ(memo.hits(), 9u);
}

// The memo remembers the bytes that were sent; bytes damaged on the way differ from them,
// are hashed, and fail the check as without a memo.
TEST(WireDigestMemo, DamagedBytesStillFailTheirCheck) {
  WireLimits l;
  l.max_chunk_bytes = 4096;
  DigestMemo memo;
  auto frames = Encode(TaskMessage(Model(3000), 9), l, &memo);
  ASSERT_TRUE(frames.ok());
  pb::Envelope chunk;
  ASSERT_TRUE(chunk.ParseFromArray(frames->back().data(), static_cast<int>(frames->back().size())));
  (*chunk.mutable_chunk()->mutable_data())[10] ^= 0x01;
  const std::string s = chunk.SerializeAsString();
  frames->back() = Frame(s.begin(), s.end());
  EXPECT_TRUE(HasCode(Decode(*frames, l, &memo).status(), StatusCode::kCorruption, "fails its blake3 check"));
  Reassembler r(l, &memo);
  Status last = Status::OK();
  for (const Frame& f : *frames) last = r.Add(f).status();
  EXPECT_TRUE(HasCode(last, StatusCode::kCorruption, "fails its blake3 check"));
  // Hashed: the sent bytes, then the damaged ones. The second decode of the damaged bytes
  // was served their own digest, which still fails.
  EXPECT_EQ(memo.misses(), 2u);
  EXPECT_EQ(memo.hits(), 1u);
}

}  // namespace
}  // namespace fedmesh::wire
