// Tests of the ZeroMQ transport (transport/zmq/): real ROUTER/DEALER sockets with CurveZMQ on
// loopback ports the OS picks, a ZAP allowlist, hostile input and heartbeats. Every wait
// is a bounded loop with a deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "core/wire/wire_codec.h"
#include "crypto/identity.h"
#include "transport/zmq/zmq_client.h"
#include "transport/zmq/zmq_server.h"
#include "tests/transport/zmq_test_env.h"

namespace fedmesh {
namespace {

using namespace zmqtest;  // NOLINT: the shared helpers of zmq_test_env.h


TEST(ZmqTransport, EnrolledClientRoundTripsWithCurveAndIsNamedByItsKey) {
  Identity agg = NewIdentity("aggregator");
  Identity node = NewIdentity("site-a");
  Server s = StartServer(agg, {node.public_identity()});
  auto client = StartClient(&node, s, agg);
  std::string peer = RoundTrip(*client, *s.server, "site-a");
  EXPECT_EQ(peer, node.public_identity().curve_public_z85());
  EXPECT_EQ(s.server->refused_count(), 0u);
  EXPECT_GE(s.server->admitted_count(), 1u);
}

TEST(ZmqTransport, UnenrolledKeyGetsNothingAndIsCountedThenReloadAdmitsIt) {
  Identity agg = NewIdentity("aggregator");
  Identity enrolled = NewIdentity("site-a");
  Identity stranger = NewIdentity("site-x");
  Server s = StartServer(agg, {enrolled.public_identity()});
  auto client = StartClient(&stranger, s, agg);
  ASSERT_TRUE(client->Send(RegisterMsg("site-x", 1)).ok());

  std::vector<ServerEvent> seen;
  EXPECT_FALSE(AwaitEvent<Received>(*s.server, 500, &seen).has_value());
  EXPECT_TRUE(seen.empty()) << "a refused connection must not produce any event";
  const auto deadline = Clock::now() + milliseconds(2000);
  while (s.server->refused_count() == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_GE(s.server->refused_count(), 1u);
  EXPECT_EQ(s.server->admitted_count(), 0u);

  // SIGHUP path: the operator enrolls site-x; the node's re-register loop reconnects
  // (libzmq does not retry after a refusal) and now gets in.
  s.server->Reload({enrolled.public_identity(), stranger.public_identity()});
  std::optional<Received> got;
  const auto reload_deadline = Clock::now() + milliseconds(3000);
  for (uint64_t id = 10; !got.has_value() && Clock::now() < reload_deadline; ++id) {
    ASSERT_TRUE(client->Reconnect().ok());
    ASSERT_TRUE(client->Send(RegisterMsg("site-x", id)).ok());
    got = AwaitEvent<Received>(*s.server, 200);
  }
  ASSERT_TRUE(got.has_value()) << "site-x was not admitted after Reload";
  EXPECT_EQ(got->peer, stranger.public_identity().curve_public_z85());
  EXPECT_EQ(RoundTrip(*client, *s.server, "site-x"), got->peer);
}

TEST(ZmqTransport, WrongServerKeyNeverConnects) {
  Identity agg = NewIdentity("aggregator");
  Identity impostor = NewIdentity("impostor");
  Identity node = NewIdentity("site-a");
  Server s = StartServer(agg, {node.public_identity()});
  auto client = StartClient(&node, s, impostor);  // expects the impostor's key
  ASSERT_TRUE(client->Send(RegisterMsg("site-a", 1)).ok());
  EXPECT_FALSE(AwaitEvent<Received>(*s.server, 500).has_value());
}

// Reads from `fd` until EOF / reset or `ms` pass; true when the peer closed.
bool PeerClosed(int fd, int ms) {
  const auto deadline = Clock::now() + milliseconds(ms);
  char buf[256];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return true;  // EOF or ECONNRESET
  }
  return false;
}

TEST(ZmqTransport, GarbageBytesOverTcpAreDroppedAndServerKeepsServing) {
  Identity agg = NewIdentity("aggregator");
  Identity node = NewIdentity("site-a");
  Server s = StartServer(agg, {node.public_identity()});

  // 1. A plain TCP socket writing junk instead of a ZMTP greeting.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(PortOf(s.endpoint)));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::string junk(4096, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 131 + 7) & 0xff);
  ASSERT_GT(::write(fd, junk.data(), junk.size()), 0);
  EXPECT_TRUE(PeerClosed(fd, 2000)) << "the server should close a connection speaking junk";
  ::close(fd);

  // 2. A ZMQ_STREAM socket doing the same through libzmq.
  zmq::context_t ctx;
  zmq::socket_t stream(ctx, zmq::socket_type::stream);
  stream.set(zmq::sockopt::linger, 0);
  stream.connect(s.endpoint);
  stream.set(zmq::sockopt::rcvtimeo, 2000);  // bounded wait for the connect notification
  zmq::message_t id_part, empty;
  ASSERT_TRUE(stream.recv(id_part));  // STREAM reports the connection with an empty frame
  ASSERT_TRUE(stream.recv(empty));
  ASSERT_TRUE(stream.send(zmq::buffer(id_part.to_string()), zmq::send_flags::sndmore));
  ASSERT_TRUE(stream.send(zmq::buffer("\xff\x00garbage garbage garbage\x01\x02", 29)));

  std::vector<ServerEvent> seen;
  EXPECT_FALSE(AwaitEvent<Received>(*s.server, 300, &seen).has_value());
  EXPECT_TRUE(seen.empty());
  auto client = StartClient(&node, s, agg);
  EXPECT_EQ(RoundTrip(*client, *s.server, "site-a"), node.public_identity().curve_public_z85());
}

TEST(ZmqTransport, GarbageAndTruncatedFramesFromEnrolledPeerAreRejected) {
  Identity agg = NewIdentity("aggregator");
  Identity node = NewIdentity("site-a");
  Server s = StartServer(agg, {node.public_identity()});
  auto client = StartClient(&node, s, agg);
  const std::string key = node.public_identity().curve_public_z85();

  ASSERT_TRUE(client->SendRawFrameForTesting({0xde, 0xad, 0xbe, 0xef, 0x00, 0x13, 0x37}).ok());
  auto rejected = AwaitEvent<RejectedInput>(*s.server, 3000);
  ASSERT_TRUE(rejected.has_value());
  EXPECT_EQ(rejected->peer, key);
  EXPECT_FALSE(rejected->reason.ok());

  auto frames = wire::Encode(RegisterMsg("site-a", 5), TestLimits());
  ASSERT_TRUE(frames.ok());
  ASSERT_EQ(frames->size(), 1u);
  wire::Frame truncated((*frames)[0].begin(), (*frames)[0].begin() + (*frames)[0].size() / 2);
  ASSERT_TRUE(client->SendRawFrameForTesting(truncated).ok());
  rejected = AwaitEvent<RejectedInput>(*s.server, 3000);
  ASSERT_TRUE(rejected.has_value());
  EXPECT_EQ(rejected->peer, key);
  EXPECT_EQ(rejected->reason.code(), StatusCode::kCorruption) << rejected->reason.ToString();

  // The peer stays connected and a good message still goes through.
  EXPECT_EQ(RoundTrip(*client, *s.server, "site-a"), key);
}

TEST(ZmqTransport, OversizedFrameDropsThatConnectionOnly) {
  Identity agg = NewIdentity("aggregator");
  Identity big = NewIdentity("site-big");
  Identity good = NewIdentity("site-good");
  Server s = StartServer(agg, {big.public_identity(), good.public_identity()});
  auto big_client = StartClient(&big, s, agg);
  auto good_client = StartClient(&good, s, agg);
  const std::string big_key = RoundTrip(*big_client, *s.server, "site-big");

  const uint64_t max_frame = wire::MaxFrameBytes(TestLimits());
  ASSERT_TRUE(big_client->SendRawFrameForTesting(std::vector<uint8_t>(max_frame + 4096, 0x41)).ok());
  std::vector<ServerEvent> seen;
  EXPECT_FALSE(AwaitEvent<Received>(*s.server, 300, &seen).has_value());
  for (const ServerEvent& e : seen) {
    EXPECT_FALSE(std::holds_alternative<RejectedInput>(e))
        << "libzmq must drop the frame before it reaches the reassembler";
  }
  EXPECT_EQ(RoundTrip(*good_client, *s.server, "site-good"),
            good.public_identity().curve_public_z85());
  // The dropped client reconnects (libzmq) and is served again.
  EXPECT_EQ(RoundTrip(*big_client, *s.server, "site-big"), big_key);
}

TEST(ZmqTransport, LargeModelGoesThroughIntactBothWays) {
  Identity agg = NewIdentity("aggregator");
  Identity node = NewIdentity("site-a");
  Server s = StartServer(agg, {node.public_identity()});
  auto client = StartClient(&node, s, agg);
  const std::string peer = RoundTrip(*client, *s.server, "site-a");

  std::vector<float> values(8u << 20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 9973) * 0.5f - 7;
  wire::FitTask task;
  task.round = 3;
  task.global_model = wire::FloatPayload(values, {{2048, 4096}});
  wire::Message down{{kFed, "aggregator", 3, 3, 100}, task};
  ASSERT_TRUE(s.server->Send(peer, down).ok());
  auto got = client->Poll(5000);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  const auto& got_task = std::get<wire::FitTask>((*got)->body);
  auto floats = wire::PayloadFloats(got_task.global_model);
  ASSERT_TRUE(floats.ok());
  EXPECT_EQ(*floats, values);

  wire::FitResult result;
  result.round = 3;
  result.num_examples = 10;
  result.update = wire::FloatPayload(values);
  result.bytes_before_codec = result.bytes_after_codec = result.update.bytes.size();
  ASSERT_TRUE(client->Send({{kFed, "site-a", 3, 3, 101}, result}).ok());
  auto up = AwaitEvent<Received>(*s.server, 5000);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->peer, peer);
  auto up_floats = wire::PayloadFloats(std::get<wire::FitResult>(up->message.body).update);
  ASSERT_TRUE(up_floats.ok());
  EXPECT_EQ(*up_floats, values);
}

TEST(ZmqTransport, SilentPeerIsReportedDeadAfterConfiguredIntervals) {
  Identity agg = NewIdentity("aggregator");
  Identity node = NewIdentity("site-a");
  ZmqServerOptions so;
  so.heartbeat_interval_ms = 200;  // 50 ms beats were starved on a busy CI machine
  so.dead_after_intervals = 3;
  Server s = StartServer(agg, {node.public_identity()}, so);
  ZmqClientOptions co;
  co.heartbeat_interval_ms = 200;
  auto client = StartClient(&node, s, agg, co);
  const std::string peer = RoundTrip(*client, *s.server, "site-a");

  // Heartbeats keep it alive well past the limit (and are never returned by Poll).
  std::vector<ServerEvent> seen;
  EXPECT_FALSE(AwaitEvent<PeerDead>(*s.server, 1500, &seen).has_value());
  EXPECT_TRUE(seen.empty());
  EXPECT_EQ(s.server->peer_count(), 1u);

  client->StopHeartbeatsForTesting();
  const auto stopped = Clock::now();
  auto dead = AwaitEvent<PeerDead>(*s.server, 5000);
  ASSERT_TRUE(dead.has_value());
  EXPECT_EQ(dead->peer, peer);
  EXPECT_GE(dead->silent_ms, 600);  // > 600 ms, truncated to whole ms
  EXPECT_LT(Clock::now() - stopped, milliseconds(4000));
  EXPECT_EQ(s.server->peer_count(), 0u);
  EXPECT_EQ(s.server->Send(peer, AckMsg("site-a", 1)).code(), StatusCode::kUnavailable);
}

// A client configured for 5 s beats, told by the server's RegisterAck to beat every 200 ms
// (SetHeartbeatInterval), is not taken for dead by a server that expects 200 ms. Before the
// fix the client kept its own 5 s and an idle node was dropped after 3 silent intervals (seen in
// bench/netns/federation.sh: an aggregator with heartbeat_ms = 1000 cycled every idle site
// through "silent for 3000 ms: disconnected" and a new Register).
TEST(ZmqTransport, ClientBeatsAtTheIntervalTheServerAsksFor) {
  Identity agg = NewIdentity("aggregator");
  Identity node = NewIdentity("site-a");
  ZmqServerOptions so;
  so.heartbeat_interval_ms = 200;  // 50 ms beats were starved on a busy CI machine
  so.dead_after_intervals = 3;
  Server s = StartServer(agg, {node.public_identity()}, so);
  ZmqClientOptions co;
  co.heartbeat_interval_ms = 5000;
  auto client = StartClient(&node, s, agg, co);
  RoundTrip(*client, *s.server, "site-a");
  client->SetHeartbeatInterval(200);
  EXPECT_FALSE(AwaitEvent<PeerDead>(*s.server, 1500).has_value());
  EXPECT_EQ(s.server->peer_count(), 1u);
  client->SetHeartbeatInterval(5000);  // back to slow beats: now it is taken for dead
  EXPECT_TRUE(AwaitEvent<PeerDead>(*s.server, 5000).has_value());
}

TEST(ZmqTransport, PlainTcpUsesRoutingIdAsPeer) {
  Identity agg = NewIdentity("aggregator");
  ZmqServerOptions so;
  so.curve = false;
  Server s = StartServer(agg, {}, so);
  ZmqClientOptions co;
  co.curve = false;
  auto client = StartClient(nullptr, s, agg, co);
  std::string peer = RoundTrip(*client, *s.server, "plain-node");
  EXPECT_FALSE(peer.empty());
  EXPECT_NE(peer, agg.public_identity().curve_public_z85());
  EXPECT_EQ(s.server->refused_count(), 0u);
}

TEST(ZmqTransport, SendToUnknownPeerIsUnavailableAndBadOptionsAreRefused) {
  Identity agg = NewIdentity("aggregator");
  Server s = StartServer(agg, {});
  EXPECT_EQ(s.server->Send("nobody", AckMsg("x", 1)).code(), StatusCode::kUnavailable);
  EXPECT_EQ(ZmqServer::Create({}, nullptr, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ZmqClient::Create({}, nullptr).status().code(), StatusCode::kInvalidArgument);
  auto bad_bind = s.server->Bind("nonsense://here");
  EXPECT_FALSE(bad_bind.ok());
}

TEST(ZmqTransport, RegisterRetryDelayBacksOffExponentiallyWithJitter) {
  ZmqClientOptions o;
  o.reconnect_ivl_ms = 100;
  o.reconnect_ivl_max_ms = 1000;
  EXPECT_EQ(RegisterRetryDelay(0, o, 0.0), milliseconds(50));
  EXPECT_EQ(RegisterRetryDelay(0, o, 0.999), milliseconds(99));
  EXPECT_EQ(RegisterRetryDelay(2, o, 0.5), milliseconds(300));   // backoff 400
  EXPECT_EQ(RegisterRetryDelay(10, o, 0.0), milliseconds(500));  // capped at 1000
  EXPECT_EQ(RegisterRetryDelay(1000, o, 1.0), milliseconds(1000));
}

// ---- Issue 26: revocation and bounded resources ------------------------------------------

// A raw DEALER that speaks fedmesh frames but reads only when told: a slow or hostile peer.
struct RawPeer {
  zmq::context_t ctx;
  zmq::socket_t socket{ctx, zmq::socket_type::dealer};
  explicit RawPeer(const std::string& endpoint, int rcvhwm = 1000) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvhwm, rcvhwm);
    socket.set(zmq::sockopt::rcvbuf, 4096);
    socket.connect(endpoint);
  }
  void Send(const wire::Frame& frame) {
    ASSERT_TRUE(socket.send(zmq::buffer(frame.data(), frame.size()), zmq::send_flags::none));
  }
  void SendAll(const wire::Message& m) {
    auto frames = wire::Encode(m, TestLimits());
    ASSERT_TRUE(frames.ok()) << frames.status().ToString();
    for (const auto& f : *frames) Send(f);
  }
};

