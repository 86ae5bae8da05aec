// ZmqRingTransport (collective/zmq_ring_transport.h): 4 ranks on loopback over CurveZMQ run
// the Communicator's collectives to the same bit-identical result as the in-process hub; a
// key outside the group never gets a chunk in; malformed frames from a member are dropped.
#include "collective/zmq_ring_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "collective/communicator.h"
#include "collective/in_process_hub.h"

namespace fedmesh::collective {
namespace {

using ::testing::HasSubstr;

Identity Make(const std::string& name) { return std::move(Identity::Generate(name)).value(); }

struct Group {
  std::vector<Identity> ids;
  std::vector<std::unique_ptr<ZmqRingTransport>> transports;
  explicit Group(int n) {
    std::vector<RingMember> members;
    for (int r = 0; r < n; ++r) {
      ids.push_back(Make("rank-" + std::to_string(r)));
      members.push_back({"", ids.back().public_identity()});
    }
    std::vector<std::string> endpoints;
    for (int r = 0; r < n; ++r) {
      auto t = ZmqRingTransport::Create(ids[r], members, "tcp://127.0.0.1:*");
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      endpoints.push_back((*t)->endpoint());
      transports.push_back(std::move(t).value());
    }
    for (auto& t : transports) t->SetEndpoints(endpoints);
  }
};

std::vector<float> Values(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::cos(0.37f * rank + 0.013f * static_cast<float>(i));
  return v;
}

// Rank r's all-reduce result over `make(r)`'s transport.
template <typename MakeTransport>
std::vector<std::vector<float>> RunAllreduce(int n, size_t len, WireType wire, MakeTransport make) {
  std::vector<std::vector<float>> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions o;
      o.ring = {n, r, 64 * 1024, wire, 0};
      o.timeout_ms = 20000;
      auto c = Communicator::Create(o, make(r));
      ASSERT_TRUE(c.ok());
      out[r] = Values(r, len);
      Status s = (*c)->Allreduce(std::span<float>(out[r]));
      EXPECT_TRUE(s.ok()) << s.ToString();
      std::vector<float> b(5, r == 0 ? 9.0f : 0.0f);
      EXPECT_TRUE((*c)->Broadcast(b, 0).ok());
      EXPECT_EQ(b, std::vector<float>(5, 9.0f));
      EXPECT_TRUE((*c)->Barrier().ok());
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(ZmqRingTransport, FourRanksOverCurveZmqMatchTheInProcessRingBitForBit) {
  const int n = 4;
  const size_t len = 300001;  // several chunks a segment
  for (WireType wire : {WireType::kFloat32, WireType::kBFloat16}) {
    Group g(n);
    auto over_zmq = RunAllreduce(n, len, wire, [&](int r) { return g.transports[r].get(); });
    InProcessHub hub(n);
    auto in_process = RunAllreduce(n, len, wire, [&](int r) { return hub.endpoint(r); });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(over_zmq[r], over_zmq[0]) << WireTypeName(wire) << " rank " << r;
      EXPECT_EQ(over_zmq[r], in_process[r]) << WireTypeName(wire) << " rank " << r;
    }
    double want = 0;
    for (int r = 0; r < n; ++r) want += Values(r, len)[12345];
    EXPECT_NEAR(over_zmq[0][12345], want / n, wire == WireType::kFloat32 ? 1e-6 : 2e-2);
  }
}

TEST(ZmqRingTransport, AStrangerCannotSendAndMalformedFramesAreDropped) {
  Group g(2);
  // A key outside the group: refused in the handshake, nothing arrives.
  Identity stranger = Make("stranger");
  zmq::context_t ctx;
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::linger, 0);
  const CurveKey& pub = stranger.public_identity().curve_public;
  const CurveKey& server = g.ids[1].public_identity().curve_public;
  zmq_setsockopt(d.handle(), ZMQ_CURVE_PUBLICKEY, pub.data(), pub.size());
  zmq_setsockopt(d.handle(), ZMQ_CURVE_SECRETKEY, stranger.curve_secret().data(), 32);
  zmq_setsockopt(d.handle(), ZMQ_CURVE_SERVERKEY, server.data(), server.size());
  d.connect(g.transports[1]->endpoint());
  Chunk c;
  const std::string sixteen(16, 'x');
  c.bytes = sixteen;
  d.send(zmq::buffer(EncodeChunkHeader(c)), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  d.send(zmq::buffer(sixteen), zmq::send_flags::dontwait);
  auto got = g.transports[1]->Receive(500);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_GE(g.transports[1]->refused_handshakes(), 1u);

  // A member's malformed frames: a short header, a wrong magic, a size that lies, one frame.
  zmq::socket_t m(ctx, zmq::socket_type::dealer);
  m.set(zmq::sockopt::linger, 0);
  const CurveKey& mp = g.ids[0].public_identity().curve_public;
  zmq_setsockopt(m.handle(), ZMQ_CURVE_PUBLICKEY, mp.data(), mp.size());
  zmq_setsockopt(m.handle(), ZMQ_CURVE_SECRETKEY, g.ids[0].curve_secret().data(), 32);
  zmq_setsockopt(m.handle(), ZMQ_CURVE_SERVERKEY, server.data(), server.size());
  m.connect(g.transports[1]->endpoint());
  std::string header = EncodeChunkHeader(c);
  std::string bad_magic = header;
  bad_magic[0] = 'Z';
  m.send(zmq::buffer(header.substr(0, 20)), zmq::send_flags::sndmore);
  m.send(zmq::buffer(sixteen));
  m.send(zmq::buffer(bad_magic), zmq::send_flags::sndmore);
  m.send(zmq::buffer(sixteen));
  m.send(zmq::buffer(header), zmq::send_flags::sndmore);
  m.send(zmq::buffer(std::string(15, 'x')));
  m.send(zmq::buffer(header));
  m.send(zmq::buffer(header), zmq::send_flags::sndmore);  // and one good chunk last
  m.send(zmq::buffer(sixteen));
  got = g.transports[1]->Receive(5000);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->first, 0) << "the sender's rank comes from its authenticated key";
  EXPECT_EQ((*got)->second.bytes.view(), sixteen);
  EXPECT_EQ(g.transports[1]->malformed(), 4u);
}

TEST(ZmqRingTransport, HeaderRoundTripsAndRefusesWhatIsNotAHeader) {
  Chunk c;
  c.generation = 3;
  c.op = 1ull << 40;
  c.kind = OpKind::kAllgather;
  c.phase = 1;
  c.step = 6;
  c.block = 7;
  c.index = 123456;
  c.wire = WireType::kFloat16;
  c.bytes = std::string("abcd");
  Chunk back;
  ASSERT_TRUE(DecodeChunkHeader(EncodeChunkHeader(c), &back).ok());
  EXPECT_EQ(back.generation, 3u);
  EXPECT_EQ(back.op, 1ull << 40);
  EXPECT_EQ(back.kind, OpKind::kAllgather);
  EXPECT_EQ(back.phase, 1);
  EXPECT_EQ(back.step, 6u);
  EXPECT_EQ(back.block, 7u);
  EXPECT_EQ(back.index, 123456u);
  EXPECT_EQ(back.wire, WireType::kFloat16);
  std::string h = EncodeChunkHeader(c);
  h[5] = 9;  // no such kind
  EXPECT_THAT(DecodeChunkHeader(h, &back).message(), HasSubstr("unknown kind"));
  EXPECT_FALSE(DecodeChunkHeader("short", &back).ok());
}

TEST(ZmqRingTransport, AGroupWithoutThisKeyOrWithAKeyTwiceIsRefused) {
  Identity a = Make("a"), b = Make("b");
  auto t = ZmqRingTransport::Create(a, {{"", b.public_identity()}}, "tcp://127.0.0.1:*");
  EXPECT_THAT(t.status().message(), HasSubstr("is not a member"));
  t = ZmqRingTransport::Create(a, {{"", a.public_identity()}, {"", a.public_identity()}}, "tcp://127.0.0.1:*");
  EXPECT_THAT(t.status().message(), HasSubstr("listed twice"));
}

// Closing a transport delivers what is still queued (linger_ms): a rank whose last chunks
// wait behind a successor that is slow to read (or a link with delay) must not drop them
// when it finishes first. With a linger of 0 (the default before) the successor got only
// what the kernel had taken before the close and waited for ever for the rest.
TEST(ZmqRingTransport, ClosingDeliversTheChunksStillQueued) {
  Group g(2);
  constexpr int kChunks = 64;
  const std::string payload(1 << 20, 'p');  // 64 MiB in all: more than the socket buffers
  std::thread sender([&] {
    for (int i = 0; i < kChunks; ++i) {
      Chunk c;
      c.op = 1;
      c.index = static_cast<uint32_t>(i);
      c.bytes = payload;
      ASSERT_TRUE(g.transports[0]->Send(1, std::move(c)).ok());
    }
    g.transports[0].reset();  // closes at once; lingers until the queue is delivered
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the successor reads late
  int got = 0;
  while (got < kChunks) {
    auto r = g.transports[1]->Receive(5000);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (!r->has_value()) break;
    EXPECT_EQ((*r)->second.index, static_cast<uint32_t>(got));
    ++got;
  }
  sender.join();
  EXPECT_EQ(got, kChunks) << "chunks queued at the close were dropped";
}

}  // namespace
}  // namespace fedmesh::collective
