// ECDH private set intersection (crypto/psi/): two PsiParty objects exchanging messages in
// memory. Known sets (empty, disjoint, equal, one element, partial), a property test that the
// result is the plain intersection with both sides' rows naming the same ids in the same
// order, an order that is not the ids' sort order, duplicates refused, no id on the wire,
// and every malformed or out-of-protocol message refused with a reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "crypto/psi/ecdh_psi.h"
#include "crypto/psi/psi_messages.h"
#include "crypto/psi/ristretto_points.h"

namespace fedmesh::psi {
namespace {

using ::testing::HasSubstr;

struct PairRun {
  Status status_a, status_b;
  PsiResult a, b;
  std::vector<std::string> wire;  // every message, both ways
};

// Runs A and B to the end, delivering messages alternately (first in, first out per
// direction). `tamper` may change a message from A to B.
PairRun RunPair(const std::vector<std::string>& ids_a, const std::vector<std::string>& ids_b, PsiOptions oa = {},
            PsiOptions ob = {}, std::function<void(std::string&)> tamper = nullptr) {
  PairRun r;
  auto a = PsiParty::Create(ids_a, oa);
  auto b = PsiParty::Create(ids_b, ob);
  if (!a.ok() || !b.ok()) {
    r.status_a = a.status();
    r.status_b = b.status();
    return r;
  }
  std::deque<std::string> to_a, to_b;
  auto sa = (*a)->Start();
  auto sb = (*b)->Start();
  EXPECT_TRUE(sa.ok() && sb.ok());
  for (auto& m : *sa) to_b.push_back(m);
  for (auto& m : *sb) to_a.push_back(m);
  while ((!to_a.empty() || !to_b.empty()) && r.status_a.ok() && r.status_b.ok()) {
    if (!to_b.empty()) {
      std::string m = std::move(to_b.front());
      to_b.pop_front();
      if (tamper) tamper(m);
      r.wire.push_back(m);
      std::vector<std::string> out;
      r.status_b = (*b)->Receive(m, &out);
      for (auto& o : out) to_a.push_back(o);
    }
    if (!to_a.empty()) {
      std::string m = std::move(to_a.front());
      to_a.pop_front();
      r.wire.push_back(m);
      std::vector<std::string> out;
      r.status_a = (*a)->Receive(m, &out);
      for (auto& o : out) to_b.push_back(o);
    }
  }
  if (r.status_a.ok() && !(*a)->done()) r.status_a = Status::Internal("A not done");
  if (r.status_b.ok() && !(*b)->done()) r.status_b = Status::Internal("B not done");
  if (r.status_a.ok()) r.a = (*a)->result();
  if (r.status_b.ok()) r.b = (*b)->result();
  return r;
}

std::vector<std::string> Ids(const std::vector<std::string>& ids, const std::vector<uint64_t>& rows) {
  std::vector<std::string> out;
  for (uint64_t r : rows) out.push_back(ids.at(r));
  return out;
}

std::vector<std::string> Range(const std::string& prefix, int from, int to) {
  std::vector<std::string> v;
  for (int i = from; i < to; ++i) v.push_back(prefix + std::to_string(i));
  return v;
}

// Checks both sides agree and found exactly the plain intersection.
void ExpectIntersection(const std::vector<std::string>& x, const std::vector<std::string>& y, const PairRun& r) {
  ASSERT_TRUE(r.status_a.ok()) << r.status_a.ToString();
  ASSERT_TRUE(r.status_b.ok()) << r.status_b.ToString();
  const auto ia = Ids(x, r.a.rows), ib = Ids(y, r.b.rows);
  EXPECT_EQ(ia, ib) << "row k must be the same record on both sides";
  std::set<std::string> sx(x.begin(), x.end()), plain;
  for (const auto& v : y)
    if (sx.count(v)) plain.insert(v);
  EXPECT_EQ(std::set<std::string>(ia.begin(), ia.end()), plain);
  EXPECT_EQ(ia.size(), plain.size());
  EXPECT_EQ(r.a.my_count, x.size());
  EXPECT_EQ(r.a.peer_count, y.size());
  EXPECT_EQ(r.b.peer_count, x.size());
  EXPECT_EQ(r.a.digest, r.b.digest);
}

TEST(PsiTest, KnownSets) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{}, {}},
      {{}, {"a", "b"}},
      {{"a", "b"}, {}},
      {{"a", "b", "c"}, {"d", "e"}},                   // disjoint
      {{"a", "b", "c"}, {"c", "a", "b"}},              // equal, another order
      {{"only"}, {"only"}},                            // one element
      {{"only"}, {"other"}},
      {{"x1", "x2", "shared", "x3"}, {"shared", "y"}},  // one in common
      {{"", "a"}, {"", "b"}},                          // the empty string is an id like another
  };
  for (const auto& [x, y] : cases) {
    SCOPED_TRACE(::testing::PrintToString(x) + " vs " + ::testing::PrintToString(y));
    ExpectIntersection(x, y, RunPair(x, y));
  }
  const auto r = RunPair({"a", "b", "c"}, {"c", "a", "b"});
  EXPECT_EQ(r.a.rows.size(), 3u);
  EXPECT_EQ(RunPair({"a"}, {"b"}).a.rows.size(), 0u);
}

