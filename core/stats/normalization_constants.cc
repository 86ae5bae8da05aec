#include "core/stats/normalization_constants.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace fedmesh {

Result<NormalizationConstants> NormalizationConstantsFor(const FederationStatistics& stats,
                                                         const std::vector<int64_t>& input_dims) {
  const bool image = input_dims.size() == 4;
  if (input_dims.size() != 2 && !image) {
    return Status::InvalidArgument("federated normalization needs a [batch, features] or "
                                   "[batch, channels, height, width] input");
  }
  int64_t values = 1;
  for (size_t k = 1; k < input_dims.size(); ++k) values *= input_dims[k];
  if (input_dims[1] < 1 || values < 1 || stats.features.size() != static_cast<uint64_t>(values)) {
    return Status::InvalidArgument("the federation's statistics describe " +
                                   std::to_string(stats.features.size()) +
                                   " features; the model's input holds " + std::to_string(values));
  }
  NormalizationConstants out;
  if (!image) {
    for (const FeatureStatistics& f : stats.features) {
      out.mean.push_back(f.mean);
      out.stddev.push_back(f.stddev);
    }
    return out;
  }
  // Per channel: pooled from the pixels' counts, means and variances (the between-pixel
  // spread adds to the within-pixel one), which is exact and needs no sums of squares.
  const size_t channels = static_cast<size_t>(input_dims[1]);
  std::vector<double> count(channels, 0.0), mean(channels, 0.0), var(channels, 0.0);
  for (size_t j = 0; j < stats.features.size(); ++j) {
    const FeatureStatistics& f = stats.features[j];
    count[j % channels] += static_cast<double>(f.count);
    mean[j % channels] += static_cast<double>(f.count) * f.mean;
  }
  for (size_t c = 0; c < channels; ++c) {
    if (count[c] <= 0) {
      return Status::InvalidArgument("the federation's statistics hold no rows for channel " +
                                     std::to_string(c));
    }
    mean[c] /= count[c];
  }
  for (size_t j = 0; j < stats.features.size(); ++j) {
    const FeatureStatistics& f = stats.features[j];
    const double d = f.mean - mean[j % channels];
    var[j % channels] += static_cast<double>(f.count) * (f.variance + d * d);
  }
  for (size_t c = 0; c < channels; ++c) {
    out.mean.push_back(mean[c]);
    out.stddev.push_back(std::sqrt(std::max(0.0, var[c] / count[c])));
  }
  return out;
}

}  // namespace fedmesh
