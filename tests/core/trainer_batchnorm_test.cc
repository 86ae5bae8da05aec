// Training a graph model with BatchNormalization (core/trainer.cc): a pass whose last batch
// would hold one example leaves that example out (a batch of one has no variance: the
// op refuses it, as PyTorch does), so a site whose row count is 1 more than a multiple of
// the batch size trains; a site with one row in all still gets the op's clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/backend.h"
#include "core/env.h"
#include "core/model.h"
#include "core/onnx/onnx_reader.h"
#include "core/rng.h"
#include "core/trainer.h"

namespace fedmesh {
namespace {

Dataset Rows(int n) {
  Dataset d;
  d.sample_shape = {30};
  d.num_classes = 2;
  Rng rng(3);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 30; ++j) d.features.push_back(static_cast<float>(rng.Normal()));
    d.labels.push_back(i % 2);
  }
  return d;
}

TEST(TrainerBatchNorm, ALastBatchOfOneIsLeftOutNotAnError) {
  auto g = onnx::ReadOnnxFile(std::string(FEDMESH_SOURCE_DIR) + "/examples/breast_cancer/hospital_mlp.onnx");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto backend = MakeCpuBackend(1);
  auto m = Model::CreateFromGraph("bn", backend.get(), std::move(*g));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_NE((*m)->BatchStatisticsNode(), nullptr);
  SystemEnv env(1);
  TrainerOptions o;
  o.batch_size = 16;
  o.loss.kind = LossKind::kBceWithLogits;
  Trainer trainer(m->get(), o, &env);
  auto seventeen = trainer.TrainSteps(Rows(17), -1);
  ASSERT_TRUE(seventeen.ok()) << seventeen.status().ToString();
  EXPECT_EQ(seventeen->steps, 1);
  EXPECT_EQ(seventeen->samples, 16);
  auto eighteen = trainer.TrainSteps(Rows(18), -1);
  ASSERT_TRUE(eighteen.ok()) << eighteen.status().ToString();
  EXPECT_EQ(eighteen->steps, 2) << "a last batch of two trains";
  for (float v : (*m)->GetParams()) ASSERT_TRUE(std::isfinite(v));
  auto one = trainer.TrainSteps(Rows(1), -1);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("more than one value per channel"), std::string::npos)
      << one.status().ToString();
}

}  // namespace
}  // namespace fedmesh