TEST(PsiTest, PropertyResultIsThePlainIntersectionInOneSharedOrder) {
  Rng rng(2026);
  for (int trial = 0; trial < 25; ++trial) {
    const int universe = 1 + static_cast<int>(rng.UniformInt(300));
    std::vector<std::string> x, y;
    for (int i = 0; i < universe; ++i) {
      const std::string id = "cust-" + std::to_string(i * 7919 % 100003);
      if (rng.Uniform() < 0.6) x.push_back(id);
      if (rng.Uniform() < 0.6) y.push_back(id);
    }
    PsiOptions o;
    o.batch = 1 + static_cast<uint32_t>(rng.UniformInt(40));  // many batches, odd sizes
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(x.size()) + " vs " +
                 std::to_string(y.size()) + ", batch " + std::to_string(o.batch));
    ExpectIntersection(x, y, RunPair(x, y, o, o));
  }
}

TEST(PsiTest, TheOrderIsASeededPermutationNotTheIdsSortOrder) {
  const auto x = Range("id-", 0, 300), y = Range("id-", 100, 400);
  const auto r = RunPair(x, y);
  ExpectIntersection(x, y, r);
  auto ids = Ids(x, r.a.rows);
  EXPECT_FALSE(std::is_sorted(ids.begin(), ids.end()));
  // Another run has other nonces, so another order of the same set.
  const auto r2 = RunPair(x, y);
  EXPECT_NE(Ids(x, r2.a.rows), ids);
  EXPECT_NE(r2.a.digest, r.a.digest);
  // The parties must give the same order_seed: otherwise they disagree, and say so.
  PsiOptions other;
  other.order_seed = 7;
  const auto bad = RunPair(x, y, {}, other);
  EXPECT_EQ(bad.status_a.code(), StatusCode::kCorruption);
  EXPECT_THAT(bad.status_a.message() + bad.status_b.message(), HasSubstr("disagree on the intersection"));
}

TEST(PsiTest, DuplicateIdsAreAClearError) {
  auto p = PsiParty::Create(std::vector<std::string>{"a", "b", "a"});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("id \"a\" appears twice (ids 1 and 3)"));
}

TEST(PsiTest, NoIdTravelsInTheClear) {
  std::vector<std::string> x, y;
  for (int i = 0; i < 200; ++i) x.push_back("CUSTOMER-" + std::to_string(100000 + i));
  for (int i = 100; i < 300; ++i) y.push_back("CUSTOMER-" + std::to_string(100000 + i));
  const auto r = RunPair(x, y);
  ExpectIntersection(x, y, r);
  ASSERT_GE(r.wire.size(), 6u);
  std::string all;
  for (const auto& m : r.wire) all += m;
  EXPECT_EQ(all.find("CUSTOMER"), std::string::npos);
  for (const auto& id : x) EXPECT_EQ(all.find(id.substr(9)), std::string::npos) << id;  // not even the digits
  // Nor the hashed ids (the points before blinding): those a dictionary attack could test.
  const std::vector<Point> hashed = HashIds(x);
  for (const Point& p : hashed) {
    EXPECT_EQ(all.find(std::string(reinterpret_cast<const char*>(p.data()), p.size())), std::string::npos);
  }
}

TEST(PsiTest, SetsOverTheLimitAreRefusedBeforeAllocating) {
  PsiOptions small;
  small.max_ids = 3;
  EXPECT_THAT(PsiParty::Create(Range("a", 0, 4), small).status().message(), HasSubstr("over the limit of 3"));
  // A peer claiming a bigger set than this side accepts.
  const auto r = RunPair(Range("a", 0, 10), Range("a", 0, 3), {}, small);
  EXPECT_EQ(r.status_b.code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status_b.message(), HasSubstr("a set of 10 ids is over the limit of 3"));
}

