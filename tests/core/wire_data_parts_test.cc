// Chunk data parts in the wire codec (docs/wire.md): EncodeParted moves the payload out of
// the message instead of copying it into chunk frames, and a Reassembler given each chunk
// frame with its data part returns the very message Encode + Decode would. Every way a
// peer can get the pairing wrong is refused with Corruption naming it.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/wire/wire_codec.h"
#include "tests/core/wire_test_util.h"

namespace fedmesh::wire {
namespace {

// 10,000 floats in 4 KiB chunks: 9 full chunks and a 3,136-byte last one.
WireLimits SmallChunks() {
  WireLimits l;
  l.max_chunk_bytes = 4096;
  return l;
}

Result<std::optional<Message>> AddAll(Reassembler& r, const PartedMessage& p) {
  Result<std::optional<Message>> last = std::optional<Message>();
  for (size_t i = 0; i < p.frames.size(); ++i) {
    last = i == 0 ? r.Add(p.frames[i]) : r.Add(p.frames[i], p.DataPart(i));
    if (!last.ok() || (i + 1 < p.frames.size() && last->has_value())) return last;
  }
  return last;
}

TEST(WireDataParts, TheMessageArrivesAsEncodeAndDecodeWouldGiveIt) {
  const Message m = FitResultMessage(Values(10000, 3));
  const std::vector<uint8_t>& bytes = std::get<FitResult>(m.body).update.bytes;
  for (DigestKind kind : {DigestKind::kBlake3, DigestKind::kSha256}) {
    WireLimits l = SmallChunks();
    l.payload_digest = kind;
    auto p = EncodeParted(m, l);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_EQ(p->frames.size(), 1u + 10u);
    uint64_t data = 0;
    for (size_t i = 1; i < p->frames.size(); ++i) {
      EXPECT_LT(p->frames[i].size(), 100u) << "chunk frame " << i << " carries no data";
      data += p->DataPart(i).size();
    }
    EXPECT_EQ(data, bytes.size());
    EXPECT_EQ(p->DataPart(10).size(), 40000u - 9 * 4096);
    EXPECT_TRUE(p->DataPart(0).empty());
    EXPECT_TRUE(std::equal(p->DataPart(2).begin(), p->DataPart(2).end(), bytes.begin() + 4096));

    Reassembler r(l);
    auto got = AddAll(r, *p);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value());
    auto decoded = Decode(MustEncode(m, l), l);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_TRUE(**got == *decoded);
    EXPECT_EQ(std::get<FitResult>((*got)->body).update.digest->kind, kind);
  }
}

TEST(WireDataParts, ThePayloadIsMovedNotCopied) {
  Message m = FitResultMessage(Values(10000, 4));
  const uint8_t* where = std::get<FitResult>(m.body).update.bytes.data();
  auto p = EncodeParted(std::move(m), SmallChunks());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->payload->data(), where);
  EXPECT_EQ(p->DataPart(1).data(), where);
  EXPECT_EQ(p->DataPart(3).data(), where + 2 * 4096);
}

TEST(WireDataParts, EncodePartedChecksAsEncodeDoes) {
  Message m = FitResultMessage(Values(100, 5));
  std::get<FitResult>(m.body).update.digest = HashPayload(DigestKind::kBlake3, {});
  EXPECT_TRUE(HasCode(EncodeParted(m).status(), StatusCode::kInvalidArgument, "but the bytes hash to"));
  Message nan = FitResultMessage(std::vector<float>{1.0f, std::nanf("")});
  EXPECT_TRUE(HasCode(EncodeParted(nan).status(), StatusCode::kInvalidArgument));
  // Without a payload there are no data parts.
  auto reg = EncodeParted(Message{TestHeader(), Register{"node-7", 10, {}}});
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(reg->frames.size(), 1u);
  EXPECT_EQ(reg->payload, nullptr);
}

// A chunk frame as Encode writes it, with its data in field 4 and detached_bytes set too.
Frame BothWays(const Frame& chunk_frame) {
  return Rewrite(chunk_frame, [](pb::Envelope& e) { e.mutable_chunk()->set_detached_bytes(4096); });
}

