// Secure aggregation end to end, all parties in one process (secagg_round_harness.h).
//  - Exact sums: for n in {5, 50, 200} and 0 / 10 / 30 % of the clients dropping after
//    sending their masked input (so their self-masks must be rebuilt from neighbours'
//    shares), the server's sum equals the plain Z_2^32 sum of the fixed-point encodings,
//    word for word. For 30 % the degree is raised (see kCases) because the default
//    k = 2 ceil(log2 n) with t = k/2 + 1 does not survive that many drops.
//  - Clients dropping before the masked input are left out (their pairwise masks are
//    cancelled with their rebuilt masking keys) and the sum of the others is exact.
//  - Too many drops: a secret with fewer than t shares fails the round with
//    FailedPrecondition naming the client, no output; a late share then rescues it.
//  - Closing ShareKeys leaves out clients with fewer than t neighbours in U1 (and refuses
//    when that leaves fewer than min_clients), and late ShareKeys still count.
//  - A masked input is statistically uniform: with the all-zero input, the top 8 bits of
//    2^16 masked words pass Pearson's chi-square test for 256 equal bins at p = 0.001
//    (critical value 330.5 for 255 dof) while the unmasked encoding scores 16.7 million.
//  - Nothing a client sends the server carries its channel key, masking key or self-mask
//    seed (recomputed from the client's deterministic random stream).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sodium.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

#include "crypto/secagg/secagg_graph.h"
#include "crypto/sodium.h"
#include "tests/crypto/secagg_round_harness.h"
#include "tests/crypto/secagg_test_util.h"

