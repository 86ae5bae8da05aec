// Codec chains (core/codec): round trips and error bounds for every stage and for chains,
// unbiasedness of the stochastic stages, exact top-k, canonical names, and hostile bytes.
#include "core/codec/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cstring>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/codec/half_float.h"
#include "core/codec/rand_k.h"
#include "core/codec/top_k.h"
#include "core/rng.h"

namespace fedmesh::codec {
namespace {

std::vector<float> Gaussian(size_t n, uint64_t seed, double sd = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Normal(0.0, sd));
  return v;
}

Chain MustParse(std::string_view text) {
  auto c = Chain::Parse(text);
  EXPECT_TRUE(c.ok()) << text << ": " << c.status().ToString();
  return c.ok() ? *c : Chain();
}

std::vector<float> RoundTrip(const Chain& c, std::span<const float> x, uint64_t seed = 1) {
  std::vector<uint8_t> bytes;
  Status s = c.Encode(x, seed, &bytes);
  EXPECT_TRUE(s.ok()) << c.name() << ": " << s.ToString();
  EXPECT_LE(bytes.size(), c.MaxEncodedBytes(x.size())) << c.name();
  std::vector<float> y(x.size(), -7.0f);
  s = c.Decode(bytes, y);
  EXPECT_TRUE(s.ok()) << c.name() << ": " << s.ToString();
  return y;
}

TEST(CodecChain, CanonicalNames) {
  EXPECT_EQ(MustParse("").name(), "none");
  EXPECT_EQ(MustParse("none").name(), "none");
  EXPECT_EQ(MustParse("topk:0.01|int8|zstd").name(), "topk:0.01|int8:256|zstd:3");
  EXPECT_EQ(MustParse("randk:0.1|qsgd:4").name(), "randk:0.1|qsgd:4:512");
  EXPECT_EQ(MustParse("fp16").name(), "fp16");
  EXPECT_EQ(MustParse("bf16|zstd:9").name(), "bf16|zstd:9");
  EXPECT_EQ(MustParse("int8:64").name(), "int8:64");
  EXPECT_EQ(MustParse("topk:1e-3").name(), "topk:0.001");
  for (std::string_view s : {"topk:0.01|int8|zstd", "randk:0.25|fp16", "qsgd:8:128|zstd:1"}) {
    Chain c = MustParse(s);
    EXPECT_EQ(MustParse(c.name()), c);
  }
  EXPECT_TRUE(MustParse("zstd").lossless());
  EXPECT_FALSE(MustParse("fp16").lossless());
  EXPECT_TRUE(MustParse("randk:0.5|qsgd:4").unbiased());
  EXPECT_FALSE(MustParse("topk:0.5").unbiased());
  EXPECT_FALSE(MustParse("randk:0.5|int8").unbiased());
}

TEST(CodecChain, BadChainsNameTheStage) {
  struct Case {
    const char* chain;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"gzip", "is unknown; known stages"},
           {"topk", "needs exactly one parameter"},
           {"topk:0", "must be a number in (0, 1]"},
           {"topk:1.5", "must be a number in (0, 1]"},
           {"topk:nan", "must be a number in (0, 1]"},
           {"topk:0.1x", "must be a number in (0, 1]"},
           {"randk:-1", "must be a number in (0, 1]"},
           {"int8:0", "block size"},
           {"int8:abc", "block size"},
           {"qsgd", "number of levels"},
           {"qsgd:128", "levels"},
           {"qsgd:4:0", "bucket size"},
           {"zstd:0", "level"},
           {"zstd:23", "level"},
           {"fp16:2", "takes no parameters"},
           {"int8|topk:0.1", "must come before \"int8\""},
           {"zstd|fp16", "must come before \"zstd\""},
           {"fp16|int8", "repeats a quantizer"},
           {"topk:0.1|randk:0.1", "repeats a sparsifier"},
           {"zstd|zstd", "repeats zstd"},
           {"none|zstd", "stands alone"},
           {"fp16||zstd", "is unknown"},
           {"FP16", "is unknown"},
       }) {
    auto r = Chain::Parse(c.chain);
    ASSERT_FALSE(r.ok()) << c.chain;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.chain;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.chain << " -> " << r.status().message();
  }
}

