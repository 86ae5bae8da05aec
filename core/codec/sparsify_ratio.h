// The kept-coordinate count shared by the ratio-based sparsifiers (topk, randk), computed
// the same way on both ends from the ratio in the chain name and the element count.
// Thread-safety: pure function.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace fedmesh::codec {

// ceil(ratio * n), at least 1 and at most n (0 for n == 0). REQUIRES: 0 < ratio <= 1.
inline uint64_t KeptForRatio(double ratio, uint64_t n) {
  if (n == 0) return 0;
  const double k = std::ceil(ratio * static_cast<double>(n));
  if (!(k < static_cast<double>(n))) return n;
  return std::max<uint64_t>(1, static_cast<uint64_t>(k));
}

// Shortest decimal that parses back to `v` ("0.01", not "0.010000000000000000208"), for
// canonical chain names.
inline std::string FormatRatio(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace fedmesh::codec