namespace fedmesh {
namespace {

using secagg_test::SecAggRound;
using secagg_test::SiteId;
using ::testing::HasSubstr;

struct EndToEndCase {
  size_t n;
  int drop_percent;     // of the clients, dropping after their masked input
  uint32_t neighbours;  // 0 = default rule
  size_t vector_size;
};

// Why the 30 % rows set the degree: every client's self-mask seed must be rebuilt from t
// of its k neighbours, so at most k - t = k/2 - 1 of them may drop. With the defaults
// (n = 50: k = 12, t = 7; n = 200: k = 16, t = 9) a client has more than k/2 - 1 dropped
// neighbours with probability ~0.1 at 30 % drops, so some client almost surely does.
// k/2 - 1 >= (number dropped) makes every drop pattern recoverable: k = 32 for 15 of 50,
// k = 128 for 60 of 200. The 10 % rows keep the defaults (n = 50: 5 drops <= k/2 - 1 = 5
// for certain; n = 200: 20 drops, more than 7 among one client's 16 neighbours is a
// ~1e-5 event per client).
const EndToEndCase kCases[] = {
    {5, 0, 0, 1000},   {5, 10, 0, 1000},   {5, 30, 0, 1000},
    {50, 0, 0, 1000},  {50, 10, 0, 1000},  {50, 30, 32, 1000},
    {200, 0, 0, 1000}, {200, 10, 0, 1000}, {200, 30, 128, 1000},
};

class SecAggEndToEndTest : public ::testing::TestWithParam<EndToEndCase> {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

TEST_P(SecAggEndToEndTest, SumIsExactWithDropsAfterMaskedInput) {
  const EndToEndCase c = GetParam();
  SecAggOptions options;
  options.vector_size = c.vector_size;
  options.neighbours = c.neighbours;
  const auto t0 = std::chrono::steady_clock::now();
  SecAggRound round(c.n, options, /*seed=*/1000 + c.n + c.drop_percent);
  // floor(n * p), at least one when p > 0; which ones drop comes from the seed.
  size_t drops = c.n * c.drop_percent / 100;
  if (c.drop_percent > 0) drops = std::max<size_t>(drops, 1);
  std::vector<size_t> order(c.n);
  std::iota(order.begin(), order.end(), 0);
  Rng pick(c.n * 31 + c.drop_percent);
  pick.Shuffle(order);
  SecAggRound::Drops d;
  d.before_unmask.insert(order.begin(), order.begin() + drops);

  const auto t1 = std::chrono::steady_clock::now();
  Result<SecAggOutbox> out = round.Run(d);
  const auto t2 = std::chrono::steady_clock::now();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_TRUE(out->result.has_value());
  const SecAggResult& result = *out->result;

  // Everyone sent a masked input, so everyone is in the sum, dropped or not.
  std::vector<size_t> all(c.n);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(result.contributors.size(), c.n);
  EXPECT_EQ(result.sum, round.ExpectedSum(all));
  // And the decoded sum is the float sum to within half a quantisation step per client
  // (inputs that exceeded the clip are compared after clipping, via their encoding).
  const FixedPointOptions fp = options.fixed_point(c.n);
  ASSERT_EQ(result.decoded_sum.size(), c.vector_size);
  const std::vector<float> expected = DecodeFixedPointSum(round.ExpectedSum(all), fp);
  for (size_t j = 0; j < c.vector_size; ++j) ASSERT_EQ(result.decoded_sum[j], expected[j]);
  double plain = 0;  // an unclipped input's coordinate, summed, against the decoded value
  for (size_t i = 0; i < c.n; ++i) {
    if (i % 7 != 3) plain += round.input(i)[0];
  }
  std::vector<size_t> unclipped;
  for (size_t i = 0; i < c.n; ++i) {
    if (i % 7 != 3) unclipped.push_back(i);
  }
  EXPECT_NEAR(DecodeFixedPointSum(round.ExpectedSum(unclipped), fp)[0], plain,
              c.n * 0.5 / fp.scale() + 1e-4);

  const double setup_s = std::chrono::duration<double>(t1 - t0).count();
  const double round_s = std::chrono::duration<double>(t2 - t1).count();
  RecordProperty("setup_seconds", std::to_string(setup_s));
  RecordProperty("round_seconds", std::to_string(round_s));
  std::printf("[ timing   ] n=%zu drops=%zu k=%u d=%zu: setup %.3f s, round %.3f s\n", c.n, drops,
              c.neighbours != 0 ? c.neighbours : DefaultSecAggNeighbours(c.n), c.vector_size,
              setup_s, round_s);
}

INSTANTIATE_TEST_SUITE_P(SecAgg, SecAggEndToEndTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<EndToEndCase>& info) {
                           return "n" + std::to_string(info.param.n) + "_drop" +
                                  std::to_string(info.param.drop_percent) + "pct";
                         });

class SecAggProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

// Drops at every stage of one round of 50 (k = 24, t = 13, so every drop pattern of these
// 8 clients is recoverable): site-000 never advertises, 001-002 skip ShareKeys (not in
// U1), 003-005 skip MaskedInput (U1 \ U2: excluded, their pairwise masks removed with
// their rebuilt keys), 006-007 skip Unmasking (still in the sum).
TEST_F(SecAggProtocolTest, DropsBeforeTheMaskedInputAreExcludedAndTheRestIsExact) {
  SecAggOptions options;
  options.vector_size = 500;
  options.neighbours = 24;
  SecAggRound round(50, options, 77);
  SecAggRound::Drops d;
  d.before_advertise = {0};
  d.before_share_keys = {1, 2};
  d.before_masked_input = {3, 4, 5};
  d.before_unmask = {6, 7};
  Result<SecAggOutbox> out = round.Run(d);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<size_t> contributors;
  for (size_t i = 6; i < 50; ++i) contributors.push_back(i);
  EXPECT_EQ(out->result->sum, round.ExpectedSum(contributors));
  EXPECT_EQ(out->result->contributors.size(), 44u);
  EXPECT_EQ(out->result->contributors.front(), "site-006");
  // The unmask request named exactly U2 and U1 \ U2.
  EXPECT_EQ(round.unmask_request().survivors.size(), 44u);
  EXPECT_THAT(round.unmask_request().dropped,
              ::testing::ElementsAre("site-003", "site-004", "site-005"));
  EXPECT_EQ(round.roster().members.size(), 49u);
}

// A revoked client is no longer waited for, at whichever stage: expected() drops by one when
// it had not sent for the open stage (so the stage can close at once), its later messages are
// refused, and the round ends with the exact sum of the others, or with its input too when
// it had sent it before the revocation. 5 clients, complete graph (k = 4, t = 3).
TEST_F(SecAggProtocolTest, ARevokedClientIsNotWaitedForAtAnyStage) {
  for (int stage = 0; stage < 4; ++stage) {
    SCOPED_TRACE("revoked in stage " + std::to_string(stage));
    SecAggOptions options;
    options.vector_size = 64;
    SecAggRound round(5, options, 11 + stage);
    // site-002 sends nothing from `stage` on; it is revoked once the others have sent.
    const auto skip = [&](int s) { return s >= stage ? std::set<size_t>{2} : std::set<size_t>{}; };
    const auto revoke_if = [&](int s) {
      if (s != stage) return;
      const size_t expected = round.server().expected();
      EXPECT_LT(round.server().accepted(), expected) << "the stage waits for site-002";
      EXPECT_TRUE(round.server().Revoke("site-002"));
      EXPECT_EQ(round.server().expected(), expected - 1);
      EXPECT_EQ(round.server().accepted(), round.server().expected()) << "the stage can close now";
      EXPECT_FALSE(round.server().Revoke("site-002")) << "once";
    };
    round.Advertise(skip(0));
    revoke_if(0);
    if (stage == 0) {
      EXPECT_EQ(round.server().OnAdvertise(round.client(2).advertisement()).code(), StatusCode::kPermissionDenied);
    }
    ASSERT_TRUE(round.Close().ok());
    EXPECT_EQ(round.roster().members.size(), stage == 0 ? 4u : 5u);
    round.ShareKeys(skip(1));
    revoke_if(1);
    ASSERT_TRUE(round.Close().ok());
    round.MaskedInput(skip(2));
    revoke_if(2);
    ASSERT_TRUE(round.Close().ok());
    round.Unmask(skip(3));
    revoke_if(3);
    Result<SecAggOutbox> out = round.Close();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_TRUE(out->result.has_value());
    // Its masked input came before a revocation in stage 3: it stays in the sum.
    EXPECT_EQ(out->result->sum, stage == 3 ? round.ExpectedSum({0, 1, 2, 3, 4}) : round.ExpectedSum({0, 1, 3, 4}));
    EXPECT_EQ(out->result->contributors.size(), stage == 3 ? 5u : 4u);
  }
}

// Revoking a client that already sent for the open stage leaves the count it waits for as
// it was (after the roster), and an unknown name changes nothing.
TEST_F(SecAggProtocolTest, RevokingAClientThatHasSentChangesNothingTheStageWaitsFor) {
  SecAggOptions options;
  options.vector_size = 16;
  SecAggRound round(5, options, 3);
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  round.ShareKeys({4});
  EXPECT_EQ(round.server().expected(), 5u);
  EXPECT_EQ(round.server().accepted(), 4u);
  EXPECT_FALSE(round.server().Revoke("site-000"));
  EXPECT_EQ(round.server().expected(), 5u);
  EXPECT_FALSE(round.server().Revoke("site-nobody"));
}

// The same with the complete graph of 5 (k = 4, t = 3): one client skips MaskedInput.
TEST_F(SecAggProtocolTest, SmallRoundWithOneClientDroppingBeforeItsInput) {
  SecAggOptions options;
  options.vector_size = 64;
  SecAggRound round(5, options, 5);
  SecAggRound::Drops d;
  d.before_masked_input = {2};
  Result<SecAggOutbox> out = round.Run(d);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->result->sum, round.ExpectedSum({0, 1, 3, 4}));
  EXPECT_THAT(out->result->contributors,
              ::testing::ElementsAre("site-000", "site-001", "site-003", "site-004"));
}

// n = 10, k = 4, t = 3: two of site-000's four neighbours skip ShareKeys, so it is left
// with 2 neighbours in U1, fewer than t: it could never send its input safely, and its
// masking key (held by 2 neighbours) could never be rebuilt. Closing ShareKeys leaves it
// out of U1, which leaves its neighbours short in turn; in a ring-shaped Harary graph with
// t = k/2 + 1 that cascades through every client, and the server says so now instead of
// failing after two more stages. The failed close changes nothing: when the two late
// ShareKeys arrive, the round closes and completes with the exact sum.
TEST_F(SecAggProtocolTest, ShareKeysCloseLeavesOutClientsWithTooFewNeighbours) {
  SecAggOptions options;
  options.vector_size = 200;
  options.neighbours = 4;
  SecAggRound round(10, options, 41);
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  std::vector<std::string> ids;
  for (const AdvertiseKeys& m : round.roster().members) ids.push_back(m.client_id);
  const SecAggGraph graph = *SecAggGraph::Build(ids, 4, round.roster().graph_seed);
  const std::set<size_t> late = {graph.Neighbours(0)[0], graph.Neighbours(0)[1]};
  round.ShareKeys(late);
  EXPECT_EQ(round.server().accepted(), 8u);
  const Status early = round.server().CloseStage().status();
  EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(early.message(),
            "only 0 of the 8 clients that shared keys have at least 3 neighbours that did too, "
            "fewer than min_clients = 3");
  EXPECT_EQ(round.server().stage(), SecAggStage::kShareKeys);
  EXPECT_EQ(round.server().accepted(), 8u);

  std::set<size_t> on_time;
  for (size_t i = 0; i < 10; ++i) {
    if (!late.contains(i)) on_time.insert(i);
  }
  round.ShareKeys(on_time);  // the two late ones
  Result<SecAggOutbox> out = round.Close();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->recipients.size(), 10u);
  round.MaskedInput();
  ASSERT_TRUE(round.Close().ok());
  round.Unmask();
  Result<SecAggOutbox> done = round.Close();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  std::vector<size_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(done->result->sum, round.ExpectedSum(all));
}

