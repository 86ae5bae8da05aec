// Communicator: the Horovod vocabulary over a ring of ranks (size, rank, local_rank,
// allreduce, allgather, broadcast, barrier), each call blocking until this rank's part is
// done. It drives a RingCollective (collective/ring_collective.h) over a CollectiveTransport.
// Many small tensors are fused (tensor fusion): packed into buffers of up to fusion_bytes,
// reduced together, unpacked, so a model of many layers costs a few ring passes, not one per
// layer. Every rank must make the same calls in the same order (SPMD).
// Thread-safety: one thread per Communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "collective/collective_transport.h"
#include "collective/ring_collective.h"

namespace fedmesh::collective {

struct CommunicatorOptions {
  RingOptions ring;
  // This rank's index among the ranks on its machine (Horovod's local_rank). Default: 0.
  int local_rank = 0;
  // Largest fusion buffer; a tensor larger than this is reduced on its own, in place.
  // Default: 64 MiB.
  uint64_t fusion_bytes = uint64_t{64} << 20;
  // A call fails with DeadlineExceeded when no chunk arrives for this long (a dead or
  // partitioned neighbour). Default: 60,000 ms.
  int timeout_ms = 60000;
};

class Communicator {
 public:
  // InvalidArgument for bad ring options or a null transport. REQUIRES: `transport`
  // outlives the communicator.
  static Result<std::unique_ptr<Communicator>> Create(const CommunicatorOptions& options,
                                                      CollectiveTransport* transport);

  int size() const { return ring_.size(); }
  int rank() const { return ring_.rank(); }
  int local_rank() const { return options_.local_rank; }

  // In place, over the ring's wire type.
  Status Allreduce(std::span<float> data, ReduceOp op = ReduceOp::kAverage);
  // Tensor fusion: every tensor reduced, in place.
  Status Allreduce(const std::vector<std::span<float>>& tensors, ReduceOp op = ReduceOp::kAverage);
  // Every rank's values, in rank order (each rank may bring a different length).
  Result<std::vector<float>> Allgather(std::span<const float> mine);
  // The root's `data` everywhere.
  Status Broadcast(std::span<float> data, int root);
  Status Barrier();

  const RingCollective& ring() const { return ring_; }
  uint64_t fused_buffers() const { return fused_buffers_; }  // fusion buffers reduced

 private:
  Communicator(const CommunicatorOptions& o, RingCollective ring, CollectiveTransport* t)
      : options_(o), ring_(std::move(ring)), transport_(t) {}
  // Sends `first`, then receives and answers chunks until the operation completes.
  Status Drive(Result<std::vector<Send>> first);

  CommunicatorOptions options_;
  RingCollective ring_;
  CollectiveTransport* transport_;
  std::vector<float> fusion_;
  uint64_t fused_buffers_ = 0;
};

}  // namespace fedmesh::collective
