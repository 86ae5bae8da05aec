// Resumed uploads (docs/wire.md): real ROUTER/DEALER sockets with CurveZMQ on loopback.
// A node's upload cut by a lost connection continues from the first chunk the server
// lacks instead of starting over; the server answers queries; bad offers are refused.
// Uploads whose chunks' data travel as their own parts ("Chunk data parts") arrive and
// resume the same way; a malformed multipart message is refused.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/wire/wire_codec.h"
#include "tests/transport/zmq_test_env.h"
#include "transport/zmq/zmq_client.h"
#include "transport/zmq/zmq_server.h"

namespace fedmesh {
namespace {

using namespace zmqtest;  // NOLINT: the shared helpers of zmq_test_env.h

// Limits with 256 KiB chunks: the update below is 16 chunks.
wire::WireLimits SmallChunks() {
  wire::WireLimits l = TestLimits();
  l.max_chunk_bytes = 256 << 10;
  return l;
}

constexpr size_t kFloats = 1u << 20;  // 4 MiB: 16 chunks of 256 KiB

wire::Message Update(const std::string& node, uint64_t message_id) {
  std::vector<float> values(kFloats);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977) * 0.25f - 3;
  wire::FitResult r;
  r.round = 4;
  r.num_examples = 600;
  r.update = wire::FloatPayload(values);
  r.bytes_before_codec = r.bytes_after_codec = r.update.bytes.size();
  return {{kFed, node, 4, 4, message_id}, r};
}

// The message that arrived is the one sent: same header, same update values.
void ExpectSameUpdate(const wire::Message& got, const wire::Message& sent) {
  EXPECT_EQ(got.header, sent.header);
  auto a = wire::PayloadFloats(std::get<wire::FitResult>(got.body).update);
  auto b = wire::PayloadFloats(std::get<wire::FitResult>(sent.body).update);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b);
}

uint64_t FrameBytes(const wire::Message& m, size_t begin, size_t end) {
  auto frames = wire::Encode(m, SmallChunks());
  EXPECT_TRUE(frames.ok());
  uint64_t n = 0;
  for (size_t i = begin; i < end && i < frames->size(); ++i) n += (*frames)[i].size();
  return n;
}

// The bytes SendResumable with data parts hands to the socket for frames [begin, end): each
// chunk frame (without data) plus its data part.
uint64_t PartedBytes(const wire::Message& m, size_t begin, size_t end) {
  auto parted = wire::EncodeParted(m, SmallChunks());
  EXPECT_TRUE(parted.ok());
  uint64_t n = 0;
  for (size_t i = begin; i < end && i < parted->frames.size(); ++i) {
    n += parted->frames[i].size() + parted->DataPart(i).size();
  }
  return n;
}

struct Pair {
  Identity agg = NewIdentity("aggregator");
  Identity node = NewIdentity("site-a");
  Server s;
  std::unique_ptr<ZmqClient> client;
  std::string peer;

