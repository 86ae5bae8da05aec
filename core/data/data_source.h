// Data sources by name, as users write them in flags and configs (docs/data.md):
//   "fashion-mnist"          Fashion-MNIST from FEDMESH_DATA_DIR or /usr/share/datasets/fashion-mnist
//   "csv:PATH"               a CSV table with a header (core/data/csv_reader.h)
//   "npz:PATH"               arrays x and y of an .npz archive (core/data/array_source.h)
//   "npy:X_PATH,Y_PATH"      the same from two .npy files
//   "images:DIR"             one sub-folder of PNG/JPEG images per class (core/data/image_folder.h)
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/data/csv_reader.h"
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
  std::string categorical_encoding = "onehot";  // csv only: CsvOptions::categorical_encoding
  // Sources without a test split of their own and no `test`: this fraction of the rows
  // (per class, seeded by split_seed) is held out as the site's test data and never
  // trained on. 0: no held-out split (LoadSiteData then fails for such sources).
  double test_fraction = 0.2;
  uint64_t split_seed = 0;
  // images only: every image is resized to image_height x image_width with image_channels
  // (1 = grey, 3 = RGB).
  int image_height = 28;
  int image_width = 28;
  int image_channels = 1;
};

// The CSV reader's options for a csv: source.
CsvOptions CsvOptionsOf(const DataSourceSpec& spec);

// Loads the training (split = kTrain) or test (split = kTest) data named by `spec`.
Result<Dataset> LoadDataSource(const DataSourceSpec& spec, DataSplit split);

// A site's data: what it trains on and its held-out data. test is `spec.test`, else the
// source's own test split (fashion-mnist), else spec.test_fraction of the training source
// held out per class (labels; regression data as one class), seeded by spec.split_seed;
// train is the rest; with test_fraction 0, test is empty. The same spec and seed give the
// same split on every run.
struct SiteData {
  Dataset train;
  Dataset test;
};
Result<SiteData> LoadSiteData(const DataSourceSpec& spec);

// The split behind LoadSiteData, over the rows' `labels` (Dataset::labels; regression data
// is one class): `fraction` of each class's rows held out, chosen by a generator seeded
// with `seed`. A class of n rows gives round(fraction x n) of them, so a small one may give
// none. Both lists are row indices in ascending order. REQUIRES: fraction in [0, 1].
struct HeldOutRows {
  std::vector<uint32_t> train;
  std::vector<uint32_t> test;
};
HeldOutRows SplitHeldOut(std::span<const int32_t> labels, double fraction, uint64_t seed);

// The names LoadDataSource accepts, for errors and --help.
std::string DataSourceNames();

// OK when `name` is one of DataSourceNames()' forms (its files are not looked at);
// InvalidArgument "unknown data source ..." otherwise. Config loaders call it so the error
// names the file, line and key rather than surfacing when the data loads.
Status CheckDataSourceName(const std::string& name);

}  // namespace fedmesh