TEST(CodecChain, LosslessChainsAreExact) {
  for (size_t n : {0, 1, 7, 1000, 100003}) {
    const std::vector<float> x = Gaussian(n, n);
    for (std::string_view s : {"none", "zstd", "zstd:19", "topk:1", "topk:1|zstd"}) {
      EXPECT_EQ(RoundTrip(MustParse(s), x), x) << s << " n=" << n;
    }
  }
}

TEST(CodecChain, NoneIsRawLittleEndianFloat32) {
  const std::vector<float> x = {1.0f, -2.5f};
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(Chain().Encode(x, 0, &bytes).ok());
  ASSERT_EQ(bytes.size(), 8u);
  EXPECT_EQ(bytes[3], 0x3F);  // 1.0f = 0x3F800000, little-endian
  EXPECT_EQ(bytes[2], 0x80);
}

TEST(HalfFloat, ScalarConversionMatchesKnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);  // below the rounding midpoint
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // ties to even: infinity
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);  // tie to even: zero
  EXPECT_EQ(FloatToHalf(0x1.8p-25f), 0x0001);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3C00);  // tie, even stays
  EXPECT_EQ(FloatToHalf(1.0f + 0x1.8p-11f), 0x3C01);
  EXPECT_EQ(HalfToFloat(0x3555), 0x1.554p-2f);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie to even
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);
  EXPECT_EQ(Bf16ToFloat(0xC040), -3.0f);
  // Every fp16 pattern that is finite survives half -> float -> half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (HalfIsNonFinite(static_cast<uint16_t>(h))) continue;
    EXPECT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h);
  }
}

// The vectorised quantizers agree bit for bit with the scalar reference conversions.
TEST(HalfFloat, QuantizersMatchScalarReference) {
  std::vector<float> x = Gaussian(10007, 3, 100.0);
  Rng rng(4);
  for (size_t i = 0; i < x.size(); i += 3) {
    x[i] = static_cast<float>(std::ldexp(rng.Uniform(-1, 1), static_cast<int>(rng.UniformInt(45)) - 30));
  }
  std::vector<uint8_t> b16, bbf;
  ASSERT_TRUE(MustParse("fp16").Encode(x, 0, &b16).ok());
  ASSERT_TRUE(MustParse("bf16").Encode(x, 0, &bbf).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h = static_cast<uint16_t>(b16[2 * i] | (b16[2 * i + 1] << 8));
    uint16_t g = static_cast<uint16_t>(bbf[2 * i] | (bbf[2 * i + 1] << 8));
    ASSERT_EQ(h, FloatToHalf(x[i])) << i << " " << x[i];
    ASSERT_EQ(g, FloatToBf16(x[i])) << i << " " << x[i];
  }
  std::vector<float> y(x.size());
  ASSERT_TRUE(MustParse("fp16").Decode(b16, y).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h = static_cast<uint16_t>(b16[2 * i] | (b16[2 * i + 1] << 8));
    ASSERT_EQ(y[i], HalfToFloat(h)) << i;
  }
}

TEST(CodecChain, HalfFloatErrorBounds) {
  std::vector<float> x = Gaussian(100000, 5, 10.0);
  x.push_back(65504.0f);
  x.push_back(-6e-5f);  // the fp16 normal / subnormal boundary region
  x.push_back(1e-7f);
  const std::vector<float> y16 = RoundTrip(MustParse("fp16"), x);
  const std::vector<float> ybf = RoundTrip(MustParse("bf16|zstd"), x);
  for (size_t i = 0; i < x.size(); ++i) {
    const float a = std::fabs(x[i]);
    if (a >= 0x1p-14f) {
      EXPECT_LE(std::fabs(y16[i] - x[i]), a * 0x1p-11f) << x[i];
    } else {
      EXPECT_LE(std::fabs(y16[i] - x[i]), 0x1p-25f) << x[i];
    }
    EXPECT_LE(std::fabs(ybf[i] - x[i]), a * 0x1p-8f) << x[i];
  }
}

