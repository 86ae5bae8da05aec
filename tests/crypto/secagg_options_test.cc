// SecAggOptions and the factories: Validate() refuses each unusable setting with a message
// naming it, ResolveGraphParameters applies the default rules and refuses rosters too
// small for the threshold or min_clients, and SecAggClient / SecAggServer::Create refuse
// allowlists and identities that cannot work. A fresh client's advertisement is signed
// over exactly AdvertiseSignedBytes of its own round.
#include "crypto/secagg/secagg_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "crypto/secagg/secagg_client.h"
#include "crypto/secagg/secagg_server.h"
#include "crypto/sodium.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;

SecAggOptions Valid() {
  SecAggOptions o;
  o.federation_id = "fed";
  o.vector_size = 10;
  return o;
}

Identity Make(const std::string& name) { return std::move(Identity::Generate(name)).value(); }

class SecAggOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

TEST_F(SecAggOptionsTest, ValidateNamesTheBadField) {
  EXPECT_TRUE(Valid().Validate().ok());
  SecAggOptions o = Valid();
  o.federation_id.clear();
  EXPECT_EQ(o.Validate().message(), "secure aggregation needs a federation_id");
  o = Valid();
  o.vector_size = 0;
  EXPECT_THAT(o.Validate().message(), HasSubstr("vector_size must be in [1, 268435456]; got 0"));
  o.vector_size = kMaxSecAggVectorSize + 1;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = Valid();
  o.neighbours = 7;
  EXPECT_THAT(o.Validate().message(),
              HasSubstr("neighbours must be 0 (default) or even and <= 254; got 7"));
  o.neighbours = 256;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = Valid();
  o.neighbours = 8;
  o.threshold = 4;
  EXPECT_EQ(o.Validate().message(),
            "secure aggregation threshold 4 must be more than half of, and at most, the 8 "
            "neighbours");
  o.threshold = 9;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o.threshold = 5;
  EXPECT_TRUE(o.Validate().ok());
  o = Valid();
  o.min_clients = 1;
  EXPECT_THAT(o.Validate().message(), HasSubstr("min_clients must be at least 2"));
  o = Valid();
  o.bits = 32;
  o.max_clients = 2;
  EXPECT_THAT(o.Validate().message(), HasSubstr("wrap around in Z_2^32"));
  o.clip = -1;
  EXPECT_THAT(o.Validate().message(), HasSubstr("clip (L2 bound) must be finite and > 0"));
}

TEST_F(SecAggOptionsTest, GraphParametersFollowTheDefaultRulesAndRefuseSmallRosters) {
  Result<SecAggGraphParameters> p = ResolveGraphParameters(Valid(), 200);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->degree, 16u);
  EXPECT_EQ(p->threshold, 9u);
  p = ResolveGraphParameters(Valid(), 5);
  EXPECT_EQ(p->degree, 4u);
  EXPECT_EQ(p->threshold, 3u);

  EXPECT_EQ(ResolveGraphParameters(Valid(), 2).status().message(),
            "a roster of 2 clients is below min_clients = 3");
  SecAggOptions o = Valid();
  o.threshold = 5;
  const Status small = ResolveGraphParameters(o, 5).status();
  EXPECT_EQ(small.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(small.message(),
            "a roster of 5 clients gives each one 4 neighbours, fewer than the threshold 5: no "
            "secret could be rebuilt");
  o.threshold = 2;  // with the default degree of 5 clients (4), 2 is not more than half
  const Status half = ResolveGraphParameters(o, 5).status();
  EXPECT_EQ(half.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(half.message(), HasSubstr("threshold 2 is at most half of the 4 neighbours"));
  o.neighbours = 100;  // capped at n - 1 = 9 (complete graph): t must be 5..9
  o.threshold = 5;
  p = ResolveGraphParameters(o, 10);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->threshold, 5u);
}

TEST_F(SecAggOptionsTest, FactoriesRefuseUnworkableAllowlists) {
  Identity a = Make("site-a"), b = Make("site-b"), c = Make("site-c");
  const std::vector<PublicIdentity> allowlist = {a.public_identity(), b.public_identity()};

  EXPECT_EQ(SecAggClient::Create(Valid(), c, allowlist).status().message(),
            "client 'site-c' is not on the secure aggregation allowlist");
  std::vector<PublicIdentity> twice = allowlist;
  twice.push_back(a.public_identity());
  EXPECT_EQ(SecAggClient::Create(Valid(), a, twice).status().message(),
            "the secure aggregation allowlist names 'site-a' twice");
  EXPECT_EQ(SecAggServer::Create(Valid(), twice).status().code(), StatusCode::kInvalidArgument);
  // The name is enrolled, with another identity's signing key.
  std::vector<PublicIdentity> swapped = allowlist;
  swapped[0].sign_public = b.public_identity().sign_public;
  EXPECT_EQ(SecAggClient::Create(Valid(), a, swapped).status().code(),
            StatusCode::kPermissionDenied);
  // max_clients defaults to the allowlist size: 32-bit encodings of 2 clients can wrap.
  SecAggOptions wide = Valid();
  wide.bits = 32;
  EXPECT_THAT(SecAggClient::Create(wide, a, allowlist).status().message(),
              HasSubstr("a sum of 2 updates at 32 bits"));
  EXPECT_THAT(SecAggServer::Create(wide, allowlist).status().message(),
              HasSubstr("a sum of 2 updates at 32 bits"));
  SecAggOptions bad = Valid();
  bad.vector_size = 0;
  EXPECT_EQ(SecAggServer::Create(bad, allowlist).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SecAggOptionsTest, AdvertisementIsSignedForItsOwnRoundOnly) {
  Identity a = Make("site-a");
  const std::vector<PublicIdentity> allowlist = {a.public_identity()};
  SecAggOptions o = Valid();
  o.round = 12;
  SecAggClient client = std::move(SecAggClient::Create(o, a, allowlist)).value();
  const AdvertiseKeys& ad = client.advertisement();
  EXPECT_EQ(client.stage(), SecAggStage::kAdvertiseKeys);
  EXPECT_EQ(ad.client_id, "site-a");
  EXPECT_EQ(ad.round, 12u);
  EXPECT_NE(ad.channel_public_key, ad.masking_public_key);
  EXPECT_TRUE(VerifySignature(
      a.public_identity(),
      AdvertiseSignedBytes("fed", 12, "site-a", ad.channel_public_key, ad.masking_public_key),
      ad.signature));
  EXPECT_FALSE(VerifySignature(
      a.public_identity(),
      AdvertiseSignedBytes("fed", 13, "site-a", ad.channel_public_key, ad.masking_public_key),
      ad.signature));
  EXPECT_FALSE(VerifySignature(
      a.public_identity(),
      AdvertiseSignedBytes("fed2", 12, "site-a", ad.channel_public_key, ad.masking_public_key),
      ad.signature));
  // Two clients (two rounds) of one identity have unrelated keys.
  SecAggClient next = std::move(SecAggClient::Create(o, a, allowlist)).value();
  EXPECT_NE(next.advertisement().masking_public_key, ad.masking_public_key);
}

}  // namespace
}  // namespace fedmesh
