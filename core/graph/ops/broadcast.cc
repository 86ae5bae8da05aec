#include "core/graph/ops/broadcast.h"

#include <algorithm>

namespace fedmesh::graph::ops {

Result<Dims> BroadcastDims(const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t x = k < r - a.size() ? 1 : a[k - (r - a.size())];
    const int64_t y = k < r - b.size() ? 1 : b[k - (r - b.size())];
    if (x != y && x != 1 && y != 1)
      return Status::InvalidArgument("shapes " + DimsToString(a) + " and " + DimsToString(b) +
                                     " do not broadcast");
    out[k] = x == 1 ? y : x;
  }
  return out;
}

BroadcastIndex::BroadcastIndex(const Dims& operand, const Dims& out) {
  same_ = operand == out;
  scalar_ = NumElements(operand) == 1;
  out_dims_ = out;
  strides_.assign(out.size(), 0);
  const size_t off = out.size() - operand.size();
  int64_t s = 1;
  for (size_t k = operand.size(); k-- > 0;) {
    strides_[k + off] = operand[k] == 1 ? 0 : s;
    s *= operand[k];
  }
}

int64_t BroadcastIndex::At(int64_t flat) const {
  if (same_) return flat;
  if (scalar_) return 0;
  int64_t idx = 0;
  for (size_t k = out_dims_.size(); k-- > 0;) {
    const int64_t d = out_dims_[k];
    idx += (flat % d) * strides_[k];
    flat /= d;
  }
  return idx;
}

}  // namespace fedmesh::graph::ops