TEST(CodecChain, HalfFloatRefusesWhatItCannotHold) {
  std::vector<uint8_t> bytes;
  std::vector<float> x(100, 1.0f);
  x[77] = 70000.0f;
  Status s = MustParse("fp16").Encode(x, 0, &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("index 77"), std::string::npos) << s.message();
  EXPECT_TRUE(MustParse("bf16").Encode(x, 0, &bytes).ok());
  x[77] = FLT_MAX;
  s = MustParse("bf16").Encode(x, 0, &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("index 77"), std::string::npos) << s.message();
}

TEST(CodecChain, EveryEncoderRefusesNonFinite) {
  for (std::string_view chain : {"none", "fp16", "bf16", "int8", "qsgd:4", "topk:0.1",
                                  "randk:0.1", "zstd", "topk:0.01|int8|zstd"}) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> x = Gaussian(3000, 6);
      x[2345] = bad;
      std::vector<uint8_t> bytes;
      Status s = MustParse(chain).Encode(x, 0, &bytes);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << chain << " " << bad;
      EXPECT_NE(s.message().find("2345"), std::string::npos) << chain << ": " << s.message();
    }
  }
}

TEST(CodecChain, Int8ErrorBoundPerBlock) {
  for (uint32_t block : {1u, 7u, 256u, 4096u}) {
    std::vector<float> x = Gaussian(20011, block, 3.0);
    for (size_t i = 0; i < x.size(); i += 1000) x[i] *= 100.0f;  // outliers
    std::fill(x.begin() + 500, x.begin() + 1500, 0.0f);            // all-zero blocks
    const Chain c = MustParse("int8:" + std::to_string(block));
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(c.Encode(x, 0, &bytes).ok());
    EXPECT_EQ(bytes.size(), 4 * ((x.size() + block - 1) / block) + x.size());
    std::vector<float> y(x.size());
    ASSERT_TRUE(c.Decode(bytes, y).ok());
    for (size_t b = 0; b * block < x.size(); ++b) {
      const size_t lo = b * block, hi = std::min<size_t>(x.size(), lo + block);
      float amax = 0;
      for (size_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (size_t i = lo; i < hi; ++i) {
        ASSERT_LE(std::fabs(y[i] - x[i]), amax / 254.0f * (1.0f + 1e-5f)) << block << " " << i;
      }
    }
  }
}

// Mean of many decodes with different seeds converges to the input: the standard error of
// the mean shrinks as 1/sqrt(trials), so the tolerance is a few standard errors.
void ExpectUnbiased(const Chain& c, const std::vector<float>& x, int trials) {
  std::vector<double> sum(x.size(), 0.0), sum_sq(x.size(), 0.0);
  std::vector<uint8_t> bytes;
  std::vector<float> y(x.size());
  for (int t = 0; t < trials; ++t) {
    ASSERT_TRUE(c.Encode(x, 1000 + t, &bytes).ok());
    ASSERT_TRUE(c.Decode(bytes, y).ok());
    for (size_t i = 0; i < x.size(); ++i) {
      sum[i] += y[i];
      sum_sq[i] += static_cast<double>(y[i]) * y[i];
    }
  }
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double mean = sum[i] / trials;
    const double var = std::max(0.0, sum_sq[i] / trials - mean * mean);
    const double se = std::sqrt(var / trials) + 1e-6;
    worst = std::max(worst, std::fabs(mean - x[i]) / se);
  }
  // With 256 coordinates, a z-score above 5.5 has probability < 1e-5 for an unbiased codec.
  EXPECT_LT(worst, 5.5) << c.name();
  // A biased codec is caught too: deterministic rounding toward zero has var = 0.
}

TEST(CodecChain, StochasticStagesAreUnbiased) {
  const std::vector<float> x = Gaussian(256, 9);
  ExpectUnbiased(MustParse("qsgd:4"), x, 4000);
  ExpectUnbiased(MustParse("qsgd:1:64"), x, 4000);
  ExpectUnbiased(MustParse("randk:0.1"), x, 4000);
  ExpectUnbiased(MustParse("randk:0.25|qsgd:8|zstd"), x, 4000);
}

