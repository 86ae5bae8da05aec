#include "gossip/topology.h"

#include <algorithm>
#include <set>

#include "core/check.h"

namespace fedmesh {

Result<Topology> ParseTopology(std::string_view name) {
  if (name == "random") return Topology::kRandom;
  if (name == "ring") return Topology::kRing;
  if (name == "exponential") return Topology::kExponential;
  if (name == "one_peer_exponential") return Topology::kOnePeerExponential;
  return Status::InvalidArgument("topology \"" + std::string(name) +
                                 "\" is unknown; use random, ring, exponential or "
                                 "one_peer_exponential");
}

std::string_view TopologyName(Topology topology) {
  switch (topology) {
    case Topology::kRandom: return "random";
    case Topology::kRing: return "ring";
    case Topology::kExponential: return "exponential";
    case Topology::kOnePeerExponential: return "one_peer_exponential";
  }
  return "unknown";
}

std::vector<std::string> KnownTopologyNames() {
  return {"random", "ring", "exponential", "one_peer_exponential"};
}

std::vector<uint32_t> OutNeighbors(Topology topology, uint32_t n, uint32_t rank, uint64_t step,
                                   uint32_t fanout, Rng* rng) {
  FM_CHECK_LT(rank, n);
  std::vector<uint32_t> out;
  if (n == 1) return out;
  switch (topology) {
    case Topology::kRing:
      out = {(rank + n - 1) % n, (rank + 1) % n};
      break;
    case Topology::kExponential:
      for (uint64_t hop = 1; hop < n; hop *= 2) out.push_back(static_cast<uint32_t>((rank + hop) % n));
      break;
    case Topology::kOnePeerExponential: {
      uint32_t levels = 0;  // ceil(log2 n)
      while ((uint64_t{1} << levels) < n) ++levels;
      const uint64_t hop = uint64_t{1} << (step % levels);
      out.push_back(static_cast<uint32_t>((rank + hop) % n));
      break;
    }
    case Topology::kRandom: {
      FM_CHECK(rng != nullptr);
      const uint32_t k = std::min(fanout, n - 1);
      // Distinct picks among the n - 1 others (Floyd); rank r >= self maps to r + 1.
      std::set<uint32_t> picked;
      for (uint32_t j = (n - 1) - k; j < n - 1; ++j) {
        const auto t = static_cast<uint32_t>(rng->UniformInt(j + 1));
        picked.insert(picked.contains(t) ? j : t);
      }
      for (uint32_t p : picked) out.push_back(p >= rank ? p + 1 : p);
      break;
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  std::erase(out, rank);
  return out;
}

std::vector<std::string> SamplePeers(Topology topology, std::span<const std::string> view,
                                     std::string_view self, uint64_t step, uint32_t fanout,
                                     Rng* rng) {
  std::vector<std::string> sorted(view.begin(), view.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  auto it = std::lower_bound(sorted.begin(), sorted.end(), self);
  if (it == sorted.end() || *it != self) return {};
  const auto rank = static_cast<uint32_t>(it - sorted.begin());
  std::vector<std::string> peers;
  for (uint32_t r : OutNeighbors(topology, static_cast<uint32_t>(sorted.size()), rank, step,
                                 fanout, rng)) {
    peers.push_back(sorted[r]);
  }
  return peers;
}

std::vector<std::vector<uint32_t>> UndirectedGraph(Topology topology, uint32_t n) {
  FM_CHECK(topology == Topology::kRing || topology == Topology::kExponential);
  std::vector<std::set<uint32_t>> adj(n);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j : OutNeighbors(topology, n, i, 0)) {
      adj[i].insert(j);
      adj[j].insert(i);
    }
  }
  std::vector<std::vector<uint32_t>> out(n);
  for (uint32_t i = 0; i < n; ++i) out[i].assign(adj[i].begin(), adj[i].end());
  return out;
}

}  // namespace fedmesh