  explicit Pair(ZmqServerOptions so = {}) {
    so.limits = SmallChunks();
    s = StartServer(agg, {node.public_identity()}, so);
    ZmqClientOptions co;
    co.heartbeat_interval_ms = 0;  // the tests decide when the node speaks
    co.send_chunk_bytes = SmallChunks().max_chunk_bytes;  // receives under TestLimits()
    client = StartClient(&node, s, agg, co);
    peer = RoundTrip(*client, *s.server, "site-a");
  }
  // Polls the client (which acts on TransferResume offers) and the server until the server
  // returns a message or `ms` pass.
  std::optional<Received> PumpUntilReceived(int ms) {
    const auto deadline = Clock::now() + milliseconds(ms);
    while (Clock::now() < deadline) {
      auto c = client->Poll(5);
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      auto e = s.server->Poll(5);
      EXPECT_TRUE(e.ok()) << e.status().ToString();
      if (e.ok() && e->has_value()) {
        if (auto* r = std::get_if<Received>(&**e)) return std::move(*r);
      }
    }
    return std::nullopt;
  }
  // The node reconnects and registers (message `register_id`), as after a lost connection;
  // returns the upload that then completes (Registers skipped), or nullopt after 5 s.
  std::optional<Received> ReconnectAndAwaitUpload(uint64_t register_id) {
    EXPECT_TRUE(client->Reconnect().ok());  // a fresh connection: the server offers
    EXPECT_TRUE(client->Send(RegisterMsg("site-a", register_id)).ok());
    std::optional<Received> got;
    const auto deadline = Clock::now() + milliseconds(5000);
    while (!got && Clock::now() < deadline) {
      got = PumpUntilReceived(100);
      if (got && std::holds_alternative<wire::Register>(got->message.body)) got.reset();
    }
    return got;
  }
  // Lets the server read what the client has sent, for `ms`.
  void Settle(int ms) {
    const auto deadline = Clock::now() + milliseconds(ms);
    while (Clock::now() < deadline) (void)s.server->Poll(10);
  }
};

// The connection drops after the header and 5 of 16 chunks; the node's new connection
// gets an offer for chunk 5 and only chunks 5..15 travel again. The message that arrives
// equals the one sent.
TEST(ResumedUpload, ANewConnectionResumesFromTheFirstMissingChunk) {
  Pair p;
  const wire::Message up = Update("site-a", 11);
  ASSERT_TRUE(p.client->SendResumableForTesting(up, 1 + 5).ok());
  p.Settle(300);
  EXPECT_EQ(p.s.server->upload_budget().used(), kFloats * 4);  // pending, 5 chunks in

  const uint64_t sent_before = p.client->bytes_sent();
  std::optional<Received> got = p.ReconnectAndAwaitUpload(12);
  ASSERT_TRUE(got.has_value()) << "the resumed upload never completed";
  ExpectSameUpdate(got->message, up);
  EXPECT_EQ(p.s.server->resume_offers(), 1u);
  EXPECT_EQ(p.client->resumes(), 1u);
  EXPECT_EQ(p.client->bytes_resent(), FrameBytes(up, 1 + 5, 1 + 16));
  EXPECT_LT(p.client->bytes_resent(), FrameBytes(up, 0, 1 + 16) * 0.75);
  // Register + the resumed chunks; nothing else.
  EXPECT_EQ(p.client->bytes_sent() - sent_before,
            FrameBytes(RegisterMsg("site-a", 12), 0, 1) + p.client->bytes_resent());
  EXPECT_EQ(p.s.server->upload_budget().used(), 0u);
}

// A node that asks about a message the server never saw (or dropped) sends it whole.
TEST(ResumedUpload, AQueryForAMessageTheServerLacksSendsItWhole) {
  Pair p;
  const wire::Message up = Update("site-a", 21);
  ASSERT_TRUE(p.client->SendResumableForTesting(up, 0).ok());  // cut before the first frame
  ASSERT_EQ(p.client->retained_message_id(), 21u);
  ASSERT_TRUE(p.client->QueryRetained().ok());
  auto got = p.PumpUntilReceived(5000);
  ASSERT_TRUE(got.has_value());
  ExpectSameUpdate(got->message, up);
  EXPECT_EQ(p.client->bytes_resent(), FrameBytes(up, 0, 1 + 16));
}

// A query while the upload is partly in is answered with the next chunk, on the same
// connection (the node restarted its link layer but kept its frames).
TEST(ResumedUpload, AQueryMidUploadIsAnsweredWithTheNextChunk) {
  Pair p;
  const wire::Message up = Update("site-a", 31);
  ASSERT_TRUE(p.client->SendResumableForTesting(up, 1 + 9).ok());
  p.Settle(300);
  ASSERT_TRUE(p.client->QueryRetained().ok());
  auto got = p.PumpUntilReceived(5000);
  ASSERT_TRUE(got.has_value());
  ExpectSameUpdate(got->message, up);
  EXPECT_EQ(p.client->bytes_resent(), FrameBytes(up, 1 + 9, 1 + 16));
}

