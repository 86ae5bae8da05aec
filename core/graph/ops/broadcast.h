// Numpy-style broadcasting for the graph kernels: the output shape of two operands, and
// the mapping of every output element to the element of an operand it reads, so that
// forward passes read through it and backward passes sum gradients back through it.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <vector>

#include "core/graph/graph.h"
#include "core/status.h"

namespace fedmesh::graph::ops {

// The broadcast shape of a and b, or an error naming both.
Result<Dims> BroadcastDims(const Dims& a, const Dims& b);

// Walks the elements of `out` in order and yields the flat index of the operand element
// each one reads. Cheap when the operand has the output's shape or is a scalar.
class BroadcastIndex {
 public:
  BroadcastIndex(const Dims& operand, const Dims& out);
  bool same() const { return same_; }
  bool scalar() const { return scalar_; }
  // The operand index of output element `flat`.
  int64_t At(int64_t flat) const;

 private:
  bool same_ = false, scalar_ = false;
  std::vector<int64_t> out_dims_, strides_;  // strides_: 0 on broadcast dims
};

}  // namespace fedmesh::graph::ops
