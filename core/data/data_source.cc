#include "core/data/data_source.h"

#include "core/data/array_source.h"
#include "core/data/csv_reader.h"
#include "core/data/image_folder.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/rng.h"

namespace fedmesh {
namespace {

Result<Dataset> LoadNamed(const std::string& name, const DataSourceSpec& spec, DataSplit split) {
  if (name == "fashion-mnist") return LoadFashionMnist(split);
  if (name.starts_with("csv:")) {
    if (spec.label_column.empty()) {
      return Status::InvalidArgument("data '" + name + "' is CSV: name its label column (--label-column)");
    }
    return ReadCsv(name.substr(4), CsvOptionsOf(spec));
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
  return CheckDataSourceName(name);
}

}  // namespace

Status CheckDataSourceName(const std::string& name) {
  if (name == "fashion-mnist") return Status::OK();
  for (const char* prefix : {"csv:", "npz:", "npy:", "images:"}) {
    if (name.starts_with(prefix) && name.size() > std::string_view(prefix).size()) return Status::OK();
  }
  return Status::InvalidArgument("unknown data source '" + name + "'; expected " + DataSourceNames());
}

CsvOptions CsvOptionsOf(const DataSourceSpec& spec) {
  CsvOptions o;
  o.label_column = spec.label_column;
  o.num_classes = spec.num_classes;
  o.regression = spec.regression;
  o.label_values = spec.label_values;
  o.features = spec.features;
  o.categorical = spec.categorical;
  o.categories = spec.categories;
  o.categorical_encoding = spec.categorical_encoding;
  o.missing = spec.missing;
  return o;
}

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

Result<SiteData> LoadSiteData(const DataSourceSpec& spec) {
  SiteData d;
  FM_ASSIGN_OR_RETURN(Dataset full, LoadDataSource(spec, DataSplit::kTrain));
  if (!spec.test.empty() || spec.train == "fashion-mnist") {
    d.train = std::move(full);
    FM_ASSIGN_OR_RETURN(d.test, LoadDataSource(spec, DataSplit::kTest));
    return d;
  }
  const double f = spec.test_fraction;
  if (!(f >= 0.0 && f < 1.0)) {
    return Status::InvalidArgument("test_fraction must be in [0, 1), got " + std::to_string(f));
  }
  if (f == 0.0) {  // no held-out data: the caller decides whether it needs one
    d.train = std::move(full);
    return d;
  }
  HeldOutRows rows = SplitHeldOut(full.labels, f, spec.split_seed);
  if (rows.test.empty() || rows.train.empty()) {
    return Status::InvalidArgument("data '" + spec.train + "': test_fraction " + std::to_string(f) +
                                   " of its " + std::to_string(full.size()) + " rows leaves " +
                                   (rows.test.empty() ? "no test rows" : "no training rows") +
                                   "; give [data] test (--test-data) instead");
  }
  d.test = full.Subset(rows.test);
  d.train = full.Subset(rows.train);
  return d;
}

HeldOutRows SplitHeldOut(std::span<const int32_t> labels, double fraction, uint64_t seed) {
  // Per class, so that a rare class (5% of a bank's rows) is held out in proportion.
  std::map<int32_t, std::vector<uint32_t>> by_class;
  for (uint32_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(i);
  Rng rng(seed ^ 0x5e1d0u);
  HeldOutRows out;
  for (auto& [label, rows] : by_class) {
    rng.Shuffle(rows);
    const auto held =
        static_cast<size_t>(std::llround(fraction * static_cast<double>(rows.size())));
    out.test.insert(out.test.end(), rows.begin(), rows.begin() + static_cast<ptrdiff_t>(held));
    out.train.insert(out.train.end(), rows.begin() + static_cast<ptrdiff_t>(held), rows.end());
  }
  // Source order within each part: the split depends on the seed alone.
  std::sort(out.train.begin(), out.train.end());
  std::sort(out.test.begin(), out.test.end());
  return out;
}

}  // namespace fedmesh