TEST(CodecChain, BiasedStagesAreCaughtByTheUnbiasednessCheck) {
  // The check above must be able to fail: top-k drops the small values every time.
  const std::vector<float> x = Gaussian(256, 9);
  const Chain c = MustParse("topk:0.1");
  std::vector<uint8_t> bytes;
  std::vector<float> y(x.size());
  ASSERT_TRUE(c.Encode(x, 1, &bytes).ok());
  ASSERT_TRUE(c.Decode(bytes, y).ok());
  size_t dropped = 0;
  for (size_t i = 0; i < x.size(); ++i) dropped += (y[i] == 0.0f && x[i] != 0.0f);
  EXPECT_EQ(dropped, 256u - 26u);
}

TEST(CodecChain, QsgdCodesStayWithinLevels) {
  const std::vector<float> x = Gaussian(5000, 10);
  const std::vector<float> y = RoundTrip(MustParse("qsgd:3:100"), x);
  for (size_t b = 0; b < 50; ++b) {
    double norm = 0;
    for (size_t i = 100 * b; i < 100 * b + 100; ++i) norm += double(x[i]) * x[i];
    norm = std::sqrt(norm);
    for (size_t i = 100 * b; i < 100 * b + 100; ++i) {
      const double level = std::fabs(y[i]) / norm * 3.0;
      EXPECT_NEAR(level, std::round(level), 1e-4);
      EXPECT_LE(std::fabs(std::fabs(y[i]) - std::fabs(x[i])), norm / 3.0 * (1 + 1e-6));
      if (y[i] != 0) {
        EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i]));
      }
    }
  }
}

TEST(TopK, SelectsExactlyTheLargestMagnitudes) {
  for (size_t n : {1, 2, 100, 4097, 200000}) {
    for (double ratio : {0.001, 0.01, 0.3, 1.0}) {
      std::vector<float> x = Gaussian(n, n + 1);
      // Many exact ties, and values sharing the top 16 bits (the radix bucket).
      for (size_t i = 0; i < n; i += 7) x[i] = (i % 2 ? 1.5f : -1.5f);
      for (size_t i = 3; i < n; i += 11) x[i] = 1.5f + static_cast<float>(i % 5) * 0x1p-20f;
      const uint64_t k = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(ratio * n)));
      std::vector<uint32_t> got;
      ASSERT_TRUE(SelectTopK(x, std::min<uint64_t>(k, n), &got).ok());
      // Reference: full sort by (|x| desc, index asc).
      std::vector<uint32_t> order(n);
      std::iota(order.begin(), order.end(), 0u);
      std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        return std::fabs(x[a]) > std::fabs(x[b]);
      });
      order.resize(std::min<uint64_t>(k, n));
      std::sort(order.begin(), order.end());
      ASSERT_EQ(got, order) << "n=" << n << " ratio=" << ratio;
    }
  }
}

TEST(TopK, KeepsValuesExactlyAndZeroesTheRest) {
  const std::vector<float> x = Gaussian(100000, 11);
  const Chain c = MustParse("topk:0.01");
  const std::vector<float> y = RoundTrip(c, x);
  size_t kept = 0;
  float min_kept = INFINITY, max_dropped = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] != 0) {
      ++kept;
      EXPECT_EQ(y[i], x[i]);
      min_kept = std::min(min_kept, std::fabs(x[i]));
    } else {
      max_dropped = std::max(max_dropped, std::fabs(x[i]));
    }
  }
  EXPECT_EQ(kept, 1000u);
  EXPECT_GE(min_kept, max_dropped);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(c.Encode(x, 0, &bytes).ok());
  // 1000 varint gaps (mean gap 100: 1-2 bytes each) + 4000 value bytes.
  EXPECT_LT(bytes.size(), 4000u + 2000u);
  EXPECT_GT(bytes.size(), 4000u + 1000u - 1);
}

