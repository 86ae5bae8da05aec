#include "core/data/data_source.h"

#include "core/data/csv_reader.h"

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
    return ReadCsv(name.substr(4), o);
  }
  return Status::InvalidArgument("unknown data source '" + name +
                                 "'; expected fashion-mnist or csv:PATH");
}

}  // namespace

Result<Dataset> LoadDataSource(const DataSourceSpec& spec, DataSplit split) {
  if (split == DataSplit::kTrain) return LoadNamed(spec.train, spec, split);
  if (!spec.test.empty()) return LoadNamed(spec.test, spec, DataSplit::kTest);
  if (spec.train.starts_with("csv:")) {
    return Status::InvalidArgument("CSV data '" + spec.train +
                                   "' has no built-in test split: give one with --test-data csv:PATH");
  }
  return LoadNamed(spec.train, spec, DataSplit::kTest);
}

}  // namespace fedmesh
