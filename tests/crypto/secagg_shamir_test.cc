// Shamir t-of-k over GF(2^8): the field arithmetic against an independent reference, a
// known-answer split (a fixed polynomial whose shares were computed separately, below),
// round trips through every kind of share subset, the refusals of Split and Combine, and
// that t-1 shares say nothing about the secret: they interpolate to a wrong value, their
// bytes are uniform whatever the secret (chi-square), and every secret byte is consistent
// with them through exactly one polynomial.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "crypto/secagg/shamir.h"
#include "crypto/sodium.h"
#include "tests/crypto/secagg_test_util.h"

namespace fedmesh {
namespace {

using secagg_test::ChiSquareUniform;
using secagg_test::Hex;
using secagg_test::Must;
using secagg_test::ScriptedRandom;
using secagg_test::ToVector;
using ::testing::HasSubstr;

// Carry-less multiply, then reduce by x^8 + x^4 + x^3 + x + 1: the textbook definition,
// sharing no code with the constant-time multiply under test.
uint8_t ReferenceMul(uint8_t a, uint8_t b) {
  uint32_t p = 0;
  for (int i = 0; i < 8; ++i) {
    if ((b >> i) & 1) p ^= uint32_t{a} << i;
  }
  for (int i = 14; i >= 8; --i) {
    if ((p >> i) & 1) p ^= 0x11bu << (i - 8);
  }
  return static_cast<uint8_t>(p);
}

std::vector<ShamirShare> Views(const ShamirShares& shares, std::vector<size_t> which) {
  std::vector<ShamirShare> out;
  for (size_t i : which) out.push_back(shares[i]);
  return out;
}

class ShamirTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

TEST_F(ShamirTest, FieldMultiplyMatchesTheReferenceOnAllPairs) {
  // FIPS-197 section 4.2 examples, then every pair.
  EXPECT_EQ(Gf256Mul(0x57, 0x83), 0xc1);
  EXPECT_EQ(Gf256Mul(0x57, 0x13), 0xfe);
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      ASSERT_EQ(Gf256Mul(static_cast<uint8_t>(a), static_cast<uint8_t>(b)),
                ReferenceMul(static_cast<uint8_t>(a), static_cast<uint8_t>(b)))
          << a << " * " << b;
    }
  }
}

TEST_F(ShamirTest, FieldInverse) {
  EXPECT_EQ(Gf256Inverse(0x53), 0xca);  // FIPS-197 section 5.1.1
  EXPECT_EQ(Gf256Inverse(0), 0);
  for (int a = 1; a < 256; ++a) {
    EXPECT_EQ(Gf256Mul(static_cast<uint8_t>(a), Gf256Inverse(static_cast<uint8_t>(a))), 1) << a;
  }
}

// Secret 01 53 ca ff, t = 3, coefficients c1 = 02 03 57 00 and c2 = 10 83 13 01, so byte i
// of share x is s_i + c1_i * x + c2_i * x^2 in GF(2^8). Expected shares computed with
// Python, independently of fedmesh:
//   def gmul(a, b):  # carry-less product reduced mod 0x11b
//       p = 0
//       for i in range(8):
//           if b >> i & 1: p ^= a << i
//       for i in range(14, 7, -1):
//           if p >> i & 1: p ^= 0x11b << (i - 8)
//       return p
//   [bytes(s[i] ^ gmul(c1[i], x) ^ gmul(c2[i], gmul(x, x)) for i in range(4)).hex()
//    for x in range(1, 6)]
TEST_F(ShamirTest, KnownAnswerSplit) {
  const std::vector<uint8_t> secret = Hex("0153caff");
  ScriptedRandom rng(
      Hex("02035700"
          "10831301"));  // c1 then c2, the documented order
  Result<ShamirShares> shares = ShamirSplit(secret, 3, 5, rng);
  ASSERT_TRUE(shares.ok()) << shares.status().ToString();
  EXPECT_EQ(rng.used(), 8u);
  ASSERT_EQ(shares->size(), 5u);
  const char* expected[] = {"13d38efe", "456f28fb", "57ef6cfa", "12b7a6ef", "0037e2ee"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ((*shares)[i].x, i + 1);
    EXPECT_EQ(ToVector((*shares)[i].y), Hex(expected[i])) << "share x = " << i + 1;
  }
  // And back from hand-written shares (x = 2, 4, 5), not from Split's output.
  const std::vector<uint8_t> y2 = Hex("456f28fb"), y4 = Hex("12b7a6ef"), y5 = Hex("0037e2ee");
  const std::vector<ShamirShare> three = {{4, y4}, {2, y2}, {5, y5}};
  Result<SecureBuffer> back = ShamirCombine(three, 3);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToVector(back->span()), secret);
}

