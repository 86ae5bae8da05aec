// VirtualRing: a ring all-reduce among N ranks run in virtual time, for the simulator
// (fedmesh-sim --set sim.mode=allreduce) and for checking the ring's cost against its
// analytic bound. The real RingCollective engines (collective/ring_collective.h) reduce the
// real buffers; only the links are modelled: rank r's link to r + 1 sends one chunk at a
// time at bytes_per_s, and each chunk arrives latency_s after its last byte left. Receiving
// and reducing take no virtual time.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "collective/ring_collective.h"
#include "core/status.h"

namespace fedmesh::collective {

struct VirtualLink {
  double latency_s = 0.0;
  double bytes_per_s = 1e9;  // > 0
};

struct VirtualRingResult {
  double seconds = 0.0;     // virtual time until the last rank finished
  uint64_t bytes_sent = 0;  // by all ranks
};

// All-reduces buffers[r] (one per rank, equal lengths) in place over links[r] (rank r's
// link to rank r + 1). InvalidArgument for unequal lengths, a link count that is not the
// rank count, or a bandwidth <= 0.
Result<VirtualRingResult> VirtualAllreduce(std::vector<std::vector<float>>& buffers,
                                           const std::vector<VirtualLink>& links, ReduceOp op,
                                           uint64_t chunk_bytes, WireType wire = WireType::kFloat32);

// The bandwidth term of the ring all-reduce's cost with every link like `link`: 2 (N - 1) / N
// x bytes at the link's rate, the least any all-reduce can move through one rank's link
// (Patarasuk and Yuan). The ring without pipelining adds 2 (N - 1) latencies (one per
// step); with chunks it overlaps them, and lands between this bound and the bound plus
// 2 (N - 1) x (latency + one chunk's time). 0 for N = 1.
double RingAllreduceBoundSeconds(int ranks, uint64_t bytes, const VirtualLink& link);

}  // namespace fedmesh::collective
