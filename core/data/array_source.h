// Datasets from NumPy arrays, the form a data scientist already has after pandas or
// PyTorch preprocessing: an .npz archive holding arrays `x` and `y` (np.savez), or a pair of
// .npy files. x is [N, F] (table rows), [N, H, W] (grey images) or [N, H, W, C] (images,
// channels last); float, integer or bool, and every value finite. y is [N]: class indices
// (integers, or floats with integral values) for classification, float targets ([N] or
// [N, T]) for regression. Errors name the file and the array.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "core/data/dataset.h"
#include "core/npz.h"
#include "core/status.h"

namespace fedmesh {

struct ArraySourceOptions {
  // Number of classes. Default 0: the largest label + 1. When > 0, a larger label is an
  // error (set it when a site may lack the highest classes).
  int num_classes = 0;
  // y holds regression targets. Default false (class indices).
  bool regression = false;
  NpzLimits limits;
};

// "npz:PATH": the arrays x and y of the archive.
Result<Dataset> ReadNpzDataset(const std::string& path, const ArraySourceOptions& options);
// "npy:X_PATH,Y_PATH": two .npy files.
Result<Dataset> ReadNpyDataset(const std::string& x_path, const std::string& y_path,
                               const ArraySourceOptions& options);
// The dataset of arrays x and y; `source` starts every error message.
Result<Dataset> DatasetFromArrays(const NpzArray& x, const NpzArray& y,
                                  const ArraySourceOptions& options, const std::string& source);

}  // namespace fedmesh
