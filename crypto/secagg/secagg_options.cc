#include "crypto/secagg/secagg_options.h"

#include <algorithm>
#include <string>

#include "crypto/secagg/secagg_graph.h"

namespace fedmesh {

Status SecAggOptions::Validate() const {
  if (federation_id.empty()) {
    return Status::InvalidArgument("secure aggregation needs a federation_id");
  }
  if (vector_size == 0 || vector_size > kMaxSecAggVectorSize) {
    return Status::InvalidArgument("secure aggregation vector_size must be in [1, " +
                                   std::to_string(kMaxSecAggVectorSize) + "]; got " +
                                   std::to_string(vector_size));
  }
  if (neighbours != 0 && (neighbours % 2 != 0 || neighbours > kMaxSecAggNeighbours)) {
    return Status::InvalidArgument(
        "secure aggregation neighbours must be 0 (default) or even and <= " +
        std::to_string(kMaxSecAggNeighbours) + "; got " + std::to_string(neighbours));
  }
  if (threshold != 0 && neighbours != 0 &&
      (threshold > neighbours || 2 * threshold <= neighbours)) {
    return Status::InvalidArgument("secure aggregation threshold " + std::to_string(threshold) +
                                   " must be more than half "
                                   "of, and at most, the " +
                                   std::to_string(neighbours) + " neighbours");
  }
  if (min_clients < 2) {
    return Status::InvalidArgument(
        "secure aggregation min_clients must be at least 2: the sum of one update is that "
        "update");
  }
  FixedPointOptions fp{clip, bits, max_clients == 0 ? 1 : max_clients, noise_stddev};
  return fp.Validate();
}

FixedPointOptions SecAggOptions::fixed_point(size_t allowlist_size) const {
  return {clip, bits, max_clients != 0 ? max_clients : static_cast<uint64_t>(allowlist_size),
          noise_stddev};
}

Result<SecAggGraphParameters> ResolveGraphParameters(const SecAggOptions& options, size_t n) {
  if (n < options.min_clients) {
    return Status::FailedPrecondition(
        "a roster of " + std::to_string(n) +
        " clients is below min_clients = " + std::to_string(options.min_clients));
  }
  SecAggGraphParameters p;
  p.degree = options.neighbours != 0 ? options.neighbours : DefaultSecAggNeighbours(n);
  const uint32_t actual = static_cast<uint32_t>(std::min<size_t>(p.degree, n - 1));
  p.threshold = options.threshold != 0 ? options.threshold : DefaultSecAggThreshold(actual);
  if (p.threshold > actual) {
    return Status::FailedPrecondition("a roster of " + std::to_string(n) +
                                      " clients gives each one " + std::to_string(actual) +
                                      " neighbours, fewer than the threshold " +
                                      std::to_string(p.threshold) + ": no secret could be rebuilt");
  }
  if (2 * p.threshold <= actual) {
    return Status::InvalidArgument("threshold " + std::to_string(p.threshold) +
                                   " is at most half of the " + std::to_string(actual) +
                                   " neighbours; it must be more than half (see "
                                   "DefaultSecAggThreshold)");
  }
  return p;
}

}  // namespace fedmesh
