#include "core/data/impute.h"

#include <cmath>
#include <string>

namespace fedmesh {

bool HasMissing(const Dataset& data) {
  for (float v : data.features)
    if (std::isnan(v)) return true;
  return false;
}

Result<std::vector<double>> ColumnMeans(const Dataset& data) {
  const size_t d = data.sample_size();
  std::vector<double> sum(d, 0.0), count(d, 0.0);
  for (size_t i = 0; i < data.size(); ++i) {
    const float* x = data.sample(i);
    for (size_t j = 0; j < d; ++j) {
      if (std::isnan(x[j])) continue;
      sum[j] += x[j];
      count[j] += 1;
    }
  }
  for (size_t j = 0; j < d; ++j) {
    if (count[j] == 0 && data.size() > 0) {
      const std::string name = j < data.feature_names.size() && !data.feature_names[j].empty()
                                   ? "'" + data.feature_names[j] + "'"
                                   : "column " + std::to_string(j);
      return Status::InvalidArgument("feature " + name + " is missing in all " +
                                     std::to_string(data.size()) +
                                     " rows: impute_mean has no mean to fill it with; drop the "
                                     "column or give it values");
    }
    sum[j] = count[j] > 0 ? sum[j] / count[j] : 0.0;
  }
  return sum;
}

Result<size_t> ImputeMissing(Dataset& data, std::span<const double> values) {
  if (data.size() == 0) return size_t{0};  // e.g. no held-out rows: nothing to fill, no shape
  const size_t d = data.sample_size();
  if (values.size() != d) {
    return Status::InvalidArgument("imputation values for " + std::to_string(values.size()) +
                                   " features; the data has " + std::to_string(d));
  }
  for (double v : values)
    if (!std::isfinite(v)) return Status::InvalidArgument("an imputation value is not finite");
  size_t replaced = 0;
  for (size_t i = 0; i < data.features.size(); ++i) {
    if (std::isnan(data.features[i])) {
      data.features[i] = static_cast<float>(values[i % d]);
      ++replaced;
    }
  }
  return replaced;
}

}  // namespace fedmesh
