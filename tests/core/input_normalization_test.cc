// Federated input normalization in a graph (core/graph/input_normalization.h): the model
// with the Sub/Div in front gives on raw rows exactly what the model gives on rows scaled
// by hand (tables per feature, images per channel); taking the nodes out restores the
// original hash (what a site that pinned the model checks); bad shapes and constants are
// refused; the constants from the federation's statistics equal the pooled figures.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/builtin_graph.h"
#include "core/data/dataset.h"
#include "core/graph/graph_model.h"
#include "core/graph/input_normalization.h"
#include "core/model.h"
#include "core/model_zoo.h"
#include "core/onnx/onnx_reader.h"
#include "core/rng.h"
#include "core/stats/normalization_constants.h"

namespace fedmesh {
namespace {

const std::string kModel = std::string(FEDMESH_SOURCE_DIR) + "/examples/breast_cancer/hospital_mlp.onnx";

std::vector<float> Logits(graph::Graph g, const Dataset& d, LossKind kind = LossKind::kBceWithLogits) {
  auto backend = MakeCpuBackend(1);
  auto m = Model::CreateFromGraph("t", backend.get(), std::move(g));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossOptions loss;
  loss.kind = kind;
  EXPECT_TRUE((*m)->SetLoss(loss).ok());
  (*m)->Reserve(static_cast<int>(d.size()));
  (*m)->LoadContiguousBatch(d, 0, static_cast<int>(d.size()));
  (*m)->Evaluate(static_cast<int>(d.size()));
  const size_t outputs = kind == LossKind::kBceWithLogits ? 1 : static_cast<size_t>(d.num_classes);
  std::vector<float> out((*m)->logits(), (*m)->logits() + d.size() * outputs);
  return out;
}

TEST(InputNormalization, RawRowsThroughTheNormalizedModelEqualScaledRowsThroughTheModel) {
  auto base = onnx::ReadOnnxFile(kModel);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  Rng rng(1);
  std::vector<double> mean(30), sd(30);
  Dataset raw, scaled;
  raw.sample_shape = scaled.sample_shape = {30};
  raw.num_classes = scaled.num_classes = 2;
  for (int j = 0; j < 30; ++j) {
    mean[j] = rng.Normal(0, 100);
    sd[j] = j == 7 ? 0.0 : std::exp(rng.Normal(0, 2));  // feature 7 constant: divided by 1
  }
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < 30; ++j) {
      const double x = mean[j] + (sd[j] == 0 ? 0.0 : sd[j]) * rng.Normal();
      raw.features.push_back(static_cast<float>(x));
      scaled.features.push_back(static_cast<float>((static_cast<float>(x) - static_cast<float>(mean[j])) /
                                                   (sd[j] == 0 ? 1.0f : static_cast<float>(sd[j]))));
    }
    raw.labels.push_back(i % 2);
    scaled.labels.push_back(i % 2);
  }
  auto normalized = graph::AddInputNormalization(*base, mean, sd);
  ASSERT_TRUE(normalized.ok()) << normalized.status().ToString();
  EXPECT_TRUE(graph::HasInputNormalization(*normalized));
  EXPECT_NE(graph::CanonicalHash(*normalized), graph::CanonicalHash(*base));
  const std::vector<float> a = Logits(*normalized, raw), b = Logits(*base, scaled);
  ASSERT_EQ(a.size(), 64u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(b[i]))) << i;

  // A missing cell (NaN) in a raw row gets the mean, so its scaled value is 0: the logits
  // of rows with holes equal those of the scaled rows with 0 there.
  for (int i = 0; i < 64; i += 3) {
    const int j = (i * 7) % 30;
    raw.features[i * 30 + j] = std::nanf("");
    scaled.features[i * 30 + j] = 0.0f;
  }
  const std::vector<float> holes = Logits(*normalized, raw), filled = Logits(*base, scaled);
  for (size_t i = 0; i < holes.size(); ++i) EXPECT_NEAR(holes[i], filled[i], 1e-5f * (1 + std::fabs(filled[i]))) << i;

  auto back = graph::RemoveInputNormalization(*normalized);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(graph::CanonicalHash(*back), graph::CanonicalHash(*base));
  EXPECT_FALSE(graph::HasInputNormalization(*back));
  // Other constants, another hash: the hash pins the normalization too.
  mean[0] += 1;
  EXPECT_NE(graph::CanonicalHash(*graph::AddInputNormalization(*base, mean, sd)),
            graph::CanonicalHash(*normalized));
}

