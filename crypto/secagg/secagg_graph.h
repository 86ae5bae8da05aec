// The SecAgg+ communication graph (Bell et al. 2020): instead of sharing its secrets with
// every other client (Bonawitz et al. 2017, O(n^2) work and traffic), each client shares
// them with, and masks against, only its k neighbours in a random k-regular graph, with
// k = O(log n). The graph is a randomly relabelled Harary graph: the sorted participant
// ids are shuffled by a Fisher-Yates shuffle driven by ChaCha20 under a public 32-byte
// seed (rejection sampling, so no modulo bias), placed on a ring in that order, and each
// node is joined to its k/2 nearest nodes on either side. If k >= n - 1 the graph is
// complete. The server picks the seed and every party rebuilds the same graph from it.
// Node i's neighbour list is sorted by participant index; the position of j in i's list,
// plus one, is the Shamir x-coordinate of the share of i's secrets that j holds.
// Thread-safety: an immutable value after Build; const methods are safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "crypto/secagg/mask_prg.h"

namespace fedmesh {

inline constexpr size_t kGraphSeedSize = 32;
// Shamir x-coordinates run 1..255, so a node can have at most 254 neighbours when k is
// even, the largest even degree below that bound.
inline constexpr uint32_t kMaxSecAggNeighbours = 254;

// Default degree for n participants: 2 * ceil(log2 n), which is even, capped at n - 1
// (the complete graph) and at kMaxSecAggNeighbours. 0 for n < 2.
uint32_t DefaultSecAggNeighbours(size_t n);

// Default Shamir threshold for degree k: ceil(k/2) + 1, capped at k. More than half the
// neighbourhood is needed because no round in this protocol lets clients check that the
// server told all of them the same survivor set: with t > k/2, the neighbours it asks for
// shares of b_u and those it asks for shares of s_sk_u cannot both reach t, so a lying
// server never learns both of a live client's secrets (which would unmask its input).
uint32_t DefaultSecAggThreshold(uint32_t degree);

class SecAggGraph {
 public:
  // The graph on `participants` (any order; they are sorted here) with the requested
  // degree, shuffled by `seed`. InvalidArgument for fewer than 2 participants, a duplicate
  // id, degree 0, an odd degree below n - 1 (a Harary ring needs k/2 on each side), or a
  // degree above kMaxSecAggNeighbours.
  static Result<SecAggGraph> Build(std::vector<std::string> participants, uint32_t degree,
                                   std::span<const uint8_t, kGraphSeedSize> seed);

  size_t size() const { return participants_.size(); }
  // The actual degree: min(requested, n - 1).
  uint32_t degree() const { return degree_; }
  // Sorted ascending.
  const std::vector<std::string>& participants() const { return participants_; }
  const std::string& id(uint32_t index) const { return participants_[index]; }
  std::optional<uint32_t> IndexOf(std::string_view id) const;
  // The neighbours of `index`, sorted ascending. REQUIRES: index < size().
  std::span<const uint32_t> Neighbours(uint32_t index) const {
    return std::span(adjacency_).subspan(size_t{index} * degree_, degree_);
  }
  // Position of `b` in a's neighbour list, if they are neighbours.
  std::optional<uint32_t> NeighbourRank(uint32_t a, uint32_t b) const;
  bool AreNeighbours(uint32_t a, uint32_t b) const { return NeighbourRank(a, b).has_value(); }

 private:
  SecAggGraph(std::vector<std::string> participants, uint32_t degree,
              std::vector<uint32_t> adjacency)
      : participants_(std::move(participants)), degree_(degree), adjacency_(std::move(adjacency)) {}

  std::vector<std::string> participants_;
  uint32_t degree_ = 0;
  std::vector<uint32_t> adjacency_;  // size() * degree_, row i = Neighbours(i)
};

}  // namespace fedmesh
