// Small helpers the benchmarks share.
#pragma once

#include <algorithm>
#include <vector>

namespace fedmesh::bench {

// The median of `v` (the mean of the middle two for an even count). REQUIRES: !v.empty().
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace fedmesh::bench
