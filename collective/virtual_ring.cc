#include "collective/virtual_ring.h"

#include <algorithm>
#include <queue>
#include <tuple>

namespace fedmesh::collective {

Result<VirtualRingResult> VirtualAllreduce(std::vector<std::vector<float>>& buffers,
                                           const std::vector<VirtualLink>& links, ReduceOp op,
                                           uint64_t chunk_bytes, WireType wire) {
  const int n = static_cast<int>(buffers.size());
  if (n == 0 || links.size() != buffers.size()) {
    return Status::InvalidArgument("VirtualAllreduce: one link per rank, and at least one rank");
  }
  for (const auto& b : buffers) {
    if (b.size() != buffers[0].size()) return Status::InvalidArgument("VirtualAllreduce: unequal buffer lengths");
  }
  for (const VirtualLink& l : links) {
    if (!(l.bytes_per_s > 0) || l.latency_s < 0) {
      return Status::InvalidArgument("VirtualAllreduce: a link needs bytes_per_s > 0 and latency_s >= 0");
    }
  }
  std::vector<RingCollective> ranks;
  for (int r = 0; r < n; ++r) {
    FM_ASSIGN_OR_RETURN(RingCollective c, RingCollective::Create({n, r, chunk_bytes, wire, 0}));
    ranks.push_back(std::move(c));
  }
  // (arrival time, sequence) orders events; the sequence keeps each link first-in first-out.
  using Event = std::tuple<double, uint64_t, int, int>;  // time, seq, from, to
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::vector<Chunk> in_flight;  // by sequence
  std::vector<double> link_free(n, 0.0);
  VirtualRingResult result;
  auto send = [&](int from, double now, std::vector<Send>& sends) {
    for (Send& s : sends) {
      const VirtualLink& l = links[from];
      const double start = std::max(now, link_free[from]);
      link_free[from] = start + static_cast<double>(s.chunk.bytes.size()) / l.bytes_per_s;
      result.bytes_sent += s.chunk.bytes.size();
      events.emplace(link_free[from] + l.latency_s, in_flight.size(), from, s.to);
      in_flight.push_back(std::move(s.chunk));
    }
  };
  for (int r = 0; r < n; ++r) {
    FM_ASSIGN_OR_RETURN(std::vector<Send> first, ranks[r].StartAllreduce(buffers[r], op));
    send(r, 0.0, first);
  }
  while (!events.empty()) {
    const auto [t, seq, from, to] = events.top();
    events.pop();
    FM_ASSIGN_OR_RETURN(std::vector<Send> next, ranks[to].OnChunk(from, std::move(in_flight[seq])));
    in_flight[seq] = Chunk();
    send(to, t, next);
    result.seconds = std::max(result.seconds, t);
  }
  for (const RingCollective& r : ranks) {
    if (!r.done()) return Status::Internal("VirtualAllreduce: a rank did not finish");
  }
  return result;
}

double RingAllreduceBoundSeconds(int ranks, uint64_t bytes, const VirtualLink& link) {
  if (ranks <= 1) return 0.0;
  const double n = ranks;
  return 2.0 * (n - 1) / n * static_cast<double>(bytes) / link.bytes_per_s;
}

}  // namespace fedmesh::collective
