// The constants of [data] normalize = "federated" (docs/data.md) from the federation's
// statistics: a table model ([batch, features]) gets each feature's mean and population
// standard deviation; an image model ([batch, channels, height, width]) one mean and
// standard deviation per channel over all of its pixels and rows, as torchvision's Normalize
// uses. The sites' statistics describe samples as a Dataset stores them, images
// height x width x channels, so feature j belongs to channel j % channels.
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "core/stats/federated_statistics.h"
#include "core/status.h"

namespace fedmesh {

struct NormalizationConstants {
  std::vector<double> mean;
  std::vector<double> stddev;  // population (divides by the count); 0 for a constant one
};

// `input_dims` is the model's input including the batch dim (-1 or any value). Fails when
// the statistics do not describe that input (another number of features, a channel without
// rows).
Result<NormalizationConstants> NormalizationConstantsFor(const FederationStatistics& stats,
                                                         const std::vector<int64_t>& input_dims);

}  // namespace fedmesh