// The complete graph of 7 (k = 6, t = 4): site-000 alone never shares keys, and every
// other client still has 5 neighbours in U1, so nobody is left out; with 3 silent, every
// client keeps 3 < 4 and the close refuses.
TEST_F(SecAggProtocolTest, ShareKeysCloseKeepsClientsWithEnoughNeighbours) {
  SecAggOptions options;
  options.vector_size = 20;
  SecAggRound round(7, options, 43);
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  round.ShareKeys({0, 1, 2});
  EXPECT_THAT(round.server().CloseStage().status().message(),
              HasSubstr("only 0 of the 4 clients that shared keys have at least 4 neighbours"));
  round.ShareKeys({0, 3, 4, 5, 6});  // 1 and 2 arrive late
  Result<SecAggOutbox> out = round.Close();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->recipients.size(), 6u);
  round.MaskedInput();
  ASSERT_TRUE(round.Close().ok());
  round.Unmask();
  Result<SecAggOutbox> done = round.Close();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->result->sum, round.ExpectedSum({1, 2, 3, 4, 5, 6}));
}

// n = 5, complete graph, t = 3: site-001 and site-004 vanish after their masked inputs, so
// the self-mask seeds of the three that answer (000, 002, 003) have only 2 shares each,
// from the other two. The round must fail, say whose secrets are short, output nothing,
// and stay open: when site-004 comes back and answers, the sum is exact.
TEST_F(SecAggProtocolTest, TooFewSharesFailTheRoundWithoutOutput) {
  SecAggOptions options;
  options.vector_size = 100;
  SecAggRound round(5, options, 9);
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  round.ShareKeys();
  ASSERT_TRUE(round.Close().ok());
  round.MaskedInput();
  ASSERT_TRUE(round.Close().ok());
  round.Unmask({1, 4});
  Result<SecAggOutbox> failed = round.server().CloseStage();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(failed.status().message(),
              HasSubstr("cannot remove the masks: 3 secrets have fewer than the threshold of 3 "
                        "shares: the self-mask seed of 'site-000' (2 shares), the self-mask "
                        "seed of 'site-002' (2 shares), the self-mask seed of 'site-003' (2 "
                        "shares); the round cannot produce a sum"));
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(round.server().stage(), SecAggStage::kUnmasking);
  // Asking again changes nothing.
  EXPECT_EQ(round.server().CloseStage().status(), failed.status());

  // site-004 answers late: now every seed has 3 shares.
  Result<UnmaskShares> late = round.client(4).OnUnmaskRequest(round.unmask_request());
  ASSERT_TRUE(late.ok());
  ASSERT_TRUE(round.server().OnUnmaskShares(*late).ok());
  Result<SecAggOutbox> out = round.Close();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->result->sum, round.ExpectedSum({0, 1, 2, 3, 4}));
}