// An update of `floats` values from `node`: 4 MiB chunks (TestLimits), so 1.25M floats is
// a header frame and two chunks.
std::vector<wire::Frame> UploadFrames(const std::string& node, size_t floats, uint64_t id) {
  wire::FitResult r;
  r.round = 1;
  r.num_examples = 10;
  r.update = wire::FloatPayload(std::vector<float>(floats, 0.5f));
  r.bytes_before_codec = r.bytes_after_codec = r.update.bytes.size();
  auto frames = wire::Encode(wire::Message{{kFed, node, 1, 0, id}, std::move(r)}, TestLimits());
  EXPECT_TRUE(frames.ok()) << frames.status().ToString();
  return frames.ok() ? std::move(frames).value() : std::vector<wire::Frame>{};
}

ZmqServerOptions PlainOptions() {
  ZmqServerOptions so;
  so.curve = false;
  return so;
}

// Item 1: removing a key and reloading used to leave its admitted connection up, so its
// messages kept arriving; Disconnect closes it and the ZAP handler refuses the redial.
TEST(ZmqTransport, RevokedPeerIsDisconnectedAtOnceAndItsRedialRefused) {
  Identity agg = NewIdentity("aggregator");
  Identity node = NewIdentity("site-a");
  Server s = StartServer(agg, {node.public_identity()});
  ZmqClientOptions co;
  co.send_timeout_ms = 50;
  auto client = StartClient(&node, s, agg, co);
  const std::string peer = RoundTrip(*client, *s.server, "site-a");
  ASSERT_EQ(s.server->peer_count(), 1u);

  s.server->Reload({});
  EXPECT_TRUE(s.server->Disconnect(peer));
  EXPECT_FALSE(s.server->Disconnect(peer));  // already gone
  EXPECT_EQ(s.server->peer_count(), 0u);
  EXPECT_EQ(s.server->Send(peer, AckMsg("site-a", 9)).code(), StatusCode::kUnavailable);
  // The client keeps redialling and sending: nothing of it reaches the server again.
  for (uint64_t id = 100; id < 115; ++id) {
    (void)client->Send(RegisterMsg("site-a", id));  // refused handshakes: sends may fail
    EXPECT_FALSE(AwaitEvent<Received>(*s.server, 100).has_value());
  }
  EXPECT_GT(s.server->refused_count(), 0u);
  EXPECT_EQ(s.server->peer_count(), 0u);
}