TEST(InputNormalization, RefusesWhatItCannotNormalize) {
  auto base = onnx::ReadOnnxFile(kModel);
  ASSERT_TRUE(base.ok());
  const std::vector<double> ok(30, 1.0), short_(29, 1.0);
  std::vector<double> nan(30, 1.0);
  nan[3] = NAN;
  std::vector<double> negative(30, 1.0);
  negative[0] = -1;
  auto err = [](const Result<graph::Graph>& r) { return r.ok() ? std::string() : r.status().message(); };
  EXPECT_NE(err(graph::AddInputNormalization(*base, short_, short_)).find("30 features; the statistics have 29"),
            std::string::npos);
  EXPECT_NE(err(graph::AddInputNormalization(*base, nan, ok)).find("not finite"), std::string::npos);
  EXPECT_NE(err(graph::AddInputNormalization(*base, ok, negative)).find("negative"), std::string::npos);
  auto once = graph::AddInputNormalization(*base, ok, ok);
  ASSERT_TRUE(once.ok());
  EXPECT_NE(err(graph::AddInputNormalization(*once, ok, ok)).find("already normalizes"), std::string::npos);
  auto image = onnx::ReadOnnxFile(std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/resnet_bn/model_train.onnx");
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  // An image model ([N, 1, 28, 28]) takes one constant per channel.
  EXPECT_NE(err(graph::AddInputNormalization(*image, ok, ok)).find("1 channels; the statistics have 30"),
            std::string::npos);
  EXPECT_TRUE(graph::AddInputNormalization(*image, std::vector<double>{0.3}, std::vector<double>{0.2}).ok());
  graph::Graph three_d = *base;
  three_d.inputs[0].dims = {-1, 5, 6};
  EXPECT_NE(err(graph::AddInputNormalization(three_d, ok, ok)).find("[batch, features] table or [batch, "
                                                                    "channels, height, width] images"),
            std::string::npos);
}

// Images: one mean and stddev per channel ([C, 1, 1] constants broadcast over the pixels).
// The built-in mlp on 4 x 5 x 3 images as its graph ([N, 3, 4, 5]): raw HWC images through
// the normalized graph give the logits of images scaled per channel by hand through the
// graph without it.
TEST(InputNormalization, ImagesAreScaledPerChannel) {
  ModelSpec spec;
  spec.name = "mlp";
  spec.input_shape = {4, 5, 3};
  spec.num_classes = 3;
  spec.hidden = {8};
  auto backend = MakeCpuBackend(1);
  auto layers = BuildModel(spec, backend.get());
  ASSERT_TRUE(layers.ok()) << layers.status().ToString();
  (*layers)->InitParams(3);
  auto base = BuiltinModelGraph(spec, (*layers)->GetParams());
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  const std::vector<double> mean = {100.0, -2.0, 0.5}, sd = {50.0, 0.0, 0.01};
  Dataset raw, scaled;
  raw.sample_shape = scaled.sample_shape = spec.input_shape;
  raw.num_classes = scaled.num_classes = 3;
  Rng rng(4);
  for (int i = 0; i < 16; ++i) {
    for (int p = 0; p < 20; ++p)
      for (int c = 0; c < 3; ++c) {
        const float x = static_cast<float>(mean[c] + sd[c] * rng.Normal());
        raw.features.push_back(x);
        scaled.features.push_back((x - static_cast<float>(mean[c])) / (sd[c] == 0 ? 1.0f : static_cast<float>(sd[c])));
      }
    raw.labels.push_back(i % 3);
    scaled.labels.push_back(i % 3);
  }
  auto normalized = graph::AddInputNormalization(*base, mean, sd);
  ASSERT_TRUE(normalized.ok()) << normalized.status().ToString();
  for (const graph::Node& n : normalized->nodes) {
    if (n.op_type == "Constant") {
      EXPECT_EQ(n.attrs.at("value").t.dims, (graph::Dims{3, 1, 1})) << n.name;
    }
  }
  const std::vector<float> a = Logits(*normalized, raw, LossKind::kCrossEntropy),
                           b = Logits(*base, scaled, LossKind::kCrossEntropy);
  ASSERT_EQ(a.size(), 48u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4f * (1 + std::fabs(b[i]))) << i;
}

// The constants from the federation's statistics: per feature for a table; per channel for
// images, pooled over the pixels of that channel (feature j is channel j % C: the sites
// describe HWC samples), equal to the mean and population stddev of the pooled values.
TEST(InputNormalization, ConstantsFromTheFederationsStatistics) {
  Rng rng(8);
  const int H = 2, W = 3, C = 2, rows = 50;
  std::vector<std::vector<double>> values(H * W * C);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < H * W * C; ++j) values[j].push_back((j % C == 0 ? 10.0 : 0.1) * rng.Normal() + j);
  FederationStatistics stats;
  std::vector<double> sum(C), sum_sq(C), count(C);
  for (int j = 0; j < H * W * C; ++j) {
    FeatureStatistics f;
    f.count = rows;
    for (double v : values[j]) {
      f.mean += v / rows;
      sum[j % C] += v;
      sum_sq[j % C] += v * v;
      count[j % C] += 1;
    }
    for (double v : values[j]) f.variance += (v - f.mean) * (v - f.mean) / rows;
    f.stddev = std::sqrt(f.variance);
    stats.features.push_back(f);
  }
  auto image = NormalizationConstantsFor(stats, {-1, C, H, W});
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ASSERT_EQ(image->mean.size(), static_cast<size_t>(C));
  for (int c = 0; c < C; ++c) {
    const double m = sum[c] / count[c];
    EXPECT_NEAR(image->mean[c], m, 1e-9 * (1 + std::fabs(m))) << c;
    EXPECT_NEAR(image->stddev[c], std::sqrt(sum_sq[c] / count[c] - m * m), 1e-7) << c;
  }
  auto table = NormalizationConstantsFor(stats, {-1, H * W * C});
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->mean[5], stats.features[5].mean);
  EXPECT_EQ(table->stddev[5], stats.features[5].stddev);
  auto wrong = NormalizationConstantsFor(stats, {-1, 3, H, W});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("describe 12 features; the model's input holds 18"), std::string::npos)
      << wrong.status().ToString();
}

}  // namespace
}  // namespace fedmesh