// The dropped client's masking key is the short secret: n = 5, site-002 skips its
// masked input, and then only two survivors answer the unmask request.
TEST_F(SecAggProtocolTest, TooFewSharesOfADroppedClientsKeyFailTheRound) {
  SecAggOptions options;
  options.vector_size = 10;
  SecAggRound round(5, options, 10);
  SecAggRound::Drops d;
  d.before_masked_input = {2};
  d.before_unmask = {0, 1};
  Result<SecAggOutbox> out = round.Run(d);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(out.status().message(), HasSubstr("the masking key of 'site-002' (2 shares)"));
}

// The masked input of a client whose input is all zeros, read as 2^16 words: the top 8
// bits of each word fall in 256 bins; uniform words give Pearson's chi-square statistic
// below 330.5 (p = 0.001 for 255 dof; with a fixed seed the test is deterministic). The
// unmasked encoding puts every word in bin 0: statistic 2^16 * 255 = 16,711,680.
TEST_F(SecAggProtocolTest, MaskedInputIsIndistinguishableFromUniform) {
  SecAggOptions options;
  options.vector_size = 1 << 16;
  SecAggRound round(5, options, 21);
  for (size_t i = 0; i < round.n(); ++i) {
    round.set_input(i, std::vector<float>(options.vector_size, 0.0f));
  }
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  round.ShareKeys();
  ASSERT_TRUE(round.Close().ok());

  const FixedPointOptions fp = options.fixed_point(round.n());
  const std::vector<uint32_t> encoding = secagg_test::Must(EncodeFixedPoint(round.input(0), fp));
  std::vector<uint64_t> plain_bins(256, 0);
  for (uint32_t w : encoding) ++plain_bins[w >> 24];
  const double plain_stat = secagg_test::ChiSquareUniform(plain_bins);
  EXPECT_DOUBLE_EQ(plain_stat, 65536.0 * 255);

  for (size_t i = 0; i < round.n(); ++i) {
    Result<MaskedInput> y = round.client(i).OnForwardedShares(round.forwarded(i), round.input(i));
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    std::vector<uint64_t> bins(256, 0);
    for (uint32_t w : y->masked) ++bins[w >> 24];
    const double stat = secagg_test::ChiSquareUniform(bins);
    EXPECT_LT(stat, secagg_test::kChiSquare255Dof999) << SiteId(i);
    std::printf("[ chi2     ] %s masked: %.1f (unmasked: %.0f)\n", SiteId(i).c_str(), stat,
                plain_stat);
    ASSERT_TRUE(round.server().OnMaskedInput(*y).ok());
  }
  ASSERT_TRUE(round.Close().ok());
  round.Unmask();
  Result<SecAggOutbox> out = round.Close();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->result->sum, std::vector<uint32_t>(options.vector_size, 0));
}

