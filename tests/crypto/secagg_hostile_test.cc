// Secure aggregation under hostile input: every refusal the server and the clients make,
// each with its own assertion on the status code and message, in rounds of 8 clients
// (k = 4 neighbours, t = 3) where every refused message is followed by the genuine ones
// and the round must still end with the exact sum: a refused message changes nothing.
//  - Server: wrong federation/round, a sender not on the allowlist, a bad or borrowed key
//    signature, duplicates, messages for a closed or not-yet-open stage, a sender that
//    skipped the previous stage, malformed share boxes, a masked input of the wrong length,
//    unmasking shares with the wrong x, kind, length, owner or coverage, closing too early.
//  - Client: rosters with a bad signature, a duplicate, an outsider, too few members, this
//    client missing or its keys replaced, a low-order key; forwarded boxes that are
//    tampered, misaddressed, duplicated, from a non-neighbour or too few; unmask requests
//    that ask for both secrets of one client, leave this client out, list too few
//    survivors, unknown or repeated names, or a neighbour that never shared keys.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "crypto/secagg/secagg_graph.h"
#include "crypto/sodium.h"
#include "tests/crypto/secagg_round_harness.h"

namespace fedmesh {
namespace {

using secagg_test::SecAggRound;
using secagg_test::SiteId;
using ::testing::HasSubstr;

#define EXPECT_REFUSED(expr, status_code, text)               \
  do {                                                        \
    const ::fedmesh::Status fm_s_ = (expr);                   \
    EXPECT_EQ(fm_s_.code(), status_code) << fm_s_.ToString(); \
    EXPECT_THAT(fm_s_.message(), HasSubstr(text)) << #expr;   \
  } while (0)

SecAggOptions Options() {
  SecAggOptions options;
  options.vector_size = 100;
  options.neighbours = 4;
  options.threshold = 3;
  return options;
}

std::vector<size_t> Range(size_t lo, size_t hi, std::set<size_t> except = {}) {
  std::vector<size_t> out;
  for (size_t i = lo; i < hi; ++i) {
    if (!except.contains(i)) out.push_back(i);
  }
  return out;
}

// The graph every party derives from the current roster.
SecAggGraph GraphOf(const SecAggRound& round) {
  std::vector<std::string> ids;
  for (const AdvertiseKeys& m : round.roster().members) ids.push_back(m.client_id);
  return *SecAggGraph::Build(ids, round.options().neighbours, round.roster().graph_seed);
}

// Finishes the round from wherever it is, the remaining stages with nobody dropping, and
// checks the exact sum over `contributors`.
void FinishAndCheck(SecAggRound& round, const std::vector<size_t>& contributors) {
  if (round.server().stage() == SecAggStage::kShareKeys) {
    ASSERT_TRUE(round.Close().ok());
  }
  if (round.server().stage() == SecAggStage::kMaskedInput) {
    ASSERT_TRUE(round.Close().ok());
  }
  if (round.server().stage() == SecAggStage::kUnmasking) {
    Result<SecAggOutbox> out = round.Close();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_TRUE(out->result.has_value());
    EXPECT_EQ(out->result->sum, round.ExpectedSum(contributors));
    return;
  }
  FAIL() << "round ended in stage " << SecAggStageName(round.server().stage());
}

class SecAggServerRefusesTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

TEST_F(SecAggServerRefusesTest, BadAdvertisements) {
  SecAggRound round(8, Options(), 101);
  SecAggServer& server = round.server();
  EXPECT_REFUSED(server.CloseStage().status(), StatusCode::kFailedPrecondition,
                 "a roster of 0 clients is below min_clients = 3");
  const AdvertiseKeys good = round.client(0).advertisement();

  AdvertiseKeys m = good;
  m.federation_id = "other-fed";
  EXPECT_REFUSED(server.OnAdvertise(m), StatusCode::kInvalidArgument,
                 "AdvertiseKeys from 'site-000' is for federation 'other-fed' round 7; this is "
                 "federation 'fed-test' round 7");
  m = good;
  m.round = 8;
  EXPECT_REFUSED(server.OnAdvertise(m), StatusCode::kInvalidArgument, "round 8; this is");
  m = good;
  m.client_id = "intruder";
  EXPECT_REFUSED(server.OnAdvertise(m), StatusCode::kPermissionDenied,
                 "AdvertiseKeys comes from 'intruder', who is not on the allowlist");
  m = good;
  m.masking_public_key[0] ^= 1;  // a key swapped in transit
  EXPECT_REFUSED(server.OnAdvertise(m), StatusCode::kPermissionDenied,
                 "the key signature of 'site-000' does not verify against its enrolled identity");
  m = good;  // a low-order masking key, properly signed by site-000's own identity
  m.masking_public_key = CurveKey{};
  m.masking_public_key[0] = 1;  // u = 1: a point of order 4
  m.signature = *round.identity(0).Sign(
      AdvertiseSignedBytes("fed-test", 7, "site-000", m.channel_public_key, m.masking_public_key));
  EXPECT_REFUSED(server.OnAdvertise(m), StatusCode::kInvalidArgument,
                 "the masking public key of 'site-000' is a low-order point");
  m = good;
  m.channel_public_key = CurveKey{};
  m.signature = *round.identity(0).Sign(
      AdvertiseSignedBytes("fed-test", 7, "site-000", m.channel_public_key, m.masking_public_key));
  EXPECT_REFUSED(server.OnAdvertise(m), StatusCode::kInvalidArgument,
                 "the channel public key of 'site-000' is a low-order point");
  m = round.client(1).advertisement();  // site-001's signed keys, claimed by site-000
  m.client_id = "site-000";
  EXPECT_REFUSED(server.OnAdvertise(m), StatusCode::kPermissionDenied,
                 "key signature of 'site-000'");
  EXPECT_REFUSED(server.OnShares(ShareKeys{"fed-test", 7, "site-000", {}}),
                 StatusCode::kFailedPrecondition,
                 "belongs to stage ShareKeys, which is not open yet; the server is in stage "
                 "AdvertiseKeys");
  EXPECT_EQ(server.accepted(), 0u);

  round.Advertise();
  EXPECT_EQ(server.accepted(), 8u);
  EXPECT_EQ(server.expected(), 8u);
  EXPECT_REFUSED(server.OnAdvertise(good), StatusCode::kAlreadyExists,
                 "client 'site-000' has already advertised its keys for this round");
  ASSERT_TRUE(round.Close().ok());
  EXPECT_REFUSED(server.OnAdvertise(good), StatusCode::kFailedPrecondition,
                 "AdvertiseKeys from 'site-000' belongs to stage AdvertiseKeys, which is closed");
  EXPECT_EQ(round.roster().members.size(), 8u);

  round.ShareKeys();
  ASSERT_TRUE(round.Close().ok());
  round.MaskedInput();
  ASSERT_TRUE(round.Close().ok());
  round.Unmask();
  FinishAndCheck(round, Range(0, 8));
  EXPECT_EQ(server.stage(), SecAggStage::kFinished);
  EXPECT_REFUSED(server.CloseStage().status(), StatusCode::kFailedPrecondition,
                 "the secure aggregation round has finished");
}

TEST_F(SecAggServerRefusesTest, BadShareKeys) {
  SecAggRound round(8, Options(), 102);
  SecAggServer& server = round.server();
  round.Advertise({7});  // site-007 is on the allowlist but not in the roster
  ASSERT_TRUE(round.Close().ok());
  EXPECT_EQ(server.expected(), 7u);
  Result<ShareKeys> reply = round.client(0).OnRoster(round.roster());
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  const ShareKeys good = *reply;
  ASSERT_EQ(good.boxes.size(), 4u);
  const SecAggGraph graph = GraphOf(round);
  std::string stranger;  // in the roster, not a neighbour of site-000
  for (uint32_t j = 1; j < graph.size(); ++j) {
    if (!graph.AreNeighbours(0, j)) stranger = graph.id(j);
  }
  ASSERT_FALSE(stranger.empty());

  ShareKeys m = good;
  m.round = 6;
  EXPECT_REFUSED(server.OnShares(m), StatusCode::kInvalidArgument,
                 "is for federation 'fed-test' round 6");
  m = good;
  m.client_id = "site-007";
  EXPECT_REFUSED(server.OnShares(m), StatusCode::kFailedPrecondition,
                 "ShareKeys comes from 'site-007', who is not in this round's roster");
  m = good;
  m.client_id = "mallory";
  EXPECT_REFUSED(server.OnShares(m), StatusCode::kPermissionDenied, "not on the allowlist");
  m = good;
  m.boxes.pop_back();
  EXPECT_REFUSED(server.OnShares(m), StatusCode::kInvalidArgument,
                 "ShareKeys from 'site-000' carries 3 boxes; it has 4 neighbours, one box each");
  m = good;
  m.boxes[2].to = stranger;
  EXPECT_REFUSED(server.OnShares(m), StatusCode::kInvalidArgument,
                 "carries a box for '" + stranger + "', who is not its graph neighbour");
  m = good;
  m.boxes[2].to = m.boxes[1].to;
  EXPECT_REFUSED(server.OnShares(m), StatusCode::kInvalidArgument,
                 "carries two boxes for '" + m.boxes[1].to + "'");
  m = good;
  m.boxes[0].from = "site-003";
  EXPECT_REFUSED(server.OnShares(m), StatusCode::kInvalidArgument,
                 "carries a box marked as from 'site-003'");
  m = good;
  m.boxes[3].box.pop_back();
  EXPECT_REFUSED(server.OnShares(m), StatusCode::kInvalidArgument,
                 "is 103 bytes; a box of two shares is 104");
  EXPECT_EQ(server.accepted(), 0u);

  ASSERT_TRUE(server.OnShares(good).ok());
  EXPECT_REFUSED(server.OnShares(good), StatusCode::kAlreadyExists,
                 "client 'site-000' has already sent its shares for this round");
  EXPECT_REFUSED(server.OnMaskedInput(MaskedInput{"fed-test", 7, "site-000", {}}),
                 StatusCode::kFailedPrecondition, "which is not open yet");
  round.ShareKeys({0, 7});
  ASSERT_TRUE(round.Close().ok());
  round.MaskedInput();
  ASSERT_TRUE(round.Close().ok());
  round.Unmask();
  FinishAndCheck(round, Range(0, 7));
}

TEST_F(SecAggServerRefusesTest, BadMaskedInputs) {
  SecAggRound round(8, Options(), 103);
  SecAggServer& server = round.server();
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  round.ShareKeys({6});  // site-006 is in the roster but not in U1
  ASSERT_TRUE(round.Close().ok());
  Result<MaskedInput> reply = round.client(0).OnForwardedShares(round.forwarded(0), round.input(0));
  ASSERT_TRUE(reply.ok());
  const MaskedInput good = *reply;

  MaskedInput m = good;
  m.masked.pop_back();
  EXPECT_REFUSED(server.OnMaskedInput(m), StatusCode::kInvalidArgument,
                 "the masked input from 'site-000' has 99 words; this round aggregates 100");
  m = good;
  m.masked.push_back(0);
  EXPECT_REFUSED(server.OnMaskedInput(m), StatusCode::kInvalidArgument, "has 101 words");
  m = good;
  m.client_id = "site-006";
  EXPECT_REFUSED(server.OnMaskedInput(m), StatusCode::kFailedPrecondition,
                 "MaskedInput comes from 'site-006', who is not in U1 (it did not share its keys)");
  m = good;
  m.federation_id = "fed-other";
  EXPECT_REFUSED(server.OnMaskedInput(m), StatusCode::kInvalidArgument, "federation 'fed-other'");
  EXPECT_EQ(server.accepted(), 0u);

  ASSERT_TRUE(server.OnMaskedInput(good).ok());
  m = good;
  m.masked[0] += 1;  // a second, different input from the same client
  EXPECT_REFUSED(server.OnMaskedInput(m), StatusCode::kAlreadyExists,
                 "client 'site-000' has already sent its masked input");
  round.MaskedInput({0});
  EXPECT_EQ(server.accepted(), 7u);
  EXPECT_EQ(server.expected(), 7u);
  ASSERT_TRUE(round.Close().ok());
  EXPECT_REFUSED(server.OnMaskedInput(good), StatusCode::kFailedPrecondition,
                 "belongs to stage MaskedInput, which is closed");
  round.Unmask();
  FinishAndCheck(round, Range(0, 8, {6}));
}

TEST_F(SecAggServerRefusesTest, BadUnmaskShares) {
  SecAggRound round(8, Options(), 104);
  SecAggServer& server = round.server();
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  round.ShareKeys();
  ASSERT_TRUE(round.Close().ok());
  round.MaskedInput({5});  // site-005 is in U1 \ U2: its masking key will be rebuilt
  ASSERT_TRUE(round.Close().ok());
  EXPECT_THAT(round.unmask_request().dropped, ::testing::ElementsAre("site-005"));

  // A survivor next to site-005, so its reply holds both kinds of share.
  const SecAggGraph graph = GraphOf(round);
  const uint32_t dropped = *graph.IndexOf("site-005");
  const uint32_t v = graph.Neighbours(dropped)[0];
  std::string stranger;
  for (uint32_t j = 0; j < graph.size(); ++j) {
    if (j != v && !graph.AreNeighbours(v, j)) stranger = graph.id(j);
  }
  Result<UnmaskShares> reply = round.client(v).OnUnmaskRequest(round.unmask_request());
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  const UnmaskShares good = *reply;
  ASSERT_EQ(good.shares.size(), 4u);
  const auto of = [&](const std::string& owner) {
    return static_cast<size_t>(
        std::find_if(good.shares.begin(), good.shares.end(),
                     [&](const RevealedShare& s) { return s.owner == owner; }) -
        good.shares.begin());
  };
  const size_t key_share = of("site-005");
  ASSERT_LT(key_share, good.shares.size());
  EXPECT_EQ(good.shares[key_share].kind, SecretKind::kMaskingKey);
  const size_t seed_share = key_share == 0 ? 1 : 0;
  const std::string survivor = good.shares[seed_share].owner;
  const std::string from = "'" + SiteId(v) + "'";

  UnmaskShares m = good;
  m.shares[seed_share].x ^= 0x40;
  EXPECT_REFUSED(server.OnUnmaskShares(m), StatusCode::kInvalidArgument,
                 "the share of '" + survivor + "' from " + from +
                     " has x = " + std::to_string(m.shares[seed_share].x) + "; the share " + from +
                     " holds has x = " + std::to_string(good.shares[seed_share].x));
  m = good;
  m.shares[seed_share].y.pop_back();
  EXPECT_REFUSED(server.OnUnmaskShares(m), StatusCode::kInvalidArgument,
                 "the share of '" + survivor + "' from " + from + " is 31 bytes, not 32");
  m = good;
  m.shares[key_share].kind = SecretKind::kSelfMaskSeed;
  EXPECT_REFUSED(server.OnUnmaskShares(m), StatusCode::kInvalidArgument,
                 "carries a share of the self-mask seed of 'site-005', who did not send a masked "
                 "input: only its masking key may be revealed");
  m = good;
  m.shares[seed_share].kind = SecretKind::kMaskingKey;
  EXPECT_REFUSED(server.OnUnmaskShares(m), StatusCode::kInvalidArgument,
                 "carries a share of the masking key of '" + survivor +
                     "', who sent a masked input: only its self-mask seed may be revealed");
  m = good;
  m.shares[seed_share].owner = stranger;
  EXPECT_REFUSED(server.OnUnmaskShares(m), StatusCode::kInvalidArgument,
                 "carries a share of '" + stranger + "', who is not its neighbour in U1");
  m = good;
  m.shares.push_back(m.shares[seed_share]);
  EXPECT_REFUSED(server.OnUnmaskShares(m), StatusCode::kInvalidArgument,
                 "carries two shares of '" + survivor + "'");
  m = good;
  m.shares.erase(m.shares.begin() + static_cast<long>(seed_share));
  EXPECT_REFUSED(server.OnUnmaskShares(m), StatusCode::kInvalidArgument,
                 "lacks its share of neighbour '" + survivor + "'");
  m = good;
  m.client_id = "site-005";
  EXPECT_REFUSED(server.OnUnmaskShares(m), StatusCode::kFailedPrecondition,
                 "UnmaskShares comes from 'site-005', who is not in U2 (it did not send a masked "
                 "input)");
  m = good;
  m.client_id = "eve";
  EXPECT_REFUSED(server.OnUnmaskShares(m), StatusCode::kPermissionDenied,
                 "'eve', who is not on the allowlist");
  EXPECT_EQ(server.accepted(), 0u);

  ASSERT_TRUE(server.OnUnmaskShares(good).ok());
  EXPECT_REFUSED(server.OnUnmaskShares(good), StatusCode::kAlreadyExists,
                 "has already sent its unmasking shares");
  round.Unmask({v});
  FinishAndCheck(round, Range(0, 8, {5}));
}

TEST_F(SecAggServerRefusesTest, StagesDoNotCloseWithTooFewClients) {
  SecAggRound round(8, Options(), 105);
  round.Advertise({2, 3, 4, 5, 6, 7});
  EXPECT_REFUSED(round.server().CloseStage().status(), StatusCode::kFailedPrecondition,
                 "a roster of 2 clients is below min_clients = 3");
  round.Advertise({0, 1});
  ASSERT_TRUE(round.Close().ok());
  round.ShareKeys({2, 3, 4, 5, 6, 7});
  EXPECT_REFUSED(round.server().CloseStage().status(), StatusCode::kFailedPrecondition,
                 "only 0 of the 2 clients that shared keys have at least 3 neighbours that did "
                 "too, fewer than min_clients = 3");
  round.ShareKeys({0, 1});
  ASSERT_TRUE(round.Close().ok());
  round.MaskedInput({2, 3, 4, 5, 6, 7});
  EXPECT_REFUSED(round.server().CloseStage().status(), StatusCode::kFailedPrecondition,
                 "only 2 clients sent masked inputs, fewer than min_clients = 3");
  round.MaskedInput({0, 1});
  ASSERT_TRUE(round.Close().ok());
  round.Unmask();
  FinishAndCheck(round, Range(0, 8));
}

class SecAggClientRefusesTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

TEST_F(SecAggClientRefusesTest, BadRosters) {
  SecAggRound round(8, Options(), 201);
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  const Roster good = round.roster();
  SecAggClient& c = round.client(0);
  const SecAggGraph graph = GraphOf(round);

  Roster r = good;
  r.round = 9;
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kInvalidArgument,
                 "the roster is for federation 'fed-test' round 9; this client is in federation "
                 "'fed-test' round 7");
  r = good;
  r.members[4].round = 6;
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kInvalidArgument,
                 "the roster entry of 'site-004' is for federation 'fed-test' round 6");
  r = good;
  r.members[3].masking_public_key[7] ^= 0x10;
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kPermissionDenied,
                 "the key signature of roster member 'site-003' does not verify against its "
                 "enrolled identity");
  r = good;
  r.members[3].signature = r.members[4].signature;
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kPermissionDenied, "roster member 'site-003'");
  r = good;
  r.members.push_back(r.members[2]);
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kInvalidArgument,
                 "the roster lists 'site-002' twice");

  // An outsider with a perfectly good signature of its own, but not enrolled here.
  Identity outsider = std::move(Identity::Generate("outsider")).value();
  std::vector<PublicIdentity> its_allowlist = round.allowlist();
  its_allowlist.push_back(outsider.public_identity());
  SecAggOptions options = round.options();
  SecAggClient outsider_client =
      std::move(SecAggClient::Create(options, outsider, its_allowlist)).value();
  r = good;
  r.members.push_back(outsider_client.advertisement());
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kPermissionDenied,
                 "roster member 'outsider' is not on this client's allowlist");

  // Three members: each has 2 neighbours, fewer than t = 3.
  r = good;
  r.members.resize(3);
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kFailedPrecondition,
                 "a roster of 3 clients gives each one 2 neighbours, fewer than the threshold 3");
  r.members.resize(2);
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kFailedPrecondition,
                 "a roster of 2 clients is below min_clients = 3");
  r = good;
  r.members.erase(r.members.begin());
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kFailedPrecondition,
                 "the roster leaves out this client 'site-000'");

  // site-000's identity signing other keys (another client object, same identity): the
  // signature is genuine, but these are not the keys this client holds secrets for.
  SecAggClient twin =
      std::move(SecAggClient::Create(options, round.identity(0), round.allowlist())).value();
  r = good;
  r.members[0] = twin.advertisement();
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kPermissionDenied,
                 "the roster carries other keys than this client's under 'site-000'");

  // A neighbour that signed a low-order masking key (all zeros): no secret can be agreed.
  const std::string neighbour = graph.id(graph.Neighbours(0)[0]);
  const size_t ni = SecAggRound::IndexOf(neighbour);
  r = good;
  AdvertiseKeys& evil = r.members[ni];
  evil.masking_public_key = CurveKey{};
  evil.signature = *round.identity(ni).Sign(AdvertiseSignedBytes(
      "fed-test", 7, neighbour, evil.channel_public_key, evil.masking_public_key));
  EXPECT_REFUSED(c.OnRoster(r).status(), StatusCode::kInvalidArgument,
                 "the X25519 public key of '" + neighbour + "' is a low-order point");

  EXPECT_EQ(c.stage(), SecAggStage::kAdvertiseKeys);
  Result<ShareKeys> reply = c.OnRoster(good);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_REFUSED(c.OnRoster(good).status(), StatusCode::kFailedPrecondition,
                 "client 'site-000' has already accepted a roster for this round");
  ASSERT_TRUE(round.server().OnShares(*reply).ok());
  round.ShareKeys({0});
  ASSERT_TRUE(round.Close().ok());
  round.MaskedInput();
  ASSERT_TRUE(round.Close().ok());
  round.Unmask();
  FinishAndCheck(round, Range(0, 8));
}

