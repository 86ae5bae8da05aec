// Federated input normalization in a graph (core/graph/input_normalization.h): the model
// with the Sub/Div in front gives on raw rows exactly what the model gives on rows scaled
// by hand; taking the nodes out restores the original hash (what a site that pinned the
// model checks); bad shapes and constants are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/data/dataset.h"
#include "core/graph/graph_model.h"
#include "core/graph/input_normalization.h"
#include "core/model.h"
#include "core/onnx/onnx_reader.h"
#include "core/rng.h"

namespace fedmesh {
namespace {

const std::string kModel = std::string(FEDMESH_SOURCE_DIR) + "/examples/breast_cancer/hospital_mlp.onnx";

std::vector<float> Logits(graph::Graph g, const Dataset& d) {
  auto backend = MakeCpuBackend(1);
  auto m = Model::CreateFromGraph("t", backend.get(), std::move(g));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossOptions loss;
  loss.kind = LossKind::kBceWithLogits;
  EXPECT_TRUE((*m)->SetLoss(loss).ok());
  (*m)->Reserve(static_cast<int>(d.size()));
  (*m)->LoadContiguousBatch(d, 0, static_cast<int>(d.size()));
  (*m)->Evaluate(static_cast<int>(d.size()));
  std::vector<float> out((*m)->logits(), (*m)->logits() + d.size());
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
  {
    EXPECT_NE(err(graph::AddInputNormalization(*image, ok, ok)).find("[batch, features] table"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace fedmesh
