// What travels over the cut of split training (vertical/cut_wire.h, split_messages.h):
// int8 through the codec chain's quantizer keeps every value within max|x in its block| / 254
// at a quarter of float32's bytes plus one scale per 256 values; float wires are unchanged;
// a corrupt int8 scale, a wrong length and an unknown compression are named errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/rng.h"
#include "vertical/cut_wire.h"
#include "vertical/split_messages.h"

namespace fedmesh::vertical {
namespace {

using ::testing::HasSubstr;

std::vector<float> Values(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  // Rows of very different magnitude, as a batch's gradients are.
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rng.Normal() * std::pow(10.0, static_cast<double>(i % 7) - 3));
  return v;
}

TEST(CutWireTest, Int8KeepsEveryValueWithinItsBlocksBoundAtAQuarterOfTheBytes) {
  for (size_t n : {size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{1000}, size_t{4096}}) {
    const auto v = Values(n, n);
    std::string bytes;
    ASSERT_TRUE(EncodeCutValues(CutWire::kInt8, v, bytes).ok());
    const size_t blocks = (n + kCutInt8Block - 1) / kCutInt8Block;
    EXPECT_EQ(bytes.size(), n + 4 * blocks);
    EXPECT_EQ(CutWireBytes(CutWire::kInt8, n), n + 4 * blocks);
    std::vector<float> back(n);
    ASSERT_TRUE(DecodeCutValues(CutWire::kInt8, bytes, back).ok());
    for (size_t b = 0; b < blocks; ++b) {
      const size_t lo = b * kCutInt8Block, hi = std::min(n, lo + kCutInt8Block);
      float amax = 0;
      for (size_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(v[i]));
      for (size_t i = lo; i < hi; ++i) {
        ASSERT_LE(std::fabs(v[i] - back[i]), amax / 254.0f * (1 + 1e-5f)) << "n " << n << " value " << i;
      }
    }
  }
  // float32 goes through unchanged, bf16 at half the bytes.
  const auto v = Values(300, 9);
  std::string bytes;
  ASSERT_TRUE(EncodeCutValues(CutWire::kFloat32, v, bytes).ok());
  std::vector<float> back(v.size());
  ASSERT_TRUE(DecodeCutValues(CutWire::kFloat32, bytes, back).ok());
  EXPECT_EQ(back, v);
  ASSERT_TRUE(EncodeCutValues(CutWire::kBFloat16, v, bytes).ok());
  EXPECT_EQ(bytes.size(), 600u);
}

TEST(CutWireTest, BadInputIsANamedError) {
  const std::vector<float> v = {1, -2, 3};
  std::string bytes;
  ASSERT_TRUE(EncodeCutValues(CutWire::kInt8, v, bytes).ok());
  std::vector<float> back(3);
  EXPECT_THAT(DecodeCutValues(CutWire::kInt8, bytes.substr(1), back).message(), HasSubstr("6 bytes for 3 values, expected 7"));
  std::string nan_scale = bytes;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_scale.data(), &nan, 4);
  EXPECT_THAT(DecodeCutValues(CutWire::kInt8, nan_scale, back).message(), HasSubstr("int8 block 0 has scale"));
  const std::vector<float> inf = {1, std::numeric_limits<float>::infinity()};
  EXPECT_EQ(EncodeCutValues(CutWire::kInt8, inf, bytes).code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(CutWireOfCompression("int4").status().message(), HasSubstr("use none (float32), fp16, bf16 or int8"));
  EXPECT_EQ(CutWireOfCompression("int8").value(), CutWire::kInt8);
  EXPECT_EQ(CutWireOfCompression("none").value(), CutWire::kFloat32);
}

TEST(CutWireTest, Int8ActivationsInASplitMessage) {
  SplitMessage m;
  m.type = SplitMessageType::kActivations;
  m.training = true;
  m.wire = CutWire::kInt8;
  m.step = 4;
  m.rows = 32;
  m.cols = 24;
  m.values = Values(32 * 24, 3);
  auto bytes = EncodeSplitMessage(m);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(bytes->size(), 48u + 768 + 4 * 3);  // header, codes, 3 scales
  auto back = DecodeSplitMessage(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->wire, CutWire::kInt8);
  EXPECT_FALSE(back->signed_by_sender);
  ASSERT_EQ(back->values.size(), m.values.size());
  float amax = 0;
  for (float v : m.values) amax = std::max(amax, std::fabs(v));
  for (size_t i = 0; i < m.values.size(); ++i) EXPECT_NEAR(back->values[i], m.values[i], amax / 254 * 1.0001f) << i;
  // A corrupt scale (the first, right after the header) is named with the step.
  std::string bad = *bytes;
  const float neg = -1.0f;
  std::memcpy(bad.data() + 48, &neg, 4);
  EXPECT_THAT(DecodeSplitMessage(bad).status().message(),
              HasSubstr("activations for step 4: int8 block 0 has scale"));
  // A wire type past int8.
  bad = *bytes;
  bad[7] = 4;
  EXPECT_THAT(DecodeSplitMessage(bad).status().message(), HasSubstr("unknown flags or wire type"));
}

}  // namespace
}  // namespace fedmesh::vertical