TEST_F(SecAggClientRefusesTest, BadForwardedShares) {
  SecAggRound round(8, Options(), 202);
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  round.ShareKeys();
  ASSERT_TRUE(round.Close().ok());
  const SecAggGraph graph = GraphOf(round);
  SecAggClient& c = round.client(0);
  const ForwardedShares good = round.forwarded(0);
  ASSERT_EQ(good.boxes.size(), 4u);
  std::string stranger;
  for (uint32_t j = 1; j < graph.size(); ++j) {
    if (!graph.AreNeighbours(0, j)) stranger = graph.id(j);
  }
  const std::vector<float>& x = round.input(0);

  EXPECT_REFUSED(c.OnUnmaskRequest(UnmaskRequest{}).status(), StatusCode::kFailedPrecondition,
                 "is not waiting for an unmask request (stage ShareKeys)");
  ForwardedShares f = good;
  f.round = 70;
  EXPECT_REFUSED(c.OnForwardedShares(f, x).status(), StatusCode::kInvalidArgument,
                 "the forwarded shares is for federation 'fed-test' round 70");
  EXPECT_REFUSED(c.OnForwardedShares(round.forwarded(1), x).status(), StatusCode::kInvalidArgument,
                 "the forwarded shares are addressed to 'site-001', not to this client 'site-000'");
  f = good;
  f.boxes[1].box[50] ^= 0x01;
  EXPECT_REFUSED(
      c.OnForwardedShares(f, x).status(), StatusCode::kCorruption,
      "the share box from '" + good.boxes[1].from + "' to 'site-000' fails authentication");
  f = good;
  f.boxes[1].box.resize(60);
  EXPECT_REFUSED(c.OnForwardedShares(f, x).status(), StatusCode::kCorruption,
                 "is 60 bytes; a box of 64 bytes of shares is 104");
  f = good;
  f.boxes.push_back(good.boxes[2]);  // replayed
  EXPECT_REFUSED(c.OnForwardedShares(f, x).status(), StatusCode::kInvalidArgument,
                 "the forwarded shares hold two boxes from '" + good.boxes[2].from + "'");
  f = good;
  f.boxes[1].from = good.boxes[2].from;  // boxes swapped between senders: the AD says no
  f.boxes[2].from = good.boxes[1].from;
  EXPECT_REFUSED(c.OnForwardedShares(f, x).status(), StatusCode::kCorruption,
                 "fails authentication");
  f = good;
  f.boxes[0].from = stranger;
  EXPECT_REFUSED(
      c.OnForwardedShares(f, x).status(), StatusCode::kInvalidArgument,
      "a forwarded box comes from '" + stranger + "', who is not a graph neighbour of 'site-000'");
  f = good;
  f.boxes[3].to = "site-001";
  EXPECT_REFUSED(c.OnForwardedShares(f, x).status(), StatusCode::kInvalidArgument,
                 "is addressed to 'site-001', not to 'site-000'");
  f = good;
  f.boxes.resize(2);
  EXPECT_REFUSED(c.OnForwardedShares(f, x).status(), StatusCode::kFailedPrecondition,
                 "only 2 of the 4 neighbours of 'site-000' shared keys, fewer than the threshold "
                 "3: its masks could never be removed, so it keeps its input to itself");
  EXPECT_REFUSED(c.OnForwardedShares(good, std::vector<float>(99, 0.f)).status(),
                 StatusCode::kInvalidArgument,
                 "the update has 99 coordinates; this round aggregates 100");
  std::vector<float> nan = x;
  nan[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_REFUSED(c.OnForwardedShares(good, nan).status(), StatusCode::kInvalidArgument,
                 "update coordinate 17 is not finite");
  EXPECT_REFUSED(c.OnForwardedSharesEncoded(good, std::vector<uint32_t>(101)).status(),
                 StatusCode::kInvalidArgument, "the encoded update has 101 words");

  EXPECT_EQ(c.stage(), SecAggStage::kShareKeys);
  Result<MaskedInput> y = c.OnForwardedShares(good, x);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_REFUSED(c.OnForwardedShares(good, x).status(), StatusCode::kFailedPrecondition,
                 "is not waiting for shares (stage MaskedInput)");
  ASSERT_TRUE(round.server().OnMaskedInput(*y).ok());
  round.MaskedInput({0});
  ASSERT_TRUE(round.Close().ok());
  round.Unmask();
  FinishAndCheck(round, Range(0, 8));
}

// n = 10 (k = 4, t = 3) so that site-006 (never shares keys) and the client w that skips
// its masked input can be far enough apart on the graph (no common neighbour, not
// neighbours) for every needed secret to keep 3 shares.
TEST_F(SecAggClientRefusesTest, BadUnmaskRequests) {
  SecAggRound round(10, Options(), 203);
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  const SecAggGraph graph = GraphOf(round);
  const uint32_t silent = *graph.IndexOf("site-006");
  uint32_t w = 0;
  for (; w < graph.size(); ++w) {
    if (w == silent || graph.AreNeighbours(w, silent)) continue;
    bool common = false;
    for (uint32_t j : graph.Neighbours(w)) common |= graph.AreNeighbours(j, silent);
    if (!common) break;
  }
  ASSERT_LT(w, graph.size());
  const std::string dropped = SiteId(w);
  round.ShareKeys({silent});
  ASSERT_TRUE(round.Close().ok());
  round.MaskedInput({w});
  ASSERT_TRUE(round.Close().ok());
  const UnmaskRequest good = round.unmask_request();
  ASSERT_THAT(good.dropped, ::testing::ElementsAre(dropped));
  // A client next to site-006, to be asked about a neighbour that never shared keys.
  const uint32_t v = graph.Neighbours(silent)[0];
  SecAggClient& c = round.client(v);
  const std::string me = "'" + SiteId(v) + "'";

  UnmaskRequest q = good;
  q.federation_id = "fed-x";
  EXPECT_REFUSED(c.OnUnmaskRequest(q).status(), StatusCode::kInvalidArgument,
                 "the unmask request is for federation 'fed-x' round 7");
  // Asked for both secrets of one client (the attack that would unmask it).
  for (const std::string& victim : {dropped, good.survivors[0]}) {
    q = good;
    if (victim == dropped) {
      q.survivors.push_back(victim);
    } else {
      q.dropped.push_back(victim);
    }
    EXPECT_REFUSED(c.OnUnmaskRequest(q).status(), StatusCode::kFailedPrecondition,
                   "the unmask request lists '" + victim +
                       "' as both a survivor and dropped; revealing shares of both its self-mask "
                       "seed and its masking key would expose its input, so this client refuses");
  }
  q = good;
  q.survivors.erase(std::find(q.survivors.begin(), q.survivors.end(), SiteId(v)));
  EXPECT_REFUSED(c.OnUnmaskRequest(q).status(), StatusCode::kFailedPrecondition,
                 "the unmask request does not list this client " + me + " as a survivor");
  q = good;
  q.survivors = {SiteId(v), good.survivors[0] == SiteId(v) ? good.survivors[1] : good.survivors[0]};
  EXPECT_REFUSED(c.OnUnmaskRequest(q).status(), StatusCode::kFailedPrecondition,
                 "the unmask request lists 2 survivors, fewer than min_clients = 3");
  q = good;
  q.dropped.push_back("site-999");
  EXPECT_REFUSED(c.OnUnmaskRequest(q).status(), StatusCode::kInvalidArgument,
                 "the unmask request names 'site-999', who is not in this round's roster");
  q = good;
  q.survivors.push_back(q.survivors[2]);
  EXPECT_REFUSED(c.OnUnmaskRequest(q).status(), StatusCode::kInvalidArgument,
                 "the unmask request lists '" + q.survivors[2] + "' twice");
  q = good;
  q.dropped.push_back("site-006");
  EXPECT_REFUSED(c.OnUnmaskRequest(q).status(), StatusCode::kInvalidArgument,
                 "the unmask request lists neighbour 'site-006' as dropped, but it never sent "
                 "this client its shares");

  EXPECT_EQ(c.stage(), SecAggStage::kMaskedInput);
  Result<UnmaskShares> reply = c.OnUnmaskRequest(good);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(c.stage(), SecAggStage::kFinished);
  EXPECT_REFUSED(c.OnUnmaskRequest(good).status(), StatusCode::kFailedPrecondition,
                 "is not waiting for an unmask request (stage Finished)");
  ASSERT_TRUE(round.server().OnUnmaskShares(*reply).ok());
  round.Unmask({v});
  FinishAndCheck(round, Range(0, 10, {w, silent}));
}

}  // namespace
}  // namespace fedmesh
