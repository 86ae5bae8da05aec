// Data sources by name, as users write them in flags and configs (docs/data.md):
//   "fashion-mnist"          Fashion-MNIST from FEDMESH_DATA_DIR or /usr/share/datasets/fashion-mnist
//   "csv:PATH"               a CSV table with a header (core/data/csv_reader.h)
//   "npz:PATH"               arrays x and y of an .npz archive (core/data/array_source.h)
//   "npy:X_PATH,Y_PATH"      the same from two .npy files
//   "images:DIR"             one sub-folder of PNG/JPEG images per class (core/data/image_folder.h)
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/fashion_mnist.h"
#include "core/status.h"

namespace fedmesh {

struct DataSourceSpec {
  std::string train = "fashion-mnist";  // the site's data (see above)
  std::string test;                     // held-out data; empty: the source's own test split
                                        // (only fashion-mnist has one)
  std::string label_column;             // csv only: the column holding the labels
  int num_classes = 0;                  // number of classes; 0 = max label + 1 of the data
                                        // (set it when a site may lack a class)
  bool regression = false;              // labels are float regression targets
  // csv only: CsvOptions::label_values, features, categorical, categories, missing.
  std::vector<std::string> label_values;
  std::vector<std::string> features;
  std::vector<std::string> categorical;
  std::vector<std::string> categories;
  std::string missing = "error";
  // images only: every image is resized to image_height x image_width with image_channels
  // (1 = grey, 3 = RGB).
  int image_height = 28;
  int image_width = 28;
  int image_channels = 1;
};

// Loads the training (split = kTrain) or test (split = kTest) data named by `spec`.
Result<Dataset> LoadDataSource(const DataSourceSpec& spec, DataSplit split);

// The names LoadDataSource accepts, for errors and --help.
std::string DataSourceNames();

}  // namespace fedmesh