// Item 2: a peer that stops reading used to block Send for send_timeout_ms per frame; now
// frames wait in its own bounded queue and the peer is dropped when it overflows.
TEST(ZmqTransport, PeerThatStopsReadingIsDroppedAndSendNeverBlocks) {
  Identity agg = NewIdentity("aggregator");
  ZmqServerOptions so = PlainOptions();
  so.send_hwm = 1;
  so.max_queued_send_bytes = 8 << 20;
  Server s = StartServer(agg, {}, so);
  RawPeer slow(s.endpoint, /*rcvhwm=*/1);
  slow.SendAll(RegisterMsg("slow", 1));
  auto reg = AwaitEvent<Received>(*s.server, 2000);
  ASSERT_TRUE(reg.has_value());

  wire::FitResult big;
  big.round = 1;
  big.num_examples = 1;
  big.update = wire::FloatPayload(std::vector<float>(1 << 20, 1.0f));  // 4 MiB
  big.bytes_before_codec = big.bytes_after_codec = big.update.bytes.size();
  const wire::Message m{{kFed, "aggregator", 1, 0, 7}, big};
  int sent = 0;
  Status last;
  for (; sent < 64; ++sent) {
    last = s.server->Send(reg->peer, m);
    if (!last.ok()) break;
    (void)s.server->Poll(0);  // the loop keeps turning: flushes what fits
  }
  EXPECT_EQ(last.code(), StatusCode::kUnavailable) << "64 x 4 MiB all queued: never dropped";
  EXPECT_NE(last.message().find("stopped reading"), std::string::npos) << last.ToString();
  EXPECT_EQ(s.server->slow_peers_dropped(), 1u);
  EXPECT_EQ(s.server->peer_count(), 0u);
  EXPECT_LT(sent, 64);
}

