// Random datasets for training tests that compare two backends or two paths: Fashion-MNIST-
// shaped images with uniform pixels, and small tables for every loss computed on the host.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/data/dataset.h"
#include "core/loss.h"
#include "core/rng.h"

namespace fedmesh {

// `samples` images of 28x28x1, pixels uniform in [0, 1), labels uniform over 10 classes.
inline Dataset RandomImages(size_t samples, uint64_t seed) {
  Dataset data;
  data.sample_shape = {28, 28, 1};
  data.num_classes = 10;
  Rng rng(seed);
  data.features.resize(samples * data.sample_size());
  for (auto& f : data.features) f = static_cast<float>(rng.Uniform());
  data.labels.resize(samples);
  for (auto& y : data.labels) y = int32_t(rng.UniformInt(10));
  return data;
}

// A loss the host computes (not the backend's unweighted cross-entropy) and the model
// outputs it needs.
struct HostLossCase {
  LossOptions loss;
  int outputs = 1;
};

// bce_with_logits with pos_weight (1 output), mse and huber (2 targets), weighted
// cross-entropy (3 classes).
inline std::vector<HostLossCase> HostLossCases() {
  HostLossCase bce, mse, huber, weighted;
  bce.loss.kind = LossKind::kBceWithLogits;
  bce.loss.pos_weight = 2.5f;
  mse.loss.kind = LossKind::kMse;
  mse.outputs = 2;
  huber.loss.kind = LossKind::kHuber;
  huber.loss.huber_delta = 0.5f;
  huber.outputs = 2;
  weighted.loss.class_weights = {1.0f, 3.0f, 0.5f};
  weighted.outputs = 3;
  return {bce, mse, huber, weighted};
}

// `samples` rows of `features` standard-normal values with what case `c` trains on: float
// targets for a regression, else labels over max(2, outputs) classes.
inline Dataset RandomTable(size_t samples, int features, const HostLossCase& c, uint64_t seed) {
  Rng rng(seed);
  Dataset data;
  data.sample_shape = {features};
  for (size_t i = 0; i < samples * features; ++i) data.features.push_back(static_cast<float>(rng.Normal()));
  if (IsRegression(c.loss.kind)) {
    data.target_dim = c.outputs;
    for (size_t i = 0; i < samples * c.outputs; ++i) data.targets.push_back(static_cast<float>(rng.Normal()));
    data.labels.assign(samples, 0);
  } else {
    data.num_classes = std::max(2, c.outputs);
    for (size_t i = 0; i < samples; ++i) data.labels.push_back(int32_t(rng.UniformInt(data.num_classes)));
  }
  return data;
}

}  // namespace fedmesh