bool Contains(const std::vector<uint8_t>& haystack, std::span<const uint8_t> needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

void Append(std::vector<uint8_t>& out, std::span<const uint8_t> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// A client's secrets, replayed from its DeterministicRandom: call 0 is c_sk, call 1 s_sk
// (both in Create), call 2 b_u (first thing OnRoster draws). Every byte the client sends
// the server is searched for each of them: none may appear (shares of b_u are revealed in
// stage 3, never b_u itself; s_sk only ever as shares to neighbours, sealed).
TEST_F(SecAggProtocolTest, ServerBoundMessagesNeverCarryAClientSecret) {
  SecAggOptions options;
  options.vector_size = 50;
  SecAggRound round(6, options, 31);
  round.Advertise();
  std::vector<uint8_t> wire;  // everything clients send
  for (size_t i = 0; i < round.n(); ++i) {
    const AdvertiseKeys& a = round.client(i).advertisement();
    Append(wire, a.channel_public_key);
    Append(wire, a.masking_public_key);
    Append(wire, a.signature);
  }
  ASSERT_TRUE(round.Close().ok());
  for (size_t i = 0; i < round.n(); ++i) {
    Result<ShareKeys> s = round.client(i).OnRoster(round.roster());
    ASSERT_TRUE(s.ok());
    for (const SealedShares& b : s->boxes) Append(wire, b.box);
    ASSERT_TRUE(round.server().OnShares(*s).ok());
  }
  ASSERT_TRUE(round.Close().ok());
  for (size_t i = 0; i < round.n(); ++i) {
    if (i == 5) continue;  // drops before its input: its key's shares are revealed
    Result<MaskedInput> y = round.client(i).OnForwardedShares(round.forwarded(i), round.input(i));
    ASSERT_TRUE(y.ok());
    Append(wire,
           std::span(reinterpret_cast<const uint8_t*>(y->masked.data()), y->masked.size() * 4));
    ASSERT_TRUE(round.server().OnMaskedInput(*y).ok());
  }
  ASSERT_TRUE(round.Close().ok());
  for (size_t i = 0; i < 5; ++i) {
    Result<UnmaskShares> u = round.client(i).OnUnmaskRequest(round.unmask_request());
    ASSERT_TRUE(u.ok());
    for (const RevealedShare& r : u->shares) {
      Append(wire, r.y);
      // Never both kinds for one owner: survivors get b shares, site-005 a key share.
      EXPECT_EQ(r.kind,
                r.owner == "site-005" ? SecretKind::kMaskingKey : SecretKind::kSelfMaskSeed);
    }
    ASSERT_TRUE(round.server().OnUnmaskShares(*u).ok());
  }
  ASSERT_TRUE(round.Close().ok());

  for (size_t i = 0; i < round.n(); ++i) {
    DeterministicRandom replay(secagg_test::ClientRngSeed(round.seed(), i));
    std::array<uint8_t, 32> c_sk{}, s_sk{}, b{};
    replay.Fill(c_sk);
    replay.Fill(s_sk);
    replay.Fill(b);
    // The replay is right: it gives the advertised public keys.
    CurveKey c_pk{}, s_pk{};
    ASSERT_EQ(crypto_scalarmult_base(c_pk.data(), c_sk.data()), 0);
    ASSERT_EQ(crypto_scalarmult_base(s_pk.data(), s_sk.data()), 0);
    ASSERT_EQ(c_pk, round.client(i).advertisement().channel_public_key);
    ASSERT_EQ(s_pk, round.client(i).advertisement().masking_public_key);
    EXPECT_FALSE(Contains(wire, c_sk)) << SiteId(i);
    EXPECT_FALSE(Contains(wire, s_sk)) << SiteId(i);
    EXPECT_FALSE(Contains(wire, b)) << SiteId(i);
  }
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// Distributed DP (issue 8): each client adds N(0, noise_stddev^2) to its encoding before
// masking. The unmasked sum then differs from the noise-free one by noise of standard
// deviation sqrt(n) * noise_stddev per coordinate, centred, and its words still decode
// without overflow.
TEST(SecAggDistributedNoise, TheSumCarriesTheClientsNoiseAndNothingElse) {
  const size_t n = 6, d = 20000;
  SecAggOptions options;
  options.vector_size = d;
  options.clip = 10.0;
  options.bits = 24;
  options.noise_stddev = 0.05;
  secagg_test::SecAggRound round(n, options, 17);
  Result<SecAggOutbox> out = round.Run({});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_TRUE(out->result.has_value());
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  const FixedPointOptions fp = options.fixed_point(n);
  const std::vector<float> clean = DecodeFixedPointSum(round.ExpectedSum(all), fp);
  double sum = 0, sq = 0;
  for (size_t k = 0; k < d; ++k) {
    const double e = double(out->result->decoded_sum[k]) - clean[k];
    sum += e;
    sq += e * e;
  }
  const double mean = sum / d, sd = std::sqrt(sq / d - mean * mean);
  const double want = std::sqrt(double(n)) * options.noise_stddev;  // 0.1225
  EXPECT_NEAR(sd, want, 0.03 * want);
  EXPECT_NEAR(mean, 0.0, 5 * want / std::sqrt(double(d)));
  EXPECT_NE(out->result->sum, round.ExpectedSum(all)) << "no noise was added";
}

TEST(SecAggDistributedNoise, NoiseThatCouldOverflowTheSumIsRefused) {
  SecAggOptions options;
  options.federation_id = "f";
  options.vector_size = 10;
  options.clip = 1.0;
  options.bits = 24;
  options.max_clients = 200;  // 200 x 2^23 fits 2^31 without noise, not with 8 x 1.0 of it
  EXPECT_TRUE(options.Validate().ok());
  options.noise_stddev = 1.0;
  EXPECT_THAT(options.Validate().message(), ::testing::HasSubstr("noised updates"));
  options.noise_stddev = -1;
  EXPECT_THAT(options.Validate().message(), ::testing::HasSubstr("noise_stddev must be finite"));
}

}  // namespace
}  // namespace fedmesh
