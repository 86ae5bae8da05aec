#include "crypto/secagg/secagg_graph.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace fedmesh {

uint32_t DefaultSecAggNeighbours(size_t n) {
  if (n < 2) return 0;
  const uint64_t k = 2 * static_cast<uint64_t>(std::bit_width(n - 1));  // 2 * ceil(log2 n)
  return static_cast<uint32_t>(std::min<uint64_t>({k, n - 1, kMaxSecAggNeighbours}));
}

uint32_t DefaultSecAggThreshold(uint32_t degree) { return std::min(degree, (degree + 1) / 2 + 1); }

Result<SecAggGraph> SecAggGraph::Build(std::vector<std::string> participants, uint32_t degree,
                                       std::span<const uint8_t, kGraphSeedSize> seed) {
  const size_t n = participants.size();
  if (n < 2) {
    return Status::InvalidArgument(
        "a secure aggregation graph needs at least 2 participants; got " + std::to_string(n));
  }
  std::sort(participants.begin(), participants.end());
  const auto dup = std::adjacent_find(participants.begin(), participants.end());
  if (dup != participants.end()) {
    return Status::InvalidArgument("participant '" + *dup + "' appears twice in the graph");
  }
  if (degree == 0 || degree > kMaxSecAggNeighbours) {
    return Status::InvalidArgument("secure aggregation degree must be in [1, " +
                                   std::to_string(kMaxSecAggNeighbours) + "]; got " +
                                   std::to_string(degree));
  }
  const bool complete = degree >= n - 1;
  if (!complete && degree % 2 != 0) {
    return Status::InvalidArgument("secure aggregation degree " + std::to_string(degree) +
                                   " is odd; a Harary ring joins k/2 nodes on each side, so k "
                                   "must be even (or at least n - 1 = " +
                                   std::to_string(n - 1) + " for the complete graph)");
  }
  const uint32_t k = complete ? static_cast<uint32_t>(n - 1) : degree;

  // ring[p] = participant index at ring position p.
  std::vector<uint32_t> ring(n);
  for (uint32_t i = 0; i < n; ++i) ring[i] = i;
  ChaCha20WordStream stream(seed);
  for (size_t i = n - 1; i > 0; --i) {
    const uint32_t j = stream.Uniform(static_cast<uint32_t>(i + 1));
    std::swap(ring[i], ring[j]);
  }

  std::vector<uint32_t> adjacency(n * k);
  for (size_t p = 0; p < n; ++p) {
    uint32_t* row = adjacency.data() + size_t{ring[p]} * k;
    if (complete) {
      for (uint32_t j = 0, out = 0; j < n; ++j) {
        if (j != ring[p]) row[out++] = j;
      }
    } else {
      // k < n - 1, so the 2 * (k/2) ring positions p +- 1..k/2 are distinct and not p.
      for (uint32_t d = 1; d <= k / 2; ++d) {
        row[2 * (d - 1)] = ring[(p + d) % n];
        row[2 * (d - 1) + 1] = ring[(p + n - d) % n];
      }
      std::sort(row, row + k);
    }
  }
  return SecAggGraph(std::move(participants), k, std::move(adjacency));
}

std::optional<uint32_t> SecAggGraph::IndexOf(std::string_view id) const {
  const auto it = std::lower_bound(participants_.begin(), participants_.end(), id);
  if (it == participants_.end() || *it != id) return std::nullopt;
  return static_cast<uint32_t>(it - participants_.begin());
}

std::optional<uint32_t> SecAggGraph::NeighbourRank(uint32_t a, uint32_t b) const {
  const std::span<const uint32_t> row = Neighbours(a);
  const auto it = std::lower_bound(row.begin(), row.end(), b);
  if (it == row.end() || *it != b) return std::nullopt;
  return static_cast<uint32_t>(it - row.begin());
}

}  // namespace fedmesh