TEST_F(ShamirTest, AnyThresholdSubsetRebuildsTheSecret) {
  DeterministicRandom rng(1);
  for (uint32_t t : {1u, 2u, 5u, 9u}) {
    for (uint32_t k : {t, t + 1, 2 * t + 3}) {
      std::vector<uint8_t> secret(32);
      rng.Fill(secret);
      Result<ShamirShares> shares = ShamirSplit(secret, t, k, rng);
      ASSERT_TRUE(shares.ok()) << shares.status().ToString();
      // First t, last t, a shuffled subset, and all k.
      std::vector<size_t> all(k);
      std::iota(all.begin(), all.end(), 0);
      std::vector<std::vector<size_t>> subsets = {
          {all.begin(), all.begin() + t}, {all.end() - t, all.end()}, all};
      std::vector<size_t> shuffled = all;
      std::reverse(shuffled.begin(), shuffled.end());
      std::rotate(shuffled.begin(), shuffled.begin() + k / 2, shuffled.end());
      subsets.push_back({shuffled.begin(), shuffled.begin() + t});
      for (const auto& subset : subsets) {
        Result<SecureBuffer> back = ShamirCombine(Views(*shares, subset), t);
        ASSERT_TRUE(back.ok()) << back.status().ToString();
        EXPECT_EQ(ToVector(back->span()), secret) << "t = " << t << " k = " << k;
      }
    }
  }
  // The largest split there is: 255 shares.
  std::vector<uint8_t> secret(32, 0xa5);
  Result<ShamirShares> shares = ShamirSplit(secret, 128, 255, rng);
  ASSERT_TRUE(shares.ok());
  std::vector<size_t> top(128);
  std::iota(top.begin(), top.end(), 127);
  EXPECT_EQ(ToVector(ShamirCombine(Views(*shares, top), 128)->span()), secret);
}

