// Error feedback (core/codec/error_feedback.h): nothing a lossy chain drops is lost, only
// delayed; the DGC variant's momentum correction and masking; state restore and misuse.
#include "core/codec/error_feedback.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"

namespace fedmesh::codec {
namespace {

std::vector<float> Update(size_t n, Rng& rng, double sd) {
  std::vector<float> u(n);
  for (float& x : u) x = static_cast<float>(rng.Normal(0.0, sd));
  return u;
}

ErrorFeedback Make(std::string_view chain, FeedbackMode mode, double momentum = 0.9) {
  auto c = Chain::Parse(chain);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  auto ef = ErrorFeedback::Create(*c, ErrorFeedbackOptions{mode, momentum});
  EXPECT_TRUE(ef.ok()) << ef.status().ToString();
  return std::move(ef).value();
}

// The acceptance invariant: after N rounds, sum(sent) + residual == sum(true updates).
TEST(ErrorFeedback, SentPlusResidualEqualsTheSumOfTrueUpdates) {
  for (std::string_view chain : {"topk:0.01|int8|zstd", "topk:0.1", "int8:64", "fp16", "bf16",
                                  "topk:0.05|fp16"}) {
    ErrorFeedback ef = Make(chain, FeedbackMode::kAuto);
    ASSERT_EQ(ef.mode(), FeedbackMode::kResidual) << chain;
    const size_t n = 5000;
    Rng rng(7);
    std::vector<double> sum_true(n, 0.0), sum_sent(n, 0.0);
    std::vector<uint8_t> bytes;
    std::vector<float> sent;
    double max_abs_sum = 0.0;
    for (int round = 0; round < 50; ++round) {
      const std::vector<float> u = Update(n, rng, 0.01 * (1 + round % 3));
      ASSERT_TRUE(ef.Encode(u, round, &bytes, &sent).ok()) << chain;
      for (size_t i = 0; i < n; ++i) {
        sum_true[i] += u[i];
        sum_sent[i] += sent[i];
      }
    }
    ASSERT_EQ(ef.residual().size(), n);
    double worst = 0.0, residual_norm = 0.0;
    for (size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::fabs(sum_sent[i] + ef.residual()[i] - sum_true[i]));
      max_abs_sum = std::max(max_abs_sum, std::fabs(sum_true[i]));
      residual_norm += static_cast<double>(ef.residual()[i]) * ef.residual()[i];
    }
    // Float32 rounding of 50 compensated additions on values of order 0.1-1.
    EXPECT_LT(worst, 1e-5 * std::max(1.0, max_abs_sum)) << chain;
    // And the feedback did something: for top-k the residual is far from zero.
    if (chain.substr(0, 4) == "topk") {
      EXPECT_GT(std::sqrt(residual_norm), 0.1) << chain;
    }
  }
}

// Without feedback the same loop loses mass: the invariant above is not trivially true.
TEST(ErrorFeedback, WithoutFeedbackTopKLosesWhatItDrops) {
  ErrorFeedback ef = Make("topk:0.01", FeedbackMode::kOff);
  const size_t n = 5000;
  Rng rng(7);
  double lost = 0.0;
  std::vector<uint8_t> bytes;
  std::vector<float> sent;
  for (int round = 0; round < 10; ++round) {
    const std::vector<float> u = Update(n, rng, 0.01);
    ASSERT_TRUE(ef.Encode(u, round, &bytes, &sent).ok());
    for (size_t i = 0; i < n; ++i) lost += std::fabs(u[i] - sent[i]);
  }
  EXPECT_TRUE(ef.residual().empty());
  EXPECT_GT(lost, 100 * 0.005);
}

TEST(ErrorFeedback, AutoModeFollowsTheChain) {
  EXPECT_EQ(Make("none", FeedbackMode::kAuto).mode(), FeedbackMode::kOff);
  EXPECT_EQ(Make("zstd", FeedbackMode::kAuto).mode(), FeedbackMode::kOff);
  EXPECT_EQ(Make("randk:0.1", FeedbackMode::kAuto).mode(), FeedbackMode::kOff);
  EXPECT_EQ(Make("qsgd:4|zstd", FeedbackMode::kAuto).mode(), FeedbackMode::kOff);
  EXPECT_EQ(Make("topk:0.1|qsgd:4", FeedbackMode::kAuto).mode(), FeedbackMode::kResidual);
  EXPECT_EQ(Make("int8", FeedbackMode::kAuto).mode(), FeedbackMode::kResidual);
  EXPECT_EQ(Make("randk:0.1", FeedbackMode::kResidual).mode(), FeedbackMode::kResidual);
}

// DGC: v = m v + u; the accumulated velocity is what gets sent, and the velocity is masked
// where something was sent. sum(sent) + residual == sum of the velocities fed in.
TEST(ErrorFeedback, DgcMomentumCorrectionAndMasking) {
  ErrorFeedback ef = Make("topk:0.02", FeedbackMode::kDgc, 0.9);
  ASSERT_EQ(ef.mode(), FeedbackMode::kDgc);
  const size_t n = 2000;
  Rng rng(11);
  std::vector<double> sum_v(n, 0.0), sum_sent(n, 0.0);
  std::vector<uint8_t> bytes;
  std::vector<float> sent;
  for (int round = 0; round < 30; ++round) {
    const std::vector<float> u = Update(n, rng, 0.01);
    std::vector<float> v_before = ef.velocity();
    if (v_before.empty()) v_before.assign(n, 0.0f);
    ASSERT_TRUE(ef.Encode(u, round, &bytes, &sent).ok());
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      sum_v[i] += 0.9f * v_before[i] + u[i];
      sum_sent[i] += sent[i];
      if (sent[i] != 0.0f) {
        ++kept;
        EXPECT_EQ(ef.velocity()[i], 0.0f) << "velocity not masked at " << i;
      } else {
        // (The library may fuse the multiply-add: equal to float rounding, not bit for bit.)
        EXPECT_NEAR(ef.velocity()[i], 0.9f * v_before[i] + u[i], 1e-6 * std::fabs(u[i]) + 1e-8);
      }
    }
    EXPECT_EQ(kept, 40u);
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(sum_sent[i] + ef.residual()[i], sum_v[i], 1e-5) << i;
  }
}

