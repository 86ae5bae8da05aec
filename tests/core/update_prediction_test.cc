// Update prediction helpers (core/codec/update_prediction.h): the predicted change, the
// model + prediction payload and what its receiver splits it into.
#include "core/codec/update_prediction.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/codec/payload.h"
#include "core/wire/wire_codec.h"

namespace fedmesh::codec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(UpdatePrediction, IsBetaTimesTheChangeOrNothingWhenItOverflows) {
  const std::vector<float> before = {1.0f, -2.0f, 0.5f}, after = {2.0f, -4.0f, 0.5f};
  EXPECT_THAT(PredictUpdate(before, after, 0.5), ElementsAre(0.5f, -1.0f, 0.0f));
  EXPECT_THAT(PredictUpdate(before, after, 1.0), ElementsAre(1.0f, -2.0f, 0.0f));
  const float big = std::numeric_limits<float>::max();
  EXPECT_TRUE(PredictUpdate(std::vector<float>{-big}, std::vector<float>{big}, 1.0).empty());
}

TEST(UpdatePrediction, PackedLosslesslyTheReceiverGetsBothHalvesExactly) {
  const std::vector<float> model = {0.25f, -1.5f, 3.0f, 7.0f}, p = {0.01f, 0.0f, -0.02f, 1e-7f};
  auto packed = PackWithPrediction(Chain::Parse("none").value(), model, p, 1);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(packed->payload.element_count, 8u);
  EXPECT_EQ(packed->prediction, p);
  std::vector<float> got_model, got_p;
  ASSERT_TRUE(SplitPrediction(DecodePayload(packed->payload).value(), 4, &got_model, &got_p).ok());
  EXPECT_EQ(got_model, model);
  EXPECT_EQ(got_p, p);
}

TEST(UpdatePrediction, PackedLossilyTheSenderKeepsWhatTheReceiverDecodes) {
  std::vector<float> model(600), p(600);
  for (size_t i = 0; i < model.size(); ++i) {
    model[i] = 0.1f * static_cast<float>(i % 11) - 0.5f;
    p[i] = 0.001f * static_cast<float>(i % 17) - 0.008f;
  }
  auto packed = PackWithPrediction(Chain::Parse("int8|zstd").value(), model, p, 7);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_LT(packed->payload.bytes.size(), 2 * model.size() * 4 / 3);  // int8, not float32
  std::vector<float> got_model, got_p;
  ASSERT_TRUE(SplitPrediction(DecodePayload(packed->payload).value(), 600, &got_model, &got_p).ok());
  EXPECT_EQ(got_p, packed->prediction);  // bit for bit: both ends use these values
  EXPECT_NE(got_p, p);                   // and int8 did change them
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(got_p[i], p[i], 0.5 / 127) << i;  // a block may hold model values too
}

TEST(UpdatePrediction, AChainThatRefusesTheValuesFallsBackToExactFloats) {
  const std::vector<float> model = {1e6f, 0.0f}, p = {0.5f, -0.5f};  // fp16 overflows
  auto packed = PackWithPrediction(Chain::Parse("fp16").value(), model, p, 1);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(packed->payload.codec, "none");
  EXPECT_THAT(wire::PayloadFloats(packed->payload).value(), ElementsAre(1e6f, 0.0f, 0.5f, -0.5f));
  EXPECT_EQ(packed->prediction, p);
}

TEST(UpdatePrediction, BadSizesAreInvalidArgument) {
  const Chain none = Chain::Parse("none").value();
  auto r = PackWithPrediction(none, std::vector<float>{1, 2}, std::vector<float>{1}, 1);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("a prediction of 1 values for a model of 2"));
  EXPECT_FALSE(PackWithPrediction(none, {}, {}, 1).ok());
  std::vector<float> m, p;
  Status s = SplitPrediction(std::vector<float>(5), 2, &m, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("has 5 values; expected 2 x 2"));
}

}  // namespace
}  // namespace fedmesh::codec