// A peer silent mid-upload is not reported dead at the heartbeat limit: only once its
// upload is dropped as stalled. Before this change it was forgotten after 3 intervals and
// its partial upload with it.
TEST(ResumedUpload, APeerSilentMidUploadIsDeadOnlyOnceItsUploadIsDropped) {
  ZmqServerOptions so;
  so.heartbeat_interval_ms = 100;
  so.dead_after_intervals = 2;
  so.upload_idle_timeout_ms = 1500;
  Pair p(so);
  ASSERT_TRUE(p.client->SendResumableForTesting(Update("site-a", 41), 1 + 3).ok());
  std::vector<ServerEvent> before;
  auto dead = AwaitEvent<PeerDead>(*p.s.server, 5000, &before);
  ASSERT_TRUE(dead.has_value());
  // First the upload was dropped (DeadlineExceeded), then the peer reported dead.
  ASSERT_EQ(before.size(), 1u);
  const auto* dropped = std::get_if<RejectedInput>(&before[0]);
  ASSERT_NE(dropped, nullptr);
  EXPECT_EQ(dropped->reason.code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(dead->silent_ms, 1500);
}

// A node whose first connection died and that starts the message over (a restart: same
// message id, fresh header) replaces the partial copy instead of being refused as a
// duplicate.
TEST(ResumedUpload, AMessageStartedOverOnANewConnectionReplacesThePartialCopy) {
  Pair p;
  const wire::Message up = Update("site-a", 51);
  ASSERT_TRUE(p.client->SendResumableForTesting(up, 1 + 2).ok());
  p.Settle(300);
  ZmqClientOptions co;
  co.send_chunk_bytes = SmallChunks().max_chunk_bytes;
  auto restarted = StartClient(&p.node, p.s, p.agg, co);
  ASSERT_TRUE(restarted->Send(up).ok());
  std::vector<ServerEvent> others;
  auto got = AwaitEvent<Received>(*p.s.server, 5000, &others);
  ASSERT_TRUE(got.has_value());
  ExpectSameUpdate(got->message, up);
  for (const ServerEvent& e : others) {
    if (const auto* r = std::get_if<RejectedInput>(&e)) ADD_FAILURE() << r->reason.ToString();
  }
  EXPECT_EQ(p.s.server->upload_budget().used(), 0u);
}

// Offers for a message the client does not keep (it restarted, or moved on) are ignored
// and counted; one for a chunk past the end of the kept message is refused by Poll with a
// message naming it. Nothing is sent for either.
TEST(ResumedUpload, OffersForAnotherMessageAreIgnoredAndPastTheEndRefused) {
  Pair p;
  const wire::Message up = Update("site-a", 61);
  ASSERT_TRUE(p.client->SendResumableForTesting(up, 1).ok());
  p.Settle(200);
  const uint64_t sent = p.client->bytes_sent();

  wire::Message other{{kFed, "aggregator", 0, 0, 0}, wire::TransferResume{99, wire::TransferState::kPartial, 3}};
  ASSERT_TRUE(p.s.server->Send(p.peer, other).ok());
  const auto deadline = Clock::now() + milliseconds(3000);
  while (p.client->resume_offers_ignored() == 0 && Clock::now() < deadline) {
    auto r1 = p.client->Poll(20);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    EXPECT_FALSE(r1->has_value());  // consumed by the transport
  }
  EXPECT_EQ(p.client->resume_offers_ignored(), 1u);

  wire::Message past{{kFed, "aggregator", 0, 0, 0}, wire::TransferResume{61, wire::TransferState::kPartial, 16}};
  ASSERT_TRUE(p.s.server->Send(p.peer, past).ok());
  auto r2 = p.client->Poll(3000);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("resume from chunk 16, but it has 16 chunks"),
            std::string::npos) << r2.status().ToString();
  EXPECT_EQ(p.client->bytes_sent(), sent);
  EXPECT_EQ(p.client->resumes(), 0u);

  // Without a kept message, a query is refused before anything is sent.
  auto fresh = StartClient(&p.node, p.s, p.agg);
  EXPECT_EQ(fresh->QueryRetained().code(), StatusCode::kFailedPrecondition);
}