// Item 2: all peers' partial uploads share one byte budget; a header that does not fit is
// refused, and the budget is back once the upload completes.
TEST(ZmqTransport, PartialUploadsShareOneByteBudget) {
  Identity agg = NewIdentity("aggregator");
  ZmqServerOptions so = PlainOptions();
  so.max_pending_upload_bytes = 6 << 20;
  Server s = StartServer(agg, {}, so);
  RawPeer a(s.endpoint), b(s.endpoint);
  const auto fa = UploadFrames("a", 1250000, 1);  // 5,000,000 bytes: header + 2 chunks
  const auto fb = UploadFrames("b", 1250000, 1);
  ASSERT_EQ(fa.size(), 3u);
  a.Send(fa[0]);
  a.Send(fa[1]);
  const auto until = Clock::now() + milliseconds(5000);
  while (s.server->upload_budget().used() < 5000000u && Clock::now() < until) (void)s.server->Poll(50);
  EXPECT_EQ(s.server->upload_budget().used(), 5000000u);

  b.Send(fb[0]);
  auto refused = AwaitEvent<RejectedInput>(*s.server, 2000);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason.code(), StatusCode::kOutOfRange);
  EXPECT_NE(refused->reason.message().find("shared budget"), std::string::npos)
      << refused->reason.ToString();
  EXPECT_EQ(s.server->upload_budget().used(), 5000000u);

  a.Send(fa[2]);
  auto done = AwaitEvent<Received>(*s.server, 2000);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(std::get<wire::FitResult>(done->message.body).update.element_count, 1250000u);
  EXPECT_EQ(s.server->upload_budget().used(), 0u);
}

