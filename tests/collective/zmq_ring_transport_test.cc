// ZmqRingTransport (collective/zmq_ring_transport.h): 4 ranks on loopback over CurveZMQ and
// over AES-256-GCM sealed links run the Communicator's collectives to the same bit-identical
// result as the in-process hub; a key outside the group never gets a chunk in; malformed
// frames from a member are dropped; a sealed chunk altered, replayed or sent by an impostor
// is dropped; a member that restarts is linked to anew.
#include "collective/zmq_ring_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
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
  std::vector<RingMember> members;
  std::vector<std::unique_ptr<ZmqRingTransport>> transports;
  explicit Group(int n, const ZmqRingTransportOptions& options = {}) {
    for (int r = 0; r < n; ++r) {
      ids.push_back(Make("rank-" + std::to_string(r)));
      members.push_back({"", ids.back().public_identity()});
    }
    std::vector<std::string> endpoints;
    for (int r = 0; r < n; ++r) {
      auto t = ZmqRingTransport::Create(ids[r], members, "tcp://127.0.0.1:*", options);
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

ZmqRingTransportOptions With(RingSecurity security) {
  ZmqRingTransportOptions o;
  o.security = security;
  return o;
}

class ZmqRingSecurity : public ::testing::TestWithParam<RingSecurity> {};

INSTANTIATE_TEST_SUITE_P(Secured, ZmqRingSecurity,
                         ::testing::Values(RingSecurity::kCurve, RingSecurity::kAes256Gcm),
                         [](const auto& info) { return info.param == RingSecurity::kCurve ? "curve" : "aes_256_gcm"; });

TEST_P(ZmqRingSecurity, FourRanksMatchTheInProcessRingBitForBit) {
  const int n = 4;
  const size_t len = 300001;  // several chunks a segment
  for (WireType wire : {WireType::kFloat32, WireType::kBFloat16}) {
    Group g(n, With(GetParam()));
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
TEST_P(ZmqRingSecurity, ClosingDeliversTheChunksStillQueued) {
  Group g(2, With(GetParam()));
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

// A plain DEALER speaking the sealed-link protocol by hand.
struct RawDealer {
  zmq::context_t ctx;
  zmq::socket_t d{ctx, zmq::socket_type::dealer};
  explicit RawDealer(const std::string& endpoint) {
    d.set(zmq::sockopt::linger, 0);
    d.set(zmq::sockopt::rcvtimeo, 5000);
    d.connect(endpoint);
  }
  std::string Recv() {
    zmq::message_t m;
    return d.recv(m) ? m.to_string() : std::string();
  }
  void Send(const std::string& frame, const std::string& payload) {
    d.send(zmq::buffer(frame), zmq::send_flags::sndmore);
    d.send(zmq::buffer(payload));
  }
};

TEST(ZmqRingTransport, AesGcmLinksDropStrangersAlteredAndReplayedChunks) {
  Group g(2, With(RingSecurity::kAes256Gcm));
  ZmqRingTransport& b = *g.transports[1];
  Chunk c;
  c.op = 5;
  c.bytes = std::string(1000, 'v');
  const std::string header = EncodeChunkHeader(c);

  // Data on a connection that never said HELLO: answered UNKNOWN, dropped.
  RawDealer nobody(b.endpoint());
  nobody.Send(std::string(kSealedDataFrameBytes, '\0'), "x");  // not even a DATA frame
  std::string fake = SealedUnknownFrame();
  fake[5] = 4;  // DATA's type byte
  fake.resize(kSealedDataFrameBytes, '\0');
  nobody.Send(fake, std::string(1000, 'v'));
  auto got = b.Receive(300);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(SealedFrameTypeOf(nobody.Recv()), SealedFrameType::kUnknown);
  EXPECT_EQ(b.malformed(), 2u);

  // A stranger claiming rank 0: WELCOME does not verify at its end; what it sends anyway
  // (sealed with the key it derived) does not open at B.
  Identity stranger = Make("stranger");
  RawDealer s(b.endpoint());
  auto link = SealedSender::Start(stranger, 0, 1, g.ids[1].public_identity().curve_public);
  s.d.send(zmq::buffer(link->hello()));
  ASSERT_TRUE(b.Receive(300).ok());  // B answers the HELLO
  EXPECT_THAT(link->Accept(s.Recv()).message(), HasSubstr("does not verify"));

  // Rank 0 by hand: a good chunk, then the same frames again (a replay), then an altered one,
  // then a good one: only the two good ones arrive, from rank 0.
  RawDealer a(b.endpoint());
  auto a_link = SealedSender::Start(g.ids[0], 0, 2, g.ids[1].public_identity().curve_public);
  a.d.send(zmq::buffer(a_link->hello()));
  ASSERT_TRUE(b.Receive(300).ok());
  ASSERT_TRUE(a_link->Accept(a.Recv()).ok());
  const std::string p1_plain(c.bytes.view());
  std::string p1 = p1_plain;
  auto f1 = a_link->Seal(header, std::span<uint8_t>(reinterpret_cast<uint8_t*>(p1.data()), p1.size()));
  a.Send(*f1, p1);
  a.Send(*f1, p1);  // replay
  std::string p2 = p1_plain;
  auto f2 = a_link->Seal(header, std::span<uint8_t>(reinterpret_cast<uint8_t*>(p2.data()), p2.size()));
  p2[10] ^= 1;
  a.Send(*f2, p2);  // altered: dropped, and the counter stays at 1
  p2[10] ^= 1;
  a.Send(*f2, p2);  // the same chunk unaltered
  int arrived = 0;
  for (;;) {
    got = b.Receive(1000);
    ASSERT_TRUE(got.ok());
    if (!got->has_value()) break;
    EXPECT_EQ((*got)->first, 0);
    EXPECT_EQ((*got)->second.op, 5u);
    EXPECT_EQ((*got)->second.bytes.view(), p1_plain);
    ++arrived;
  }
  EXPECT_EQ(arrived, 2);
  EXPECT_EQ(b.malformed(), 2u + 2u) << "the replay and the altered chunk";
}

// Rank 0 keeps sending to rank 1 (and reading, which is when its transport reads WELCOMEs);
// rank 1 restarts at the same endpoint. The chunks sealed for the old process are refused
// (UNKNOWN), rank 0 agrees a link with the new one, and from the first chunk that arrives
// every later one arrives, in order.
TEST(ZmqRingTransport, AesGcmLinkIsAgreedAnewWhenAMemberRestarts) {
  const ZmqRingTransportOptions o = With(RingSecurity::kAes256Gcm);
  Group g(2, o);
  std::atomic<bool> done{false};
  std::thread rank0([&] {
    for (uint32_t i = 0; i < 2000 && !done; ++i) {
      Chunk c;
      c.op = 1;
      c.index = i;
      c.bytes = std::string("chunk ") + std::to_string(i);
      EXPECT_TRUE(g.transports[0]->Send(1, std::move(c)).ok());
      EXPECT_TRUE(g.transports[0]->Receive(10).ok());
    }
  });
  auto got = g.transports[1]->Receive(10000);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->second.index, 0u) << "chunks sent before the link was agreed waited for it, in order";

  const std::string endpoint = g.transports[1]->endpoint();
  g.transports[1].reset();
  auto restarted = ZmqRingTransport::Create(g.ids[1], g.members, endpoint, o);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  got = (*restarted)->Receive(10000);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value()) << "no chunk reached the restarted member";
  EXPECT_EQ((*got)->first, 0);
  const uint32_t first = (*got)->second.index;
  for (uint32_t k = 1; k <= 5; ++k) {
    got = (*restarted)->Receive(5000);
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->second.index, first + k);
  }
  done = true;
  rank0.join();
  EXPECT_GE((*restarted)->malformed(), 1u) << "chunks sealed for the old process are refused";
}

// A stranger opening 40 connections that each say HELLO (as rank 0) fills rank 1's table of
// links (4 per member), but evicts links no chunk has proven first: rank 0's agreed link
// goes on working.
TEST(ZmqRingTransport, AesGcmHelloFloodDoesNotEvictAProvenLink) {
  Group g(2, With(RingSecurity::kAes256Gcm));
  ZmqRingTransport &a = *g.transports[0], &b = *g.transports[1];
  auto chunk = [](uint32_t index) {
    Chunk c;
    c.op = 1;
    c.index = index;
    c.bytes = std::string(100, 'c');
    return c;
  };
  ASSERT_TRUE(a.Send(1, chunk(0)).ok());  // waits for the link
  ASSERT_TRUE(b.Receive(200).ok());       // b answers the HELLO
  ASSERT_TRUE(a.Receive(200).ok());       // a reads the WELCOME and sends chunk 0
  auto got = b.Receive(5000);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->second.index, 0u);

  Identity stranger = Make("stranger");
  zmq::context_t ctx;
  std::vector<zmq::socket_t> flood;
  for (int i = 0; i < 40; ++i) {
    flood.emplace_back(ctx, zmq::socket_type::dealer);
    flood.back().set(zmq::sockopt::linger, 0);
    flood.back().connect(b.endpoint());
    auto hello = SealedSender::Start(stranger, 0, 100 + i, g.ids[1].public_identity().curve_public);
    flood.back().send(zmq::buffer(hello->hello()));
  }
  got = b.Receive(1000);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  ASSERT_TRUE(a.Send(1, chunk(1)).ok());
  got = b.Receive(5000);
  ASSERT_TRUE(got.ok() && got->has_value()) << "rank 0's link was evicted by the stranger's HELLOs";
  EXPECT_EQ((*got)->first, 0);
  EXPECT_EQ((*got)->second.index, 1u);
  EXPECT_EQ(b.malformed(), 0u);
}

// Two members configured with different securities never hear each other; they see their
// connections refused for the mechanism (libzmq tells whichever end reads the other's
// greeting first; the dialer redials until its end does, or for ever), count them and log
// the first (then at most one line per 30 s), so the mismatch does not pass for a member
// that is down.
TEST(ZmqRingTransport, AMemberWithAnotherSecurityIsNamedAsSuchInTheLog) {
  for (auto [mine, theirs] : std::vector<std::pair<RingSecurity, RingSecurity>>{
           {RingSecurity::kCurve, RingSecurity::kAes256Gcm},
           {RingSecurity::kAes256Gcm, RingSecurity::kCurve},
           {RingSecurity::kCurve, RingSecurity::kNone}}) {
    SCOPED_TRACE(std::string(RingSecurityName(mine)) + " against " + RingSecurityName(theirs));
    std::vector<Identity> ids;
    ids.push_back(Make("rank-0"));
    ids.push_back(Make("rank-1"));
    std::vector<RingMember> members = {{"", ids[0].public_identity()}, {"", ids[1].public_identity()}};
    std::vector<std::string> lines[2];
    ZmqRingTransportOptions o[2] = {With(mine), With(theirs)};
    std::vector<std::unique_ptr<ZmqRingTransport>> t;
    for (int r = 0; r < 2; ++r) {
      o[r].log = [&lines, r](const std::string& line) { lines[r].push_back(line); };
      o[r].send_timeout_ms = 1000;
      auto made = ZmqRingTransport::Create(ids[r], members, "tcp://127.0.0.1:*", o[r]);
      ASSERT_TRUE(made.ok());
      t.push_back(std::move(made).value());
    }
    for (auto& x : t) x->SetEndpoints({t[0]->endpoint(), t[1]->endpoint()});
    for (int r = 0; r < 2; ++r) {
      Chunk c;
      c.op = 1;
      c.bytes = std::string("hello");
      ASSERT_TRUE(t[r]->Send(1 - r, std::move(c)).ok());
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < until &&
           (t[0]->mechanism_mismatches() == 0 || t[1]->mechanism_mismatches() == 0)) {
      for (auto& x : t) {
        auto got = x->Receive(20);
        ASSERT_TRUE(got.ok());
        EXPECT_FALSE(got->has_value()) << "a chunk crossed a security mismatch";
      }
    }
    // Almost always both ends see it within 0.2 s; at least one always does.
    EXPECT_GE(t[0]->mechanism_mismatches() + t[1]->mechanism_mismatches(), 1u);
    for (int r = 0; r < 2; ++r) {
      if (t[r]->mechanism_mismatches() == 0) continue;
      ASSERT_EQ(lines[r].size(), 1u) << "rank " << r << ": logged once, however often it is seen";
      EXPECT_THAT(lines[r][0], HasSubstr("offered another security mechanism than this member's (" +
                                         std::string(RingSecurityName(r == 0 ? mine : theirs)) + ")"));
      EXPECT_THAT(lines[r][0], HasSubstr("every member of the group must set the same security"));
      EXPECT_THAT(lines[r][0], HasSubstr("127.0.0.1"));
    }
    // A member whose own dialled connection was refused so fails its sends at once (libzmq
    // never dials again); otherwise a send still queues, as for a member that is down.
    for (int r = 0; r < 2; ++r) {
      const bool dialled_refused = !lines[r].empty() && lines[r][0].starts_with("the connection to rank-");
      Chunk c;
      c.op = 2;
      c.bytes = std::string("again");
      // send_timeout_ms is 1 s here: a send that waited it out would be Unavailable.
      Status sent = t[r]->Send(1 - r, std::move(c));
      if (dialled_refused) {
        EXPECT_EQ(sent.code(), StatusCode::kFailedPrecondition) << sent.ToString();
        EXPECT_THAT(sent.message(), HasSubstr("refused this member's connection: it offered another security"));
      } else if (!sent.ok()) {
        EXPECT_EQ(sent.code(), StatusCode::kFailedPrecondition) << sent.ToString();
      }
    }
    for (auto& x : t) x->SetLinger(0);  // their chunks can never go
  }
}

// CurveZMQ: rank 1 starts with an allow list that lacks rank 0's key and refuses it; libzmq
// would never dial that connection again, so without a new socket rank 0 could not reach
// rank 1 even after rank 1 restarts admitting the key. Rank 0 logs the refusal once, dials
// again while it sends, and its chunks reach the restarted rank 1.
TEST(ZmqRingTransport, ACurveDialRefusedForItsKeyIsDialledAgainAndReachesTheMemberLater) {
  std::vector<Identity> ids;
  ids.push_back(Make("rank-0"));
  ids.push_back(Make("rank-1"));
  Identity other = Make("not-rank-0");
  const std::vector<RingMember> group = {{"", ids[0].public_identity()}, {"", ids[1].public_identity()}};
  const std::vector<RingMember> wrong = {{"", other.public_identity()}, {"", ids[1].public_identity()}};
  std::vector<std::string> lines;
  ZmqRingTransportOptions o;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  auto a = ZmqRingTransport::Create(ids[0], group, "tcp://127.0.0.1:*", o);
  auto b = ZmqRingTransport::Create(ids[1], wrong, "tcp://127.0.0.1:*");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string b_endpoint = (*b)->endpoint();
  (*a)->SetEndpoints({(*a)->endpoint(), b_endpoint});
  uint32_t index = 0;
  auto send = [&] {
    Chunk c;
    c.op = 1;
    c.index = index++;
    c.bytes = std::string("chunk");
    ASSERT_TRUE((*a)->Send(1, std::move(c)).ok());
  };
  send();
  for (int i = 0; i < 100 && (*a)->key_refusals() == 0; ++i) {
    ASSERT_TRUE((*a)->Receive(20).ok());
    auto got = (*b)->Receive(0);
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(got->has_value()) << "a refused key got a chunk in";
  }
  ASSERT_GE((*a)->key_refusals(), 1u);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("rank-1 (rank 1, " + b_endpoint + ") refused this member's key (ZAP status 400): is "
                                  "this member's public key in its allow directory?"));

  b->reset();  // rank 1 restarts, now admitting rank 0's key
  auto b2 = ZmqRingTransport::Create(ids[1], group, b_endpoint);
  ASSERT_TRUE(b2.ok()) << b2.status().ToString();
  std::optional<std::pair<int, Chunk>> got;
  for (int i = 0; i < 50 && !got; ++i) {  // 5 s: the redial comes 1 s after the refusal
    send();
    ASSERT_TRUE((*a)->Receive(0).ok());
    auto r = (*b2)->Receive(100);
    ASSERT_TRUE(r.ok());
    got = std::move(*r);
  }
  ASSERT_TRUE(got.has_value()) << "rank 0 never dialled the restarted rank 1 again";
  EXPECT_EQ(got->first, 0);
  EXPECT_GE(got->second.index, 1u) << "the chunk sent on the refused connection is lost";
  (*a)->SetLinger(0);
}

// The same securities on both sides: no mismatch is counted or logged.
TEST_P(ZmqRingSecurity, MatchingSecuritiesCountNoMismatch) {
  ZmqRingTransportOptions o = With(GetParam());
  std::vector<std::string> lines;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  Group g(2, o);
  Chunk c;
  c.op = 1;
  c.bytes = std::string("hello");
  ASSERT_TRUE(g.transports[1]->Send(0, std::move(c)).ok());
  std::optional<std::pair<int, Chunk>> got;
  for (int i = 0; i < 50 && !got; ++i) {
    auto r = g.transports[0]->Receive(100);
    ASSERT_TRUE(r.ok());
    got = std::move(*r);
    ASSERT_TRUE(g.transports[1]->Receive(0).ok());  // sealed links: rank 1 reads the WELCOME
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->second.bytes.view(), "hello");
  EXPECT_EQ(g.transports[0]->mechanism_mismatches(), 0u);
  EXPECT_TRUE(lines.empty());
}

}  // namespace
}  // namespace fedmesh::collective
