// Data sources by name, as users write them in flags and configs:
//   "fashion-mnist"        Fashion-MNIST from FEDMESH_DATA_DIR or /usr/share/datasets/fashion-mnist
//   "csv:PATH"             a tabular CSV file (label column named separately)
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "core/data/dataset.h"
#include "core/data/fashion_mnist.h"
#include "core/status.h"

namespace fedmesh {

struct DataSourceSpec {
  std::string train = "fashion-mnist";  // the site's data (see above)
  std::string test;                     // held-out data; empty: the source's own test split
                                        // (required for csv)
  std::string label_column;             // csv only: the column holding integer class labels
  int num_classes = 0;                  // csv only: number of classes; 0 = max label + 1 of
                                        // the file (set it when a site may lack a class)
};

// Loads the training (split = kTrain) or test (split = kTest) data named by `spec`.
Result<Dataset> LoadDataSource(const DataSourceSpec& spec, DataSplit split);

}  // namespace fedmesh