TEST(PsiTest, MalformedMessagesAreRefusedWithAReason) {
  const Point p{};
  const std::string good = EncodePsiMessage(PsiMessageType::kBlinded, 2, 0, PsiTag{}, std::vector<Point>{p});
  ASSERT_TRUE(DecodePsiMessage(good, 10).ok());
  auto reason = [](std::string m) { return DecodePsiMessage(m, 10).status().message(); };
  EXPECT_THAT(reason(good.substr(0, 10)), HasSubstr("shorter than the 64-byte header"));
  std::string m = good;
  m[0] = 'X';
  EXPECT_THAT(reason(m), HasSubstr("wrong magic"));
  m = good;
  m[4] = 2;
  EXPECT_THAT(reason(m), HasSubstr("version 2"));
  m = good;
  m[5] = 9;
  EXPECT_THAT(reason(m), HasSubstr("unknown type 9"));
  m = good;
  m[29] = 1;
  EXPECT_THAT(reason(m), HasSubstr("reserved bytes"));
  EXPECT_THAT(reason(good + "x"), HasSubstr("97 bytes for 1 points"));
  EXPECT_THAT(reason(EncodePsiMessage(PsiMessageType::kBlinded, 11, 0, PsiTag{}, {})), HasSubstr("over the limit"));
  EXPECT_THAT(reason(EncodePsiMessage(PsiMessageType::kBlinded, 1, 1, PsiTag{}, std::vector<Point>{p})),
              HasSubstr("runs past the set's 1 ids"));
  EXPECT_THAT(reason(EncodePsiMessage(PsiMessageType::kConfirm, 1, 0, PsiTag{}, std::vector<Point>{p})),
              HasSubstr("a confirm carries no points"));
}

TEST(PsiTest, OutOfProtocolMessagesAndBadPointsAreErrors) {
  auto make = [] {
    auto p = PsiParty::Create(Range("a", 0, 4));
    EXPECT_TRUE(p.ok());
    return std::move(*p);
  };
  std::vector<std::string> out;
  {
    auto p = make();
    EXPECT_EQ(p->Receive("x", &out).code(), StatusCode::kFailedPrecondition);  // before Start
  }
  // The peer's blinded points, as a real peer makes them.
  auto peer = PsiParty::Create(Range("b", 0, 4));
  ASSERT_TRUE(peer.ok());
  auto peer_msgs = (*peer)->Start();
  ASSERT_TRUE(peer_msgs.ok());
  ASSERT_EQ(peer_msgs->size(), 1u);
  {
    auto p = make();
    ASSERT_TRUE(p->Start().ok());
    std::string bad = (*peer_msgs)[0];
    for (int i = 0; i < 32; ++i) bad[kPsiHeaderSize + 32 + i] = static_cast<char>(0xFF);  // point 1: not canonical
    const Status s = p->Receive(bad, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("element 1 is not a valid ristretto255 point"));
  }
  {
    auto p = make();
    ASSERT_TRUE(p->Start().ok());
    out.clear();
    ASSERT_TRUE(p->Receive((*peer_msgs)[0], &out).ok());
    EXPECT_THAT(p->Receive((*peer_msgs)[0], &out).message(), HasSubstr("after the peer's whole set"));
  }
  {
    auto p = make();
    ASSERT_TRUE(p->Start().ok());
    // A reply for a set of another size than the one sent.
    const std::string reply = EncodePsiMessage(PsiMessageType::kDoubleBlinded, 5, 0, PsiTag{}, {});
    EXPECT_THAT(p->Receive(reply, &out).message(), HasSubstr("returned a set of 5 for the 4 ids"));
  }
}

TEST(PsiTest, AReplyDamagedInTransitEndsInDisagreementNotInOtherRows) {
  // One returned point with a flipped bit: that id silently drops out of one side's
  // intersection, and the confirm step catches the difference.
  const auto x = Range("r", 0, 50), y = Range("r", 0, 50);
  bool flipped = false;
  const auto bad = RunPair(y, x, {}, {}, [&](std::string& m) {
    if (!flipped && m.size() > kPsiHeaderSize && m[5] == static_cast<char>(PsiMessageType::kDoubleBlinded)) {
      m[kPsiHeaderSize + 3] ^= 0x10;
      flipped = true;
    }
  });
  ASSERT_TRUE(flipped);
  EXPECT_FALSE(bad.status_a.ok() && bad.status_b.ok());
  EXPECT_THAT(bad.status_a.message() + bad.status_b.message(), HasSubstr("disagree on the intersection"));
  EXPECT_THAT(bad.status_a.message() + bad.status_b.message(), ::testing::ContainsRegex("found (49|50) common ids, the peer (50|49)"));
}

}  // namespace
}  // namespace fedmesh::psi
