#include "config/data_source_config.h"

#include <cmath>

namespace fedmesh {

std::vector<ConfigKey> DataSourceConfigKeys(const std::string& seed_key,
                                            const std::string& held_out_as) {
  return {
      StringKey("data", "dataset", "fashion-mnist",
                "Training data: fashion-mnist, csv:PATH, npz:PATH, npy:X_PATH,Y_PATH or "
                "images:DIR (docs/data.md)")
          .Path(PathKind::kDataSource),
      StringKey("data", "test", "",
                "Held-out data, same forms; empty = the dataset's own test split (only "
                "fashion-mnist has one)")
          .Path(PathKind::kDataSource),
      FloatKey("data", "test_fraction", 0.2,
               "Sources without a test split and no [data] test: the fraction of rows (per "
               "class, seeded by " +
                   seed_key + ") held out as " + held_out_as + " and never trained on; 0 = none")
          .Min(0)
          .Max(1, true),
      StringKey("data", "label_column", "", "csv only: the column holding the labels"),
      IntKey("data", "num_classes", 0, "Number of classes; 0 = max label + 1 of the data")
          .Min(0)
          .Max(65536),  // what the CSV reader takes (kMaxCsvLabel + 1)
      BoolKey("data", "regression", false,
              "The labels are float regression targets (csv label column, npz y)"),
      StringListKey("data", "label_values", {},
                    "csv only: text labels in class order, e.g. [\"B\", \"M\"]; empty = "
                    "labels are class indices"),
      StringListKey("data", "features", {},
                    "csv only: the feature columns, in this order; empty = every column but "
                    "the label"),
      StringListKey("data", "categorical", {},
                    "csv only: feature columns holding text categories, one-hot encoded"),
      StringListKey("data", "categories", {},
                    "csv only: fixed category lists, \"column=a,b,c\" (the one-hot order; "
                    "other values are errors); unlisted categorical columns use the sorted "
                    "values of the file"),
      StringKey("data", "categorical_encoding", "onehot",
                "csv only: onehot (a 0/1 column per category) or ids (one column of category "
                "indices, in the categories order, for an embedding input)")
          .Choices({"onehot", "ids"}),
      StringKey("data", "missing", "error",
                "csv only: a missing cell (empty, NA, NaN, null, ?) is an error, drops its row, "
                "or (impute_mean) a missing number becomes its feature's mean: the federation's "
                "from the aggregator's statistics, or this site's own in --local-only")
          .Choices({"error", "drop", "impute_mean"}),
      FloatListKey("data", "image_size", {28, 28},
                   "images only: [height, width] every image is resized to")
          .Min(1)
          .Max(4096),
      IntKey("data", "image_channels", 1, "images only: 1 = grey, 3 = RGB").Min(1).Max(3),
  };
}

Status ReadDataSourceSpec(const ConfigValues& v, DataSourceSpec* spec) {
  DataSourceSpec& d = *spec;
  d.train = v.GetString("data", "dataset");
  d.test = v.GetString("data", "test");
  d.label_column = v.GetString("data", "label_column");
  d.num_classes = static_cast<int>(v.GetInt("data", "num_classes"));
  d.regression = v.GetBool("data", "regression");
  d.test_fraction = v.GetFloat("data", "test_fraction");
  d.label_values = v.GetStringList("data", "label_values");
  d.features = v.GetStringList("data", "features");
  d.categorical = v.GetStringList("data", "categorical");
  d.categories = v.GetStringList("data", "categories");
  d.missing = v.GetString("data", "missing");
  d.categorical_encoding = v.GetString("data", "categorical_encoding");
  if (const std::vector<double> size = v.GetFloatList("data", "image_size");
      size.size() == 2 && size[0] == std::floor(size[0]) && size[1] == std::floor(size[1])) {
    d.image_height = static_cast<int>(size[0]);
    d.image_width = static_cast<int>(size[1]);
  } else {
    return AttributeToKey(Status::InvalidArgument("image_size must be [height, width], two "
                                                  "whole numbers"),
                          v, {{"", "data", "image_size"}});
  }
  d.image_channels = static_cast<int>(v.GetInt("data", "image_channels"));
  if (d.image_channels == 2) {
    return AttributeToKey(Status::InvalidArgument("image_channels must be 1 or 3"), v,
                          {{"", "data", "image_channels"}});
  }
  // The source's form now, so a typo names its line (the files are read later).
  if (!d.train.empty()) {
    FM_RETURN_IF_ERROR(AttributeToKey(CheckDataSourceName(d.train), v, {{"", "data", "dataset"}}));
  }
  if (!d.test.empty()) {
    FM_RETURN_IF_ERROR(AttributeToKey(CheckDataSourceName(d.test), v, {{"", "data", "test"}}));
  }
  return Status::OK();
}

}  // namespace fedmesh
