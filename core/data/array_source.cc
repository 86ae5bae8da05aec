#include "core/data/array_source.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/data/csv_reader.h"

namespace fedmesh {
namespace {

Status Bad(const std::string& source, const std::string& what) {
  return Status::Corruption(source + ": " + what);
}

std::string DimsText(const graph::Dims& d) { return graph::DimsToString(d); }

}  // namespace

Result<Dataset> DatasetFromArrays(const NpzArray& x, const NpzArray& y,
                                  const ArraySourceOptions& options, const std::string& source) {
  if (x.dims.size() < 2 || x.dims.size() > 4) {
    return Bad(source, "array x has shape " + DimsText(x.dims) +
                           "; it must be [N, F], [N, H, W] or [N, H, W, C]");
  }
  const int64_t n = x.dims[0];
  if (n == 0) return Bad(source, "array x holds no samples (shape " + DimsText(x.dims) + ")");
  for (size_t k = 1; k < x.dims.size(); ++k) {
    if (x.dims[k] < 1 || x.dims[k] > std::numeric_limits<int>::max()) {
      return Bad(source, "array x has shape " + DimsText(x.dims) + "; every sample dim must be >= 1");
    }
  }
  const bool target_rows = options.regression && y.dims.size() == 2;
  if ((y.dims.size() != 1 && !target_rows) || y.dims[0] != n) {
    return Bad(source, "array y has shape " + DimsText(y.dims) + " but x holds " +
                           std::to_string(n) + " samples: y must be [" + std::to_string(n) + "]" +
                           (options.regression ? " or [" + std::to_string(n) + ", T]" : ""));
  }
  Dataset ds;
  for (size_t k = 1; k < x.dims.size(); ++k) ds.sample_shape.push_back(static_cast<int>(x.dims[k]));
  if (x.dims.size() == 3) ds.sample_shape.push_back(1);  // [N, H, W]: one channel
  const size_t count = static_cast<size_t>(n) * ds.sample_size();
  ds.features.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const double v = x.dtype == graph::DType::kFloat32 ? double(x.f[i]) : double(x.i[i]);
    if (!std::isfinite(v)) {
      return Bad(source, "array x holds " + std::to_string(v) + " at sample " +
                             std::to_string(i / ds.sample_size()) + "; only finite values are accepted");
    }
    ds.features[i] = static_cast<float>(v);
  }
  auto y_at = [&](size_t i) {
    return y.dtype == graph::DType::kFloat32 ? double(y.f[i]) : double(y.i[i]);
  };
  if (options.regression) {
    ds.target_dim = target_rows ? static_cast<int>(y.dims[1]) : 1;
    ds.targets.resize(y.numel());
    for (size_t i = 0; i < y.numel(); ++i) {
      const double v = y_at(i);
      if (!std::isfinite(v)) {
        return Bad(source, "array y holds " + std::to_string(v) + " at sample " +
                               std::to_string(i / static_cast<size_t>(ds.target_dim)) +
                               "; regression targets must be finite");
      }
      ds.targets[i] = static_cast<float>(v);
    }
    ds.labels.assign(static_cast<size_t>(n), 0);
    ds.num_classes = ds.target_dim;
    return ds;
  }
  int32_t max_label = -1, min_label = std::numeric_limits<int32_t>::max();
  ds.labels.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    const double v = y_at(i);
    if (!(v >= 0.0) || v != std::floor(v) || v > kMaxCsvLabel) {
      return Bad(source, "array y holds " + std::to_string(v) + " at sample " + std::to_string(i) +
                             "; labels must be class indices 0.." + std::to_string(kMaxCsvLabel));
    }
    const auto label = static_cast<int32_t>(v);
    if (options.num_classes > 0 && label >= options.num_classes) {
      return Bad(source, "label " + std::to_string(label) + " at sample " + std::to_string(i) +
                             " is >= num_classes " + std::to_string(options.num_classes));
    }
    max_label = std::max(max_label, label);
    min_label = std::min(min_label, label);
    ds.labels[i] = label;
  }
  ds.num_classes = options.num_classes > 0 ? options.num_classes : max_label + 1;
  // Classes inferred from one distinct label say nothing about the others.
  if (options.num_classes == 0 && min_label == max_label) {
    return Bad(source, "array y holds a single class; a classifier needs two or more (set "
                       "num_classes when this site lacks the others)");
  }
  return ds;
}

Result<Dataset> ReadNpzDataset(const std::string& path, const ArraySourceOptions& options) {
  FM_ASSIGN_OR_RETURN(std::vector<NpzArray> arrays, ReadNpzFile(path, options.limits));
  const NpzArray* x = nullptr;
  const NpzArray* y = nullptr;
  std::string names;
  for (const NpzArray& a : arrays) {
    if (a.name == "x") x = &a;
    if (a.name == "y") y = &a;
    names += (names.empty() ? "" : ", ") + a.name;
  }
  if (x == nullptr || y == nullptr) {
    return Status::InvalidArgument(path + ": an npz dataset needs arrays named x and y "
                                   "(np.savez(path, x=..., y=...)); it holds: " +
                                   (names.empty() ? "nothing" : names));
  }
  return DatasetFromArrays(*x, *y, options, path);
}

Result<Dataset> ReadNpyDataset(const std::string& x_path, const std::string& y_path,
                               const ArraySourceOptions& options) {
  auto read = [&](const std::string& path, const std::string& name) -> Result<NpzArray> {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) return Status::NotFound(path + ": cannot open the .npy file");
    const std::streamoff size = f.tellg();
    if (size < 0 || static_cast<size_t>(size) > options.limits.max_file_bytes)
      return Status::InvalidArgument(path + ": the .npy file is larger than the limit");
    std::string bytes(static_cast<size_t>(size), '\0');
    f.seekg(0);
    if (!f.read(bytes.data(), size)) return Status::IOError(path + ": cannot read the .npy file");
    auto a = DecodeNpy(bytes, name, options.limits);
    if (!a.ok()) return a.status().WithContext(path);
    return a;
  };
  FM_ASSIGN_OR_RETURN(NpzArray x, read(x_path, "x"));
  FM_ASSIGN_OR_RETURN(NpzArray y, read(y_path, "y"));
  return DatasetFromArrays(x, y, options, x_path + " and " + y_path);
}

}  // namespace fedmesh