// A node's upload with each chunk's data as its own part arrives whole and equal, as 16
// two-part messages; the server counts them.
TEST(ChunkDataParts, AnUploadArrivesWholeAndEqual) {
  Pair p;
  const wire::Message up = Update("site-a", 71);
  const uint64_t sent_before = p.client->bytes_sent();
  ASSERT_TRUE(p.client->SendResumable(up, /*data_parts=*/true).ok());
  auto got = p.PumpUntilReceived(5000);
  ASSERT_TRUE(got.has_value());
  ExpectSameUpdate(got->message, up);
  EXPECT_EQ(p.s.server->data_parts_received(), 16u);
  EXPECT_EQ(p.client->bytes_sent() - sent_before, PartedBytes(up, 0, 1 + 16));
  EXPECT_EQ(p.s.server->upload_budget().used(), 0u);
}

// Cut after 5 of 16 chunks, the upload resumes from chunk 5 with its data parts.
TEST(ChunkDataParts, ACutUploadResumesWithItsDataParts) {
  Pair p;
  const wire::Message up = Update("site-a", 81);
  ASSERT_TRUE(p.client->SendResumableForTesting(up, 1 + 5, /*data_parts=*/true).ok());
  p.Settle(300);
  EXPECT_EQ(p.s.server->upload_budget().used(), kFloats * 4);
  std::optional<Received> got = p.ReconnectAndAwaitUpload(82);
  ASSERT_TRUE(got.has_value()) << "the resumed upload never completed";
  ExpectSameUpdate(got->message, up);
  EXPECT_EQ(p.client->bytes_resent(), PartedBytes(up, 1 + 5, 1 + 16));
  EXPECT_EQ(p.s.server->data_parts_received(), 16u);
}

// Multipart messages that are not a chunk and its data are refused with a reason, and the
// connection still serves: three parts; a header frame with a data part; a chunk frame
// without the data part it declares (its upload then also stays incomplete).
TEST(ChunkDataParts, MalformedMultipartMessagesAreRefusedAndTheLinkStaysUp) {
  Pair p;
  const std::string key = p.node.public_identity().curve_public_z85();
  auto parted = wire::EncodeParted(Update("site-a", 91), SmallChunks());
  ASSERT_TRUE(parted.ok());
  const std::vector<uint8_t> data(parted->DataPart(1).begin(), parted->DataPart(1).end());
  auto refused = [&](const std::vector<std::vector<uint8_t>>& parts) {
    EXPECT_TRUE(p.client->SendRawPartsForTesting(parts).ok());
    auto r = AwaitEvent<RejectedInput>(*p.s.server, 3000);
    EXPECT_TRUE(r.has_value());
    if (!r.has_value()) return std::string();
    EXPECT_EQ(r->peer, key);
    EXPECT_EQ(r->reason.code(), StatusCode::kCorruption) << r->reason.ToString();
    return r->reason.message();
  };
  EXPECT_NE(refused({parted->frames[0], data, data}).find("a ZeroMQ message of 3 parts"),
            std::string::npos);
  EXPECT_NE(refused({parted->frames[0], data}).find("only a chunk frame that declares"),
            std::string::npos);
  ASSERT_TRUE(p.client->SendRawPartsForTesting({parted->frames[0]}).ok());  // the header
  EXPECT_NE(refused({parted->frames[1]}).find("and none came with it"), std::string::npos);
  EXPECT_EQ(RoundTrip(*p.client, *p.s.server, "site-a"), key);
}

}  // namespace
}  // namespace fedmesh