TEST_F(ShamirTest, SplitRefusesBadParameters) {
  DeterministicRandom rng(2);
  const std::vector<uint8_t> secret(32, 1);
  EXPECT_EQ(ShamirSplit(secret, 0, 5, rng).status().code(), StatusCode::kInvalidArgument);
  const Status too_high = ShamirSplit(secret, 6, 5, rng).status();
  EXPECT_EQ(too_high.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(too_high.message(), HasSubstr("got threshold 6 of 5"));
  EXPECT_EQ(ShamirSplit(secret, 2, 256, rng).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShamirSplit({}, 2, 3, rng).status().message(), "cannot share an empty secret");
}

TEST_F(ShamirTest, CombineRefusesMalformedShareSets) {
  DeterministicRandom rng(3);
  const std::vector<uint8_t> secret(32, 7);
  ShamirShares shares = Must(ShamirSplit(secret, 3, 5, rng));

  const Status few = ShamirCombine(Views(shares, {0, 1}), 3).status();
  EXPECT_EQ(few.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(few.message(), "a 3-of-k secret needs 3 shares to rebuild; got 2");

  std::vector<ShamirShare> dup = Views(shares, {0, 1, 2});
  dup[2].x = dup[0].x;
  const Status dup_status = ShamirCombine(dup, 3).status();
  EXPECT_EQ(dup_status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dup_status.message(), "two Shamir shares have the same x = 1");

  std::vector<ShamirShare> zero = Views(shares, {0, 1, 2});
  zero[1].x = 0;
  const Status zero_status = ShamirCombine(zero, 3).status();
  EXPECT_EQ(zero_status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(zero_status.message(), HasSubstr("x = 0"));

  std::vector<ShamirShare> short_y = Views(shares, {0, 1, 2});
  short_y[2].y = short_y[2].y.first(31);
  const Status len_status = ShamirCombine(short_y, 3).status();
  EXPECT_EQ(len_status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(len_status.message(), HasSubstr("different lengths (32 and 31 bytes)"));

  // A duplicate beyond the first t is still refused: every share given is checked.
  std::vector<ShamirShare> late_dup = Views(shares, {0, 1, 2, 3});
  late_dup[3].x = 2;
  EXPECT_EQ(ShamirCombine(late_dup, 3).status().code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(ShamirCombine(Views(shares, {0, 1, 2}), 0).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ShamirTest, FewerThanThresholdSharesInterpolateToAWrongValue) {
  DeterministicRandom rng(4);
  int wrong = 0;
  constexpr int kTrials = 500;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<uint8_t> secret(32);
    rng.Fill(secret);
    ShamirShares shares = Must(ShamirSplit(secret, 5, 9, rng));
    // A combiner told t - 1 = 4 gets a value; it is just not the secret (a 32-byte match by
    // chance has probability 2^-256).
    Result<SecureBuffer> guess = ShamirCombine(Views(shares, {1, 3, 6, 8}), 4);
    ASSERT_TRUE(guess.ok());
    if (ToVector(guess->span()) != secret) ++wrong;
  }
  EXPECT_EQ(wrong, kTrials);
}

// t = 3: the two shares at x = 1 and x = 2 of a constant secret (0x00 or 0xff in every
// byte) should be jointly uniform. 2^16 byte pairs, binned on the top nibble of each share
// (256 bins); p = 0.001 critical value for 255 dof is 330.5.
TEST_F(ShamirTest, ThresholdMinusOneSharesAreUniformWhateverTheSecret) {
  DeterministicRandom rng(5);
  for (uint8_t fill : {uint8_t{0x00}, uint8_t{0xff}}) {
    const std::vector<uint8_t> secret(32, fill);
    std::vector<uint64_t> bins(256, 0);
    for (int split = 0; split < (1 << 16) / 32; ++split) {
      ShamirShares shares = Must(ShamirSplit(secret, 3, 5, rng));
      for (size_t b = 0; b < 32; ++b) {
        ++bins[(shares[0].y[b] >> 4) << 4 | (shares[1].y[b] >> 4)];
      }
    }
    EXPECT_LT(ChiSquareUniform(bins), secagg_test::kChiSquare255Dof999)
        << "secret byte " << int{fill};
  }
}

// For t = 3 and any two observed share bytes (at x = 1, 2), count over all 2^16 coefficient
// pairs (c1, c2) how many reproduce them for each candidate secret byte: exactly one for
// every one of the 256 candidates, so the two shares rule out nothing.
TEST_F(ShamirTest, ThresholdMinusOneSharesAreConsistentWithEverySecret) {
  DeterministicRandom rng(6);
  const std::vector<uint8_t> secret = {0x42};
  ShamirShares shares = Must(ShamirSplit(secret, 3, 3, rng));
  const uint8_t y1 = shares[0].y[0], y2 = shares[1].y[0];
  std::vector<int> polynomials(256, 0);
  for (int c1 = 0; c1 < 256; ++c1) {
    for (int c2 = 0; c2 < 256; ++c2) {
      // p(x) = s + c1 x + c2 x^2 with p(1) = y1 fixes s; then check p(2) = y2.
      const uint8_t s = y1 ^ static_cast<uint8_t>(c1) ^ static_cast<uint8_t>(c2);
      const uint8_t at2 =
          s ^ Gf256Mul(static_cast<uint8_t>(c1), 2) ^ Gf256Mul(static_cast<uint8_t>(c2), 4);
      if (at2 == y2) ++polynomials[s];
    }
  }
  for (int s = 0; s < 256; ++s) EXPECT_EQ(polynomials[s], 1) << "secret byte " << s;
}

}  // namespace
}  // namespace fedmesh
