// One local epoch of two models that start equal, on two backends (the CPU as the
// reference, a GPU or a staged backend under test), with the same TrainerOptions and the
// same Env seed (so the same batches and dropout masks); then evaluation on the same data.
// The backend under test must train the same model: equal sample counts, mean training loss,
// evaluation loss within `rel` (relative, with a small absolute floor), parameters within
// `rel` of the largest reference parameter, and (for classifiers) accuracy within
// `accuracy_points`. rel = 0 and accuracy_points = 0 ask for bit-equality.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/env.h"
#include "core/model.h"
#include "core/trainer.h"
#include "tests/core/close_rel.h"

namespace fedmesh {

struct SameEpochOptions {
  double rel = 1e-3;               // losses and parameters, relative; 0: equal
  double accuracy_points = 0.01;   // evaluation accuracy, absolute; < 0: not compared
  uint64_t env_seed = 11;          // both trainers' Env seed
};

// Batch 32 (evaluation 200), SGD lr 0.05 with momentum 0.9 and weight decay 1e-4: every
// part of the optimizer in play.
inline TrainerOptions MomentumEpochOptions() {
  TrainerOptions opt;
  opt.batch_size = 32;
  opt.eval_batch_size = 200;
  opt.sgd.lr = 0.05f;
  opt.sgd.momentum = 0.9f;
  opt.sgd.weight_decay = 1e-4f;
  return opt;
}

inline void ExpectSameEpoch(Model& reference, Model& tested, const Dataset& data, const TrainerOptions& opt,
                            const SameEpochOptions& o = {}) {
  const auto near = [&](double got, double want, const char* what) {
    if (o.rel == 0) {
      EXPECT_EQ(got, want) << what;
    } else {
      EXPECT_NEAR(got, want, o.rel * std::fabs(want) + 1e-6) << what;
    }
  };
  SeededEnv ref_env(nullptr, o.env_seed), test_env(nullptr, o.env_seed);
  Trainer ref_trainer(&reference, opt, &ref_env);
  Trainer test_trainer(&tested, opt, &test_env);
  auto ref_stats = ref_trainer.TrainEpoch(data);
  auto test_stats = test_trainer.TrainEpoch(data);
  ASSERT_TRUE(ref_stats.ok()) << ref_stats.status().ToString();
  ASSERT_TRUE(test_stats.ok()) << test_stats.status().ToString();
  EXPECT_EQ(test_stats->samples, ref_stats->samples);
  near(test_stats->mean_loss, ref_stats->mean_loss, "mean training loss");
  EXPECT_TRUE(CloseRel(tested.GetParams(), reference.GetParams(), o.rel, "parameters after an epoch"));
  auto ref_eval = ref_trainer.Evaluate(data);
  auto test_eval = test_trainer.Evaluate(data);
  ASSERT_TRUE(ref_eval.ok()) << ref_eval.status().ToString();
  ASSERT_TRUE(test_eval.ok()) << test_eval.status().ToString();
  near(test_eval->loss, ref_eval->loss, "evaluation loss");
  if (o.accuracy_points >= 0) {
    EXPECT_NEAR(test_eval->accuracy, ref_eval->accuracy, o.accuracy_points);
  }
}

}  // namespace fedmesh
