// What the ratio-based sparsifiers (topk, randk) share: the kept-coordinate count, computed
// the same way on both ends from the ratio in the chain name and the element count, their
// canonical "<kind>:<ratio>" name, and a base class holding both.
// Thread-safety: pure functions; RatioSparsifier is immutable.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "core/codec/stage.h"

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

// A sparsifier that keeps KeptForRatio(ratio, n) coordinates and is named "<kind>:<ratio>".
class RatioSparsifier : public Sparsifier {
 public:
  // REQUIRES: 0 < ratio <= 1 (Chain::Parse checks it).
  RatioSparsifier(std::string kind, double ratio) : kind_(std::move(kind)), ratio_(ratio) {}
  std::string name() const final { return kind_ + ":" + FormatRatio(ratio_); }
  uint64_t KeptCount(uint64_t n) const final { return KeptForRatio(ratio_, n); }

 private:
  std::string kind_;
  double ratio_;
};

}  // namespace fedmesh::codec
