#include "core/data/data_source.h"

#include "core/data/array_source.h"
#include "core/data/csv_reader.h"
#include "core/data/image_folder.h"

namespace fedmesh {
namespace {

Result<Dataset> LoadNamed(const std::string& name, const DataSourceSpec& spec, DataSplit split) {
  if (name == "fashion-mnist") return LoadFashionMnist(split);
  if (name.starts_with("csv:")) {
    if (spec.label_column.empty()) {
      return Status::InvalidArgument("data '" + name + "' is CSV: name its label column (--label-column)");
    }
    CsvOptions o;
    o.label_column = spec.label_column;
    o.num_classes = spec.num_classes;
    o.regression = spec.regression;
    o.label_values = spec.label_values;
    o.features = spec.features;
    o.categorical = spec.categorical;
    o.categories = spec.categories;
    o.missing = spec.missing;
    return ReadCsv(name.substr(4), o);
  }
  ArraySourceOptions arrays;
  arrays.num_classes = spec.num_classes;
  arrays.regression = spec.regression;
  if (name.starts_with("npz:")) return ReadNpzDataset(name.substr(4), arrays);
  if (name.starts_with("npy:")) {
    const std::string paths = name.substr(4);
    const size_t comma = paths.find(',');
    if (comma == std::string::npos || paths.find(',', comma + 1) != std::string::npos) {
      return Status::InvalidArgument("data '" + name + "' must read npy:X_PATH,Y_PATH");
    }
    return ReadNpyDataset(paths.substr(0, comma), paths.substr(comma + 1), arrays);
  }
  if (name.starts_with("images:")) {
    if (spec.regression) {
      return Status::InvalidArgument("data '" + name + "' holds classes (one folder each), "
                                     "not regression targets");
    }
    ImageFolderOptions o;
    o.height = spec.image_height;
    o.width = spec.image_width;
    o.channels = spec.image_channels;
    FM_ASSIGN_OR_RETURN(Dataset ds, ReadImageFolder(name.substr(7), o));
    if (spec.num_classes > 0) {
      if (ds.num_classes > spec.num_classes) {
        return Status::InvalidArgument("data '" + name + "' has " + std::to_string(ds.num_classes) +
                                       " class folders, more than num_classes " +
                                       std::to_string(spec.num_classes));
      }
      ds.num_classes = spec.num_classes;
    } else if (ds.num_classes < 2) {
      return Status::Corruption("data '" + name + "' has one class folder; a classifier needs "
                                "two or more (set num_classes when this site lacks the others)");
    }
    return ds;
  }
  return Status::InvalidArgument("unknown data source '" + name + "'; expected " +
                                 DataSourceNames());
}

}  // namespace

std::string DataSourceNames() {
  return "fashion-mnist, csv:PATH, npz:PATH, npy:X_PATH,Y_PATH or images:DIR";
}

Result<Dataset> LoadDataSource(const DataSourceSpec& spec, DataSplit split) {
  if (split == DataSplit::kTrain) return LoadNamed(spec.train, spec, split);
  if (!spec.test.empty()) return LoadNamed(spec.test, spec, DataSplit::kTest);
  if (spec.train != "fashion-mnist") {
    return Status::InvalidArgument("data '" + spec.train +
                                   "' has no built-in test split: give one with --test-data "
                                   "(or [data] test)");
  }
  return LoadNamed(spec.train, spec, DataSplit::kTest);
}

}  // namespace fedmesh
