// Helpers for the split-training tests: the breast cancer table Debian's python3-sklearn
// ships (569 patients, 30 measurements, z-scored here), cut by columns, and bottom / top
// parts built as graphs from fedmesh's built-in mlp and logreg.
#pragma once

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/model_zoo.h"
#include "vertical/split_part.h"

namespace fedmesh::vertical::testing {

inline const char* kBreastCancerCsv = "/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv";

// All rows: 30 z-scored features, label 1 = malignant. Empty when the file is missing.
inline Dataset BreastCancer() {
  Dataset d;
  std::ifstream f(kBreastCancerCsv);
  std::string line;
  if (!std::getline(f, line)) return d;
  while (std::getline(f, line)) {
    std::stringstream s(line);
    std::string cell;
    for (int c = 0; c < 30 && std::getline(s, cell, ','); ++c) d.features.push_back(std::stof(cell));
    std::getline(s, cell, ',');
    d.labels.push_back(std::stoi(cell) == 0 ? 1 : 0);
  }
  d.sample_shape = {30};
  d.num_classes = 2;
  const size_t n = d.labels.size();
  for (size_t c = 0; c < 30; ++c) {
    double m = 0, v = 0;
    for (size_t r = 0; r < n; ++r) m += d.features[r * 30 + c];
    m /= static_cast<double>(n);
    for (size_t r = 0; r < n; ++r) v += std::pow(d.features[r * 30 + c] - m, 2);
    const double sd = std::sqrt(v / static_cast<double>(n)) + 1e-12;
    for (size_t r = 0; r < n; ++r) d.features[r * 30 + c] = static_cast<float>((d.features[r * 30 + c] - m) / sd);
  }
  return d;
}

// Columns [from, to) of `d` for `rows`, labels kept.
inline Dataset Columns(const Dataset& d, int from, int to, const std::vector<uint32_t>& rows) {
  Dataset out;
  const size_t w = d.sample_size();
  for (uint32_t r : rows) {
    for (int c = from; c < to; ++c) out.features.push_back(d.features[r * w + static_cast<size_t>(c)]);
    out.labels.push_back(d.labels[r]);
  }
  out.sample_shape = {to - from};
  out.num_classes = d.num_classes;
  return out;
}

// An mlp in -> hidden -> out (hidden 0: a single Gemm, logreg), initialised from `seed`.
inline std::unique_ptr<SplitPart> Part(int in, int hidden, int out, uint64_t seed, const SplitPartOptions& o) {
  ModelSpec spec;
  spec.name = hidden > 0 ? "mlp" : "logreg";
  spec.input_shape = {in};
  spec.num_classes = out;
  spec.hidden = {hidden};
  auto p = SplitPart::FromBuiltin(spec, seed, o);
  return p.ok() ? std::move(*p) : nullptr;
}

}  // namespace fedmesh::vertical::testing