// Item 2: an upload that stops sending chunks is dropped after upload_idle_timeout_ms and
// its share of the budget freed.
TEST(ZmqTransport, StalledUploadIsDroppedAndItsBudgetFreed) {
  Identity agg = NewIdentity("aggregator");
  ZmqServerOptions so = PlainOptions();
  so.upload_idle_timeout_ms = 200;
  Server s = StartServer(agg, {}, so);
  RawPeer a(s.endpoint);
  const auto fa = UploadFrames("a", 1250000, 1);
  a.Send(fa[0]);
  a.Send(fa[1]);
  auto dropped = AwaitEvent<RejectedInput>(*s.server, 3000);
  ASSERT_TRUE(dropped.has_value());
  EXPECT_EQ(dropped->reason.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.server->uploads_dropped(), 1u);
  EXPECT_EQ(s.server->upload_budget().used(), 0u);
  // The late last chunk matches nothing any more.
  a.Send(fa[2]);
  auto late = AwaitEvent<RejectedInput>(*s.server, 2000);
  ASSERT_TRUE(late.has_value());
  EXPECT_NE(late->reason.message().find("matches no pending message"), std::string::npos);
}

// Item 2: one Poll reads at most max_messages_per_poll messages; a flood waits in libzmq
// (bounded by recv_hwm) instead of in the server's event queue.
TEST(ZmqTransport, PollReadsABoundedNumberOfMessages) {
  Identity agg = NewIdentity("aggregator");
  ZmqServerOptions so = PlainOptions();
  so.max_messages_per_poll = 4;
  Server s = StartServer(agg, {}, so);
  RawPeer flood(s.endpoint);
  for (uint64_t i = 1; i <= 40; ++i) flood.SendAll(RegisterMsg("flood", i));
  std::this_thread::sleep_for(milliseconds(300));
  int received = 0;
  size_t most_queued = 0;
  const auto deadline = Clock::now() + milliseconds(3000);
  while (received < 40 && Clock::now() < deadline) {
    auto e = s.server->Poll(50);
    ASSERT_TRUE(e.ok());
    most_queued = std::max(most_queued, s.server->queued_events());
    if (e->has_value() && std::holds_alternative<Received>(**e)) ++received;
  }
  EXPECT_EQ(received, 40);
  EXPECT_LE(most_queued, 3u);  // 4 read, 1 returned
}

