// Dataset: labelled samples held in one flat float32 buffer, the form every trainer and
// partitioner in fedmesh consumes. Images are stored HWC per sample (Fashion-MNIST is
// {28, 28, 1}) and scaled to [0, 1]; tabular rows are {num_features}.
// Thread-safety: a const Dataset may be read from many threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fedmesh {

struct Dataset {
  std::vector<int> sample_shape;  // per-sample shape, e.g. {28, 28, 1} or {num_features}
  int num_classes = 0;            // labels are in [0, num_classes)
  std::vector<float> features;    // size() * sample_size() floats, sample-major
  std::vector<int32_t> labels;    // one per sample (0 for regression data)
  // Regression targets: target_dim floats per sample, sample-major; empty for labelled
  // classification data.
  std::vector<float> targets;
  int target_dim = 0;
  // Names of the sample_size() feature columns of tabular data ("age", "purpose=car" for a
  // one-hot column); empty when the source has none (images).
  std::vector<std::string> feature_names;

  size_t size() const { return labels.size(); }
  size_t sample_size() const {
    size_t n = 1;
    for (int d : sample_shape) n *= static_cast<size_t>(d);
    return n;
  }
  const float* sample(size_t i) const { return features.data() + i * sample_size(); }
  const float* target(size_t i) const { return targets.data() + i * target_dim; }

  // The samples at `indices`, in that order. REQUIRES: every index < size().
  Dataset Subset(const std::vector<uint32_t>& indices) const {
    Dataset out;
    out.sample_shape = sample_shape;
    out.num_classes = num_classes;
    out.target_dim = target_dim;
    out.feature_names = feature_names;
    const size_t s = sample_size();
    // Appended rather than resized then overwritten: no zero pass over the copy.
    out.features.reserve(indices.size() * s);
    out.labels.reserve(indices.size());
    for (uint32_t i : indices) {
      const float* src = sample(i);
      out.features.insert(out.features.end(), src, src + s);
      out.labels.push_back(labels[i]);
      if (target_dim > 0) out.targets.insert(out.targets.end(), target(i), target(i) + target_dim);
    }
    return out;
  }
};

}  // namespace fedmesh
