// Fashion-MNIST loader: the 28x28 grey-scale, 10-class clothing dataset that fedmesh's
// demo and examples train on, read from the IDX files that Debian's dataset-fashion-mnist
// package installs. A thin layer over idx_reader that knows the file names, the default
// location and how to tell a user to install the data.
// Thread-safety: stateless, but the default directory is read from the environment, so do
// not call setenv() concurrently with LoadFashionMnist().
#pragma once

#include <string>

#include "core/data/dataset.h"
#include "core/status.h"

namespace fedmesh {

enum class DataSplit { kTrain, kTest };

inline constexpr int kFashionMnistClasses = 10;
inline constexpr char kFashionMnistDefaultDir[] = "/usr/share/datasets/fashion-mnist";

// The directory LoadFashionMnist reads when given none: $FEDMESH_DATA_DIR if set and
// non-empty, else kFashionMnistDefaultDir.
std::string DefaultFashionMnistDir();

// Loads one split (train: 60000 samples, test: 10000) from `dir` (empty: the default
// above) as a Dataset of shape {28, 28, 1}, features in [0, 1], labels 0..9.
// Errors: NotFound when a file is missing (the message says how to install the data),
// Corruption when a file is damaged or its images are not 28x28, IOError on read failure.
Result<Dataset> LoadFashionMnist(DataSplit split, const std::string& dir = "");

}  // namespace fedmesh