TEST(RandK, IndicesAreDistinctSortedAndUniform) {
  std::vector<uint32_t> idx;
  std::vector<int> hits(50, 0);
  for (uint64_t seed = 0; seed < 20000; ++seed) {
    RandomKIndices(50, 5, seed, &idx);
    ASSERT_EQ(idx.size(), 5u);
    for (size_t j = 1; j < idx.size(); ++j) ASSERT_LT(idx[j - 1], idx[j]);
    for (uint32_t i : idx) ++hits[i];
  }
  // Each index is kept with probability 5/50: 2000 expected hits, sd ~ 42.
  for (int h : hits) EXPECT_NEAR(h, 2000, 250);
  RandomKIndices(10, 10, 3, &idx);
  EXPECT_EQ(idx, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(CodecChain, SameSeedSameBytes) {
  const std::vector<float> x = Gaussian(10000, 12);
  for (std::string_view s : {"randk:0.1|qsgd:8|zstd", "topk:0.01|int8|zstd"}) {
    const Chain c = MustParse(s);
    std::vector<uint8_t> a, b;
    ASSERT_TRUE(c.Encode(x, 42, &a).ok());
    ASSERT_TRUE(c.Encode(x, 42, &b).ok());
    EXPECT_EQ(a, b) << s;
  }
}

TEST(CodecChain, ChainsCompressAsExpected) {
  const std::vector<float> x = Gaussian(203530, 13, 0.01);  // the MLP's size
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(MustParse("topk:0.01|int8|zstd").Encode(x, 0, &bytes).ok());
  const double ratio = 4.0 * x.size() / bytes.size();
  EXPECT_GE(ratio, 100.0) << bytes.size();
  ASSERT_TRUE(MustParse("fp16").Encode(x, 0, &bytes).ok());
  EXPECT_EQ(bytes.size(), 2 * x.size());
  ASSERT_TRUE(MustParse("int8").Encode(x, 0, &bytes).ok());
  EXPECT_EQ(bytes.size(), x.size() + 4 * ((x.size() + 255) / 256));
  // Whole-chain round trip: kept values within int8's bound, the rest zero.
  const std::vector<float> y = RoundTrip(MustParse("topk:0.01|int8|zstd"), x);
  size_t nonzero = 0;
  for (float v : y) nonzero += (v != 0.0f);
  EXPECT_LE(nonzero, 2036u);
  EXPECT_GT(nonzero, 1900u);
}

// ---- Hostile bytes ---------------------------------------------------------------------

Status DecodeBytes(std::string_view chain, std::vector<uint8_t> bytes, size_t n) {
  std::vector<float> y(n);
  Status s = MustParse(chain).Decode(bytes, y);
  if (s.ok()) {
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
  }
  return s;
}

std::vector<uint8_t> Encoded(std::string_view chain, const std::vector<float>& x,
                             uint64_t seed = 0) {
  std::vector<uint8_t> bytes;
  EXPECT_TRUE(MustParse(chain).Encode(x, seed, &bytes).ok());
  return bytes;
}

void ExpectCorrupt(std::string_view chain, const std::vector<uint8_t>& bytes, size_t n,
                   std::string_view says) {
  Status s = DecodeBytes(chain, bytes, n);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << chain << ": " << s.ToString();
  EXPECT_NE(s.message().find(says), std::string::npos) << chain << ": " << s.message();
}

TEST(CodecHostile, WrongLengthsAreRejected) {
  const std::vector<float> x = Gaussian(1000, 14);
  for (std::string_view chain : {"none", "fp16", "bf16", "int8", "qsgd:4", "topk:0.1",
                                  "randk:0.1", "topk:0.1|fp16"}) {
    std::vector<uint8_t> b = Encoded(chain, x);
    std::vector<uint8_t> shorter(b.begin(), b.end() - 1);
    std::vector<uint8_t> longer = b;
    longer.push_back(0);
    EXPECT_EQ(DecodeBytes(chain, shorter, x.size()).code(), StatusCode::kCorruption) << chain;
    EXPECT_EQ(DecodeBytes(chain, longer, x.size()).code(), StatusCode::kCorruption) << chain;
    EXPECT_EQ(DecodeBytes(chain, {}, x.size()).code(), StatusCode::kCorruption) << chain;
    // The same bytes declared as a different element count.
    EXPECT_FALSE(DecodeBytes(chain, b, x.size() + 1).ok()) << chain;
  }
}

TEST(CodecHostile, NonFinitePatternsAndBadScalesAreRejected) {
  const std::vector<float> x = Gaussian(600, 15);
  {
    std::vector<uint8_t> b = Encoded("none", x);
    const float nan = NAN;
    std::memcpy(b.data() + 4 * 17, &nan, 4);
    ExpectCorrupt("none", b, x.size(), "value 17 is not finite");
  }
  {
    std::vector<uint8_t> b = Encoded("fp16", x);
    b[2 * 33] = 0x00, b[2 * 33 + 1] = 0x7C;  // +inf
    ExpectCorrupt("fp16", b, x.size(), "value 33 is infinity or NaN");
  }
  {
    std::vector<uint8_t> b = Encoded("bf16", x);
    b[2 * 5] = 0xC0, b[2 * 5 + 1] = 0x7F;  // NaN
    ExpectCorrupt("bf16", b, x.size(), "value 5 is infinity or NaN");
  }
  for (float scale : {-1.0f, float(NAN), float(INFINITY), FLT_MAX}) {
    std::vector<uint8_t> b = Encoded("int8", x);
    std::memcpy(b.data() + 4, &scale, 4);  // block 1
    ExpectCorrupt("int8", b, x.size(), "int8 block 1 has scale");
  }
  {
    std::vector<uint8_t> b = Encoded("int8", x);
    b[4 * 3 + 400] = 0x80;  // code -128
    ExpectCorrupt("int8", b, x.size(), "int8 code 400 is -128");
  }
  for (float norm : {-1.0f, float(NAN), float(INFINITY)}) {
    std::vector<uint8_t> b = Encoded("qsgd:4", x);
    std::memcpy(b.data(), &norm, 4);
    ExpectCorrupt("qsgd:4", b, x.size(), "qsgd bucket 0 has norm");
  }
  {
    std::vector<uint8_t> b = Encoded("qsgd:4", x);
    b[4 * 2 + 10] = 5;  // level 5 > 4
    ExpectCorrupt("qsgd:4", b, x.size(), "qsgd code 10 is level 5");
  }
}

// Regression (found with the fuzz targets, fuzz/int8_fuzz): FLT_MAX / 127 rounds up as a
// float, so the largest scale the decoder accepts times code +-127 overflowed to infinity
// under an OK status; the encoder writes that scale for FLT_MAX itself.
TEST(CodecHostile, Int8LargestScaleDecodesFinite) {
  const float scale = FLT_MAX / 127.0f;
  std::vector<uint8_t> b(4 + 3);
  std::memcpy(b.data(), &scale, 4);
  b[4] = 127, b[5] = 0x81, b[6] = 1;  // codes 127, -127, 1
  std::vector<float> y(3);
  ASSERT_TRUE(MustParse("int8").Decode(b, y).ok());
  EXPECT_EQ(y[0], FLT_MAX);
  EXPECT_EQ(y[1], -FLT_MAX);
  EXPECT_EQ(y[2], scale);
  const std::vector<float> x = {FLT_MAX, -FLT_MAX, 0.0f, 1e38f};
  const std::vector<float> back = RoundTrip(MustParse("int8:2"), x);
  EXPECT_EQ(back[0], FLT_MAX);
  EXPECT_EQ(back[1], -FLT_MAX);
  EXPECT_EQ(back[2], 0.0f);
  EXPECT_NEAR(back[3], 1e38f, 1e38f / 254);
}

// Regressions (found with the fuzz targets): a block / bucket of tiny values made the
// encoders' reciprocal overflow (0 * inf = NaN, full-scale codes for zeros), and NaNs with a
// large mantissa wrapped around bf16's rounding sum and were sent as +-0.
TEST(CodecChain, TinyBlocksAndWrappingNaNsEncodeCorrectly) {
  const std::vector<float> tiny = {1e-38f, 0.0f, -5e-39f, 2e-45f};
  for (std::string_view chain : {"int8", "int8:1", "qsgd:4", "qsgd:127:2"}) {
    const std::vector<float> y = RoundTrip(MustParse(chain), tiny);
    EXPECT_EQ(y[1], 0.0f) << chain;  // a zero stays zero
    for (size_t i = 0; i < tiny.size(); ++i) {
      EXPECT_LE(std::fabs(y[i] - tiny[i]), 1e-38f) << chain << " " << i;
      if (y[i] != 0.0f) {
        EXPECT_EQ(std::signbit(y[i]), std::signbit(tiny[i])) << chain << " " << i;
      }
    }
  }
  std::vector<uint8_t> bytes;
  for (uint32_t nan_bits : {0x7FFFFFFFu, 0xFFFF8000u, 0x7FFF8000u, 0xFFFFFFFFu}) {
    const std::vector<float> x = {1.0f, std::bit_cast<float>(nan_bits)};
    Status s = MustParse("bf16").Encode(x, 0, &bytes);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << std::hex << nan_bits;
    EXPECT_NE(s.message().find("NaN at index 1"), std::string::npos) << s.message();
  }
}

TEST(CodecHostile, TopKIndicesAreValidated) {
  const size_t n = 1000;  // topk:0.003 keeps 3
  auto with_gaps = [](std::vector<uint8_t> gaps) {
    gaps.resize(gaps.size() + 12, 0);  // three float32 values of 0
    return gaps;
  };
  EXPECT_TRUE(DecodeBytes("topk:0.003", with_gaps({5, 1, 100}), n).ok());
  ExpectCorrupt("topk:0.003", with_gaps({5, 0, 100}), n, "strictly increasing");
  ExpectCorrupt("topk:0.003", with_gaps({0xE7, 0x07, 1, 1}), n,
                "topk index 1 is 1000 but the vector has 1000 elements");  // 999, then 1000
  ExpectCorrupt("topk:0.003", with_gaps({0xE8, 0x07, 1, 1}), n, "topk index 0 is 1000");
  ExpectCorrupt("topk:0.003", with_gaps({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 1}), n,
                "oversized varint");
  ExpectCorrupt("topk:0.003", {0x80}, n, "needs at least 3 bytes");
  ExpectCorrupt("topk:0.003", {0x80, 0x80, 0x80}, n, "truncated or oversized varint");
}

TEST(CodecHostile, ZstdFramesAreBounded) {
  const std::vector<float> x = Gaussian(1000, 16);
  std::vector<uint8_t> b = Encoded("fp16|zstd", x);
  // Declared as fewer elements than it holds: the frame's content size exceeds the bound.
  ExpectCorrupt("fp16|zstd", b, 10, "larger than the chain produces");
  ExpectCorrupt("fp16|zstd", b, 900, "declares 2000 bytes but the chain produces at most 1800");
  std::vector<uint8_t> trailing = b;
  trailing.push_back(0);
  ExpectCorrupt("fp16|zstd", trailing, 1000, "holds 1 bytes after its frame");
  std::vector<uint8_t> two = b;
  two.insert(two.end(), b.begin(), b.end());
  ExpectCorrupt("fp16|zstd", two, 2000, "after its frame");
  std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<ptrdiff_t>(b.size() / 2));
  ExpectCorrupt("fp16|zstd", cut, 1000, "not a complete zstd frame");
  ExpectCorrupt("zstd", {1, 2, 3, 4, 5, 6, 7, 8}, 2, "not a complete zstd frame");
  // A bomb: 1 MB of zeros compresses to a few hundred bytes but 10 elements allow 40.
  std::vector<uint8_t> bomb = Encoded("zstd", std::vector<float>(262144, 0.0f));
  ExpectCorrupt("zstd", bomb, 10, "declares 1048576 bytes but the chain produces at most 40");
  ExpectCorrupt("zstd", bomb, 200000, "declares 1048576 bytes");
}

}  // namespace
}  // namespace fedmesh::codec