// Item 8: each key keeps one connection; a second connection with the same key closes the
// first, so an enrolled peer cannot hold many (connections are capped by the allowlist).
TEST(ZmqTransport, SecondConnectionWithTheSameKeyClosesTheFirst) {
  Identity agg = NewIdentity("aggregator");
  Identity node = NewIdentity("site-a");
  Server s = StartServer(agg, {node.public_identity()});
  auto first = StartClient(&node, s, agg);
  const std::string peer = RoundTrip(*first, *s.server, "site-a");
  auto second = StartClient(&node, s, agg);
  EXPECT_EQ(RoundTrip(*second, *s.server, "site-a"), peer);
  EXPECT_GE(s.server->duplicate_connections_closed(), 1u);
  EXPECT_EQ(s.server->peer_count(), 1u);
}

bool WaitUntilRefused(const ZmqServer& server, uint64_t n, int ms) {
  const auto deadline = Clock::now() + milliseconds(ms);
  while (Clock::now() < deadline) {
    if (server.refused_count() >= n) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return server.refused_count() >= n;
}

// Item 8: a flood of handshakes from unknown keys is logged in bounded volume: each key at
// most once per 10 s (as before), and at most 20 lines per 10 s over all keys (before: one
// line per key, so a flood of fresh keys wrote without bound).
TEST(ZmqTransport, RefusedHandshakesFromManyKeysAreLoggedInBoundedVolume) {
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", ring));
  {
    Identity agg = NewIdentity("aggregator");
    Server s = StartServer(agg, {});
    std::vector<Identity> strangers;
    std::vector<std::unique_ptr<ZmqClient>> clients;
    for (int i = 0; i < 30; ++i) strangers.push_back(NewIdentity("stranger-" + std::to_string(i)));
    for (auto& id : strangers) clients.push_back(StartClient(&id, s, agg));
    ASSERT_TRUE(WaitUntilRefused(*s.server, 30, 5000));
    std::this_thread::sleep_for(milliseconds(300));
  }
  spdlog::set_default_logger(previous);
  int lines = 0;
  for (const std::string& l : ring->last_formatted()) {
    if (l.find("ZAP: refused connection") != std::string::npos) ++lines;
  }
  EXPECT_EQ(lines, 20);
}

}  // namespace
}  // namespace fedmesh
