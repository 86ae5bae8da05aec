// Key agreement and the share envelope: the pairwise mask seed against an independent
// computation (RFC 7748's X25519 vector, then BLAKE2b over the documented layout with
// Python's hashlib), agreement on both sides, separation by round and by pair, refusal of
// low-order public keys; share boxes that open only for their exact (federation, round,
// sender, recipient) and fail on any flipped byte; and the SecureRandom implementations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "crypto/secagg/key_agreement.h"
#include "crypto/secagg/mask_prg.h"
#include "crypto/secagg/secure_random.h"
#include "crypto/secagg/share_box.h"
#include "crypto/sodium.h"
#include "tests/crypto/secagg_test_util.h"

namespace fedmesh {
namespace {

using secagg_test::Hex;
using secagg_test::HexArray;
using secagg_test::Must;
using secagg_test::ToVector;
using ::testing::HasSubstr;

class SecAggKeyAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

// RFC 7748 section 6.1: Alice's secret key and Bob's public key agree on
// K = 4a5d9d5b...1742. The expected seed is, in Python,
//   lp = lambda b: struct.pack('<I', len(b)) + b
//   hashlib.blake2b(lp(b'fedmesh-secagg-pair-v1') + struct.pack('<Q', 7) + lp(b'alice') +
//                   lp(b'bob') + K, digest_size=32).hexdigest()
TEST_F(SecAggKeyAgreementTest, PairwiseSeedKnownAnswer) {
  const std::vector<uint8_t> alice_secret =
      Hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
  const CurveKey bob_public =
      HexArray<32>("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
  Result<SecureBuffer> point = SharedPoint(alice_secret, bob_public, "bob");
  ASSERT_TRUE(point.ok());
  EXPECT_EQ(ToVector(point->span()),
            Hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"));
  const std::vector<uint8_t> expected =
      Hex("c6462eee347d793c5a27fb1399c19e07c6c7ed28ea4c45b09f2404db2a864e3f");
  // The ids are sorted inside, so the order they are passed in does not matter.
  EXPECT_EQ(ToVector(PairwiseMaskSeed(alice_secret, bob_public, 7, "alice", "bob")->span()),
            expected);
  const std::vector<uint8_t> bob_secret =
      Hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
  const CurveKey alice_public =
      HexArray<32>("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
  EXPECT_EQ(ToVector(PairwiseMaskSeed(bob_secret, alice_public, 7, "bob", "alice")->span()),
            expected);
}

TEST_F(SecAggKeyAgreementTest, BothSidesAgreeAndNobodyElseDoes) {
  DeterministicRandom rng(11);
  CurveKeyPair u = Must(CurveKeyPair::Generate(rng));
  CurveKeyPair v = Must(CurveKeyPair::Generate(rng));
  CurveKeyPair w = Must(CurveKeyPair::Generate(rng));
  const auto uv =
      ToVector(PairwiseMaskSeed(u.secret_key.span(), v.public_key, 3, "u", "v")->span());
  const auto vu =
      ToVector(PairwiseMaskSeed(v.secret_key.span(), u.public_key, 3, "v", "u")->span());
  EXPECT_EQ(uv, vu);
  ASSERT_EQ(uv.size(), 32u);
  // Another round, another pair, a third party's key: all different seeds.
  EXPECT_NE(ToVector(PairwiseMaskSeed(u.secret_key.span(), v.public_key, 4, "u", "v")->span()), uv);
  EXPECT_NE(ToVector(PairwiseMaskSeed(u.secret_key.span(), v.public_key, 3, "u", "x")->span()), uv);
  EXPECT_NE(ToVector(PairwiseMaskSeed(w.secret_key.span(), v.public_key, 3, "u", "v")->span()), uv);
  // The masks the two sides expand from it are the same words.
  std::vector<uint32_t> mu(100), mv(100);
  ExpandMask(std::span<const uint8_t, 32>(uv.data(), 32), mu);
  ExpandMask(std::span<const uint8_t, 32>(vu.data(), 32), mv);
  EXPECT_EQ(mu, mv);
}

TEST_F(SecAggKeyAgreementTest, LowOrderPublicKeysAreRefused) {
  DeterministicRandom rng(12);
  CurveKeyPair u = Must(CurveKeyPair::Generate(rng));
  const CurveKey zero{};
  const Status s = PairwiseMaskSeed(u.secret_key.span(), zero, 1, "u", "mallory").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "the X25519 public key of 'mallory' is a low-order point; no secret can be agreed "
            "with it");
  const Status box = ShareBoxKey(u.secret_key.span(), zero, "mallory").status();
  EXPECT_EQ(box.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(box.message(), HasSubstr("'mallory' is a low-order point"));
}

TEST_F(SecAggKeyAgreementTest, ShareBoxOpensOnlyForItsContext) {
  DeterministicRandom rng(13);
  CurveKeyPair u = Must(CurveKeyPair::Generate(rng));
  CurveKeyPair v = Must(CurveKeyPair::Generate(rng));
  SecureBuffer k_uv = Must(ShareBoxKey(u.secret_key.span(), v.public_key, "v"));
  SecureBuffer k_vu = Must(ShareBoxKey(v.secret_key.span(), u.public_key, "u"));
  ASSERT_EQ(ToVector(k_uv.span()), ToVector(k_vu.span()));

  std::vector<uint8_t> plaintext(64);
  for (size_t i = 0; i < plaintext.size(); ++i) plaintext[i] = static_cast<uint8_t>(i);
  const ShareBoxContext context{"fed", 9, "u", "v"};
  const std::vector<uint8_t> box = SealShareBox(k_uv.span(), plaintext, context, rng);
  ASSERT_EQ(box.size(), plaintext.size() + kShareBoxOverhead);
  Result<SecureBuffer> opened = OpenShareBox(k_vu.span(), box, context);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(ToVector(opened->span()), plaintext);

  for (const ShareBoxContext& other :
       {ShareBoxContext{"fed2", 9, "u", "v"}, ShareBoxContext{"fed", 10, "u", "v"},
        ShareBoxContext{"fed", 9, "w", "v"}, ShareBoxContext{"fed", 9, "u", "w"},
        ShareBoxContext{"fed", 9, "v", "u"}}) {
    const Status s = OpenShareBox(k_vu.span(), box, other).status();
    EXPECT_EQ(s.code(), StatusCode::kCorruption)
        << other.federation_id << other.round << other.from << other.to;
    EXPECT_THAT(s.message(), HasSubstr("fails authentication"));
  }
  for (size_t i = 0; i < box.size(); ++i) {
    std::vector<uint8_t> bad = box;
    bad[i] ^= 0x20;
    ASSERT_EQ(OpenShareBox(k_vu.span(), bad, context).status().code(), StatusCode::kCorruption)
        << "byte " << i;
  }
  const Status truncated =
      OpenShareBox(k_vu.span(), std::span(box).first(kShareBoxOverhead - 1), context).status();
  EXPECT_EQ(truncated.code(), StatusCode::kCorruption);
  EXPECT_THAT(truncated.message(), HasSubstr("39 bytes, shorter than its 40-byte nonce and tag"));
}

// DeterministicRandom's call i is the ChaCha20 keystream with nonce i; it replays from
// its seed and differs between seeds. SodiumRandom gives fresh bytes each call.
TEST_F(SecAggKeyAgreementTest, RandomSourcesBehaveAsDocumented) {
  std::array<uint8_t, 32> seed{};
  seed[0] = 42;
  DeterministicRandom a(seed), b(42), c(43);
  std::vector<uint8_t> first(40), second(40), again(40), other(40), expected(40);
  a.Fill(first);
  a.Fill(second);
  b.Fill(again);
  c.Fill(other);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, second);
  EXPECT_NE(first, other);
  std::array<uint8_t, 12> nonce{};
  nonce[0] = 1;
  ChaCha20Keystream(seed, nonce, 0, expected);
  EXPECT_EQ(second, expected);

  SodiumRandom os;
  std::vector<uint8_t> x(32), y(32);
  os.Fill(x);
  os.Fill(y);
  EXPECT_NE(x, y);
  EXPECT_NE(x, std::vector<uint8_t>(32, 0));
}

}  // namespace
}  // namespace fedmesh
