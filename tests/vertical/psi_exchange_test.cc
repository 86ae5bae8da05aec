// Private set intersection over a collective transport (vertical/psi_exchange.h): two
// parties on threads, in process and over real CurveZMQ on loopback. Both end with the
// plain intersection in one order; what crossed the wire holds no id; a silent peer is a
// deadline error, not a hang.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "collective/in_process_hub.h"
#include "collective/zmq_ring_transport.h"
#include "vertical/psi_exchange.h"

namespace fedmesh::vertical {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Ids(int from, int to) {
  std::vector<std::string> v;
  for (int i = from; i < to; ++i) v.push_back("patient-" + std::to_string(i));
  return v;
}

struct Side {
  Result<psi::PsiResult> result = Status::Internal("not run");
  PsiExchangeStats stats;
};

// Runs both parties at once over transports a (rank 0) and b (rank 1).
std::pair<Side, Side> RunBoth(collective::CollectiveTransport& a, collective::CollectiveTransport& b,
                              const std::vector<std::string>& x, const std::vector<std::string>& y,
                              std::string* wire) {
  std::mutex mu;
  PsiExchangeOptions o;
  o.timeout_ms = 30000;
  o.observe = [&](bool sent, std::string_view bytes) {
    std::lock_guard<std::mutex> l(mu);
    if (sent) wire->append(bytes);
  };
  psi::PsiOptions po;
  po.batch = 100;
  auto pa = psi::PsiParty::Create(x, po);
  auto pb = psi::PsiParty::Create(y, po);
  EXPECT_TRUE(pa.ok() && pb.ok());
  std::pair<Side, Side> r;
  std::thread t([&] { r.second.result = RunPsi(b, 0, **pb, o, &r.second.stats); });
  r.first.result = RunPsi(a, 1, **pa, o, &r.first.stats);
  t.join();
  return r;
}

void ExpectAligned(const std::vector<std::string>& x, const std::vector<std::string>& y, const std::pair<Side, Side>& r) {
  ASSERT_TRUE(r.first.result.ok()) << r.first.result.status().ToString();
  ASSERT_TRUE(r.second.result.ok()) << r.second.result.status().ToString();
  std::vector<std::string> ia, ib;
  for (uint64_t k : r.first.result->rows) ia.push_back(x[k]);
  for (uint64_t k : r.second.result->rows) ib.push_back(y[k]);
  EXPECT_EQ(ia, ib);
  std::set<std::string> sy(y.begin(), y.end());
  size_t plain = 0;
  for (const auto& v : x) plain += sy.count(v);
  EXPECT_EQ(ia.size(), plain);
  // Each party's ids cross twice as 32-byte points (blinded, then returned), plus headers.
  EXPECT_EQ(r.first.stats.bytes_received, r.second.stats.bytes_sent);
  const uint64_t points = 32 * (x.size() + y.size());
  EXPECT_GE(r.first.stats.bytes_sent, points);
  EXPECT_LE(r.first.stats.bytes_sent, points + 64 * 20);
}

TEST(PsiExchangeTest, InProcess) {
  collective::InProcessHub hub(2);
  const auto x = Ids(0, 700), y = Ids(300, 1000);
  std::string wire;
  const auto r = RunBoth(*hub.endpoint(0), *hub.endpoint(1), x, y, &wire);
  ExpectAligned(x, y, r);
  EXPECT_EQ(r.first.result->rows.size(), 400u);
  EXPECT_EQ(wire.find("patient"), std::string::npos);
}

TEST(PsiExchangeTest, OverCurveZmqOnLoopback) {
  std::vector<Identity> ids;
  ids.push_back(std::move(Identity::Generate("bank")).value());
  ids.push_back(std::move(Identity::Generate("insurer")).value());
  std::vector<collective::RingMember> members = {{"", ids[0].public_identity()}, {"", ids[1].public_identity()}};
  collective::ZmqRingTransportOptions to;
  to.linger_ms = 5000;
  auto ta = collective::ZmqRingTransport::Create(ids[0], members, "tcp://127.0.0.1:*", to);
  auto tb = collective::ZmqRingTransport::Create(ids[1], members, "tcp://127.0.0.1:*", to);
  ASSERT_TRUE(ta.ok() && tb.ok());
  const std::vector<std::string> endpoints = {(*ta)->endpoint(), (*tb)->endpoint()};
  (*ta)->SetEndpoints(endpoints);
  (*tb)->SetEndpoints(endpoints);
  const auto x = Ids(0, 500), y = Ids(100, 1200);
  std::string wire;
  const auto r = RunBoth(**ta, **tb, x, y, &wire);
  ExpectAligned(x, y, r);
  EXPECT_EQ(r.first.result->rows.size(), 400u);
  EXPECT_EQ(wire.find("patient"), std::string::npos);
}

TEST(PsiExchangeTest, ASilentPeerIsADeadlineNotAHang) {
  collective::InProcessHub hub(2);
  auto p = psi::PsiParty::Create(Ids(0, 10));
  ASSERT_TRUE(p.ok());
  PsiExchangeOptions o;
  o.timeout_ms = 200;
  auto r = RunPsi(*hub.endpoint(0), 1, **p, o);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("heard nothing from rank 1 for 200 ms"));
}

TEST(PsiExchangeTest, AGarbageMessageFromThePeerIsNamed) {
  collective::InProcessHub hub(2);
  auto p = psi::PsiParty::Create(Ids(0, 10));
  ASSERT_TRUE(p.ok());
  collective::Chunk c;
  c.kind = collective::OpKind::kMessage;
  c.bytes = collective::Payload(std::string(80, 'z'));
  ASSERT_TRUE(hub.endpoint(1)->Send(0, c).ok());
  auto r = RunPsi(*hub.endpoint(0), 1, **p);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("from rank 1: psi message: wrong magic"));
  // A ring chunk where a PSI message belongs.
  auto p2 = psi::PsiParty::Create(Ids(0, 10));
  collective::Chunk ring;
  ASSERT_TRUE(hub.endpoint(1)->Send(0, ring).ok());
  EXPECT_THAT(RunPsi(*hub.endpoint(0), 1, **p2).status().message(), HasSubstr("unexpected chunk kind"));
}

}  // namespace
}  // namespace fedmesh::vertical
