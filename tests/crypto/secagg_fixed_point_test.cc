// Fixed-point encoding into Z_2^32: exact encodings of known values (two's complement for
// negatives, round half away from zero), L2 clipping, sums that decode to the float sum
// within n/2 quantisation steps, and the overflow bound of Validate() at its exact edge
// (the largest allowed client count summing the largest encodings still decodes right).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "crypto/secagg/fixed_point.h"
#include "tests/crypto/secagg_test_util.h"

namespace fedmesh {
namespace {

using secagg_test::Must;
using ::testing::HasSubstr;

TEST(FixedPointTest, EncodesKnownValues) {
  const FixedPointOptions options{1.0, 16, 10};
  ASSERT_TRUE(options.Validate().ok());
  EXPECT_DOUBLE_EQ(options.scale(), 32767.0);
  // Norm sqrt(0.25 + 0.0625 + 0.01) < 1: no clipping. 0.5 * 32767 = 16383.5 rounds away
  // from zero; -0.25 * 32767 = -8191.75 -> -8192 = 0xffffe000; 0.1 * 32767 = 3276.7 -> 3277.
  const std::vector<float> x = {0.5f, -0.25f, 0.0f, 0.1f};
  Result<std::vector<uint32_t>> enc = EncodeFixedPoint(x, options);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ(*enc, (std::vector<uint32_t>{16384u, 0xffffe000u, 0u, 3277u}));
  // A coordinate exactly at the bound encodes to exactly 2^(B-1) - 1.
  EXPECT_EQ(Must(EncodeFixedPoint(std::vector<float>{-1.0f}, options)),
            (std::vector<uint32_t>{static_cast<uint32_t>(-32767)}));
}

TEST(FixedPointTest, ClipsToTheL2Bound) {
  const FixedPointOptions options{2.0, 12, 10};  // S = 2047 / 2
  // Norm 10 > 2: scaled by 0.2 to (1.2, -1.6), norm 2.
  const std::vector<uint32_t> enc =
      Must(EncodeFixedPoint(std::vector<float>{6.0f, -8.0f}, options));
  EXPECT_EQ(static_cast<int32_t>(enc[0]), static_cast<int32_t>(std::round(1.2 * 2047 / 2)));
  EXPECT_EQ(static_cast<int32_t>(enc[1]), static_cast<int32_t>(std::round(-1.6 * 2047 / 2)));
  // Every encoding of a huge vector stays within +-(2^(B-1) - 1).
  std::vector<float> big(100, 1e30f);
  big[3] = -1e30f;
  for (uint32_t e : Must(EncodeFixedPoint(big, options))) {
    EXPECT_LE(std::abs(static_cast<int32_t>(e)), 2047);
  }
}

TEST(FixedPointTest, SumOfEncodingsDecodesToTheSum) {
  const FixedPointOptions options{1.0, 16, 100};
  Rng rng(7);
  constexpr size_t kClients = 100, kDim = 50;
  std::vector<uint32_t> sum(kDim, 0);
  std::vector<double> plain(kDim, 0);
  for (size_t c = 0; c < kClients; ++c) {
    std::vector<float> x(kDim);
    for (float& v : x) v = static_cast<float>(rng.Uniform(-0.1, 0.1));  // norm < 1
    const std::vector<uint32_t> enc = Must(EncodeFixedPoint(x, options));
    for (size_t i = 0; i < kDim; ++i) {
      sum[i] += enc[i];  // wraps mod 2^32, as the masked sum does
      plain[i] += x[i];
    }
  }
  const std::vector<float> decoded = DecodeFixedPointSum(sum, options);
  for (size_t i = 0; i < kDim; ++i) {
    // Each encoding is off by at most half a step, 0.5 / S.
    EXPECT_NEAR(decoded[i], plain[i], kClients * 0.5 / options.scale() + 1e-6) << i;
  }
}

TEST(FixedPointTest, ValidateRefusesSettingsThatCanOverflow) {
  // 16 bits: 2^15 - 1 = 32767 per client; (2^31 - 1) / 32767 = 65538 clients fit.
  EXPECT_TRUE((FixedPointOptions{1.0, 16, 65538}.Validate().ok()));
  const Status over = FixedPointOptions{1.0, 16, 65539}.Validate();
  EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.message(),
            "a sum of 65539 updates at 16 bits could exceed 2^31 - 1 and wrap around in Z_2^32: "
            "use bits <= 15 or lower max_clients to 65538");
  EXPECT_TRUE((FixedPointOptions{1.0, 32, 1}.Validate().ok()));
  EXPECT_EQ(FixedPointOptions({1.0, 32, 2}).Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(FixedPointOptions({1.0, 2, 3000000000ull}).Validate().message(),
              HasSubstr("lower max_clients to 2147483647"));
  for (double clip : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                      std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_EQ(FixedPointOptions({clip, 16, 10}).Validate().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(FixedPointOptions({1.0, 1, 10}).Validate().message(), HasSubstr("[2, 32]; got 1"));
  EXPECT_THAT(FixedPointOptions({1.0, 33, 10}).Validate().message(), HasSubstr("got 33"));
  EXPECT_EQ(FixedPointOptions({1.0, 16, 0}).Validate().code(), StatusCode::kInvalidArgument);
}

// At the edge Validate allows, the largest possible sum does not wrap: 65538 clients each
// at +C (and each at -C) decode to exactly +-65538 C.
TEST(FixedPointTest, LargestAllowedSumDoesNotWrap) {
  const FixedPointOptions options{1.0, 16, 65538};
  ASSERT_TRUE(options.Validate().ok());
  const uint32_t plus = Must(EncodeFixedPoint(std::vector<float>{1.0f}, options))[0];
  const uint32_t minus = Must(EncodeFixedPoint(std::vector<float>{-1.0f}, options))[0];
  std::vector<uint32_t> sum = {0, 0};
  for (uint64_t c = 0; c < options.max_clients; ++c) {
    sum[0] += plus;
    sum[1] += minus;
  }
  const std::vector<float> decoded = DecodeFixedPointSum(sum, options);
  EXPECT_FLOAT_EQ(decoded[0], 65538.0f);
  EXPECT_FLOAT_EQ(decoded[1], -65538.0f);
  // One client more would wrap to the other sign: this is what Validate prevents.
  EXPECT_LT(static_cast<int32_t>(sum[0] + plus), 0);
}

TEST(FixedPointTest, RefusesNonFiniteValues) {
  const FixedPointOptions options;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    const Status s = EncodeFixedPoint(std::vector<float>{0.1f, bad}, options).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("coordinate 1 is not finite"));
  }
}

}  // namespace
}  // namespace fedmesh
