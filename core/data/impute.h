// Missing feature values ([data] missing = "impute_mean", docs/data.md): a CSV read that
// way holds NaN where a cell was missing; before training, each NaN becomes its feature's
// mean: the federation's (from federated statistics, sent with every task) in a
// federation, the site's own training mean in --local-only runs.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "core/data/dataset.h"
#include "core/status.h"

namespace fedmesh {

// Whether any feature value of `data` is NaN.
bool HasMissing(const Dataset& data);

// Per feature, the mean of its non-NaN values. InvalidArgument naming the feature (its
// name, or "column j") when `data` has rows but none holds a value for it: there is no mean
// to impute, and a made-up 0 would train on a value the data never had.
Result<std::vector<double>> ColumnMeans(const Dataset& data);

// Replaces every NaN of feature j by values[j]; returns how many were replaced.
// InvalidArgument when values has another size than the features or a value is not finite.
Result<size_t> ImputeMissing(Dataset& data, std::span<const double> values);

}  // namespace fedmesh