TEST(ErrorFeedback, RestoreAndMisuseAreChecked) {
  ErrorFeedback ef = Make("topk:0.1", FeedbackMode::kResidual);
  std::vector<uint8_t> bytes;
  EXPECT_EQ(ef.Restore(std::vector<float>(10, 0.0f), std::vector<float>(11, 0.0f)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ef.Restore({1.0f, NAN}, {}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(ef.Restore(std::vector<float>(10, 0.5f), {}).ok());
  // The restored residual is added: an all-zero update sends the residual's top 10%.
  std::vector<float> sent;
  ASSERT_TRUE(ef.Encode(std::vector<float>(10, 0.0f), 0, &bytes, &sent).ok());
  EXPECT_EQ(sent[0], 0.5f);  // ties: the lowest index is kept
  EXPECT_EQ(ef.residual()[0], 0.0f);
  EXPECT_EQ(ef.residual()[1], 0.5f);
  Status s = ef.Encode(std::vector<float>(12, 0.0f), 0, &bytes, &sent);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("model changed size"), std::string::npos) << s.message();
  EXPECT_EQ(ef.residual().size(), 10u);  // state untouched by the failed call
  std::vector<float> bad(10, 0.0f);
  bad[3] = INFINITY;
  EXPECT_EQ(ef.Encode(bad, 0, &bytes, &sent).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ef.residual()[1], 0.5f);
  auto c = Chain::Parse("fp16").value();
  EXPECT_EQ(ErrorFeedback::Create(c, {FeedbackMode::kDgc, 1.0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseFeedbackMode("sometimes").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedmesh::codec
