// Peer sampling for gossip: which peers a node talks to at a gossip step. Peers are named
// by rank 0..n-1 in a view sorted by peer id, so every node that sees the same view computes
// the same graph without coordination (SamplePeers maps ranks back to ids). Topologies:
//   random                uniform `fanout` distinct peers, fresh every step (seeded)
//   ring                  rank - 1 and rank + 1
//   exponential           rank + 2^k for every 2^k < n (Assran et al. 2019; log2 n peers)
//   one_peer_exponential  rank + 2^(step mod ceil(log2 n)): one peer per step, time-varying
//                         (Ying et al. 2021: exact averaging in log2 n steps when n = 2^m)
// All mod n. Thread-safety: pure functions; an Rng is owned by one thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace fedmesh {

enum class Topology { kRandom, kRing, kExponential, kOnePeerExponential };

// "random", "ring", "exponential", "one_peer_exponential". InvalidArgument listing them.
Result<Topology> ParseTopology(std::string_view name);
std::string_view TopologyName(Topology topology);
std::vector<std::string> KnownTopologyNames();

// Out-neighbours of `rank` among `n` peers at gossip step `step`: sorted, distinct, never
// `rank` itself; empty when n == 1. `fanout` and `rng` are used by kRandom only (fanout is
// capped at n - 1). REQUIRES: rank < n; rng != nullptr for kRandom.
std::vector<uint32_t> OutNeighbors(Topology topology, uint32_t n, uint32_t rank, uint64_t step,
                                   uint32_t fanout = 1, Rng* rng = nullptr);

// The ids `self` sends to at `step`, for `view`: the live peers including self, any order
// (sorted here). Empty when self is not in the view.
std::vector<std::string> SamplePeers(Topology topology, std::span<const std::string> view,
                                     std::string_view self, uint64_t step, uint32_t fanout,
                                     Rng* rng);

// The symmetric closure of a static topology's graph at step 0 (i ~ j when either is an
// out-neighbour of the other): what D-PSGD's Metropolis-Hastings weights are built on.
// REQUIRES: topology is kRing or kExponential.
std::vector<std::vector<uint32_t>> UndirectedGraph(Topology topology, uint32_t n);

}  // namespace fedmesh