TEST(WireDataParts, AWrongPairingIsRefusedAndNamed) {
  const Message m = FitResultMessage(Values(10000, 6));
  auto p = EncodeParted(m, SmallChunks());
  ASSERT_TRUE(p.ok());
  const std::vector<Frame> plain = MustEncode(m, SmallChunks());
  const std::vector<uint8_t> short_part(p->DataPart(1).begin(), p->DataPart(1).end() - 1);
  struct Case {
    const char* what;
    std::function<Result<std::optional<Message>>(Reassembler&)> add;
    const char* needle;
  };
  const Case cases[] = {
      {"a data part with the header frame",
       [&](Reassembler& r) { return r.Add(p->frames[0], p->DataPart(1)); },
       "only a chunk frame that declares detached_bytes has one"},
      {"a chunk frame without its data part",
       [&](Reassembler& r) { return r.Add(p->frames[1]); },
       "declares its 4096 bytes in a data part, and none came with it"},
      {"a data part one byte short",
       [&](Reassembler& r) { return r.Add(p->frames[1], short_part); },
       "declares 4096 bytes in its data part; the part holds 4095"},
      {"a data part with a chunk frame that carries its data",
       [&](Reassembler& r) { return r.Add(plain[1], p->DataPart(1)); },
       "came with a data part but declares no detached_bytes"},
      {"data in the frame and detached_bytes",
       [&](Reassembler& r) { return r.Add(BothWays(plain[1]), p->DataPart(1)); },
       "bytes in its frame and declares 4096 in a data part"},
  };
  for (const Case& c : cases) {
    Reassembler r(SmallChunks());
    ASSERT_TRUE(r.Add(p->frames[0]).ok());
    auto got = c.add(r);
    EXPECT_TRUE(HasCode(got.status(), StatusCode::kCorruption, c.needle)) << c.what;
  }
  // After a refused chunk, the sender can still complete the message with good ones.
  Reassembler r(SmallChunks());
  ASSERT_TRUE(r.Add(p->frames[0]).ok());
  ASSERT_FALSE(r.Add(p->frames[1], short_part).ok());
  for (size_t i = 1; i < p->frames.size(); ++i) {
    auto added = r.Add(p->frames[i], p->DataPart(i));
    ASSERT_TRUE(added.ok()) << added.status().ToString();
    EXPECT_EQ(added->has_value(), i + 1 == p->frames.size());
  }
}

// The two framings may be mixed within one message (a resumed upload sent with the other
// kind): the bytes are the same.
TEST(WireDataParts, FramingsMayMixWithinAMessage) {
  const Message m = FitResultMessage(Values(10000, 7));
  auto p = EncodeParted(m, SmallChunks());
  ASSERT_TRUE(p.ok());
  const std::vector<Frame> plain = MustEncode(m, SmallChunks());
  ASSERT_EQ(plain.size(), p->frames.size());
  Reassembler r(SmallChunks());
  for (size_t i = 0; i < plain.size(); ++i) {
    auto added = i % 2 == 0 ? r.Add(plain[i]) : r.Add(p->frames[i], p->DataPart(i));
    ASSERT_TRUE(added.ok()) << i << ": " << added.status().ToString();
    if (i + 1 == plain.size()) {
      ASSERT_TRUE(added->has_value());
      EXPECT_TRUE(**added == WithHash(m));
    }
  }
}

// FitTask.chunk_data_parts travels; a task from an older sender (field absent) reads false.
TEST(WireDataParts, TheTaskSaysWhetherTheAggregatorTakesThem) {
  Message m = FitTaskMessage(Values(10, 8));
  EXPECT_FALSE(std::get<FitTask>(m.body).chunk_data_parts);
  std::get<FitTask>(m.body).chunk_data_parts = true;
  auto got = Decode(MustEncode(m));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(std::get<FitTask>(got->body).chunk_data_parts);
  EXPECT_TRUE(ParseEnvelope(MustEncode(m)[0]).fit_task().chunk_data_parts());
  std::get<FitTask>(m.body).chunk_data_parts = false;
  auto old = Decode(MustEncode(m));
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(std::get<FitTask>(old->body).chunk_data_parts);
}

}  // namespace
}  // namespace fedmesh::wire
