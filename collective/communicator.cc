#include "collective/communicator.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace fedmesh::collective {

Result<std::unique_ptr<Communicator>> Communicator::Create(const CommunicatorOptions& options,
                                                           CollectiveTransport* transport) {
  if (transport == nullptr) return Status::InvalidArgument("Communicator needs a transport");
  if (options.fusion_bytes < 4 || options.timeout_ms <= 0) {
    return Status::InvalidArgument("CommunicatorOptions: fusion_bytes must be >= 4 and timeout_ms > 0");
  }
  FM_ASSIGN_OR_RETURN(RingCollective ring, RingCollective::Create(options.ring));
  return std::unique_ptr<Communicator>(new Communicator(options, std::move(ring), transport));
}

Status Communicator::Drive(Result<std::vector<Send>> first) {
  FM_RETURN_IF_ERROR(first.status());
  for (Send& s : *first) FM_RETURN_IF_ERROR(transport_->Send(s.to, std::move(s.chunk)));
  while (!ring_.done()) {
    FM_ASSIGN_OR_RETURN(auto got, transport_->Receive(options_.timeout_ms));
    if (!got) {
      return Status::DeadlineExceeded("rank " + std::to_string(rank()) + " heard nothing for " +
                                      std::to_string(options_.timeout_ms) + " ms in collective operation " +
                                      std::to_string(ring_.ops_completed()) + " (a neighbour is down or cut off)");
    }
    FM_ASSIGN_OR_RETURN(std::vector<Send> next, ring_.OnChunk(got->first, std::move(got->second)));
    for (Send& s : next) FM_RETURN_IF_ERROR(transport_->Send(s.to, std::move(s.chunk)));
  }
  return Status::OK();
}

Status Communicator::Allreduce(std::span<float> data, ReduceOp op) {
  return Drive(ring_.StartAllreduce(data, op));
}

Status Communicator::Allreduce(const std::vector<std::span<float>>& tensors, ReduceOp op) {
  const uint64_t cap = options_.fusion_bytes / sizeof(float);
  size_t i = 0;
  while (i < tensors.size()) {
    if (tensors[i].size() >= cap) {  // too large to fuse: in place
      FM_RETURN_IF_ERROR(Allreduce(tensors[i], op));
      ++i;
      continue;
    }
    size_t j = i;
    uint64_t total = 0;
    while (j < tensors.size() && tensors[j].size() < cap && total + tensors[j].size() <= cap) {
      total += tensors[j].size();
      ++j;
    }
    fusion_.resize(total);
    uint64_t at = 0;
    for (size_t k = i; k < j; ++k) {
      std::copy(tensors[k].begin(), tensors[k].end(), fusion_.begin() + static_cast<std::ptrdiff_t>(at));
      at += tensors[k].size();
    }
    FM_RETURN_IF_ERROR(Allreduce(std::span<float>(fusion_), op));
    ++fused_buffers_;
    at = 0;
    for (size_t k = i; k < j; ++k) {
      std::copy_n(fusion_.begin() + static_cast<std::ptrdiff_t>(at), tensors[k].size(), tensors[k].begin());
      at += tensors[k].size();
    }
    i = j;
  }
  return Status::OK();
}

Result<std::vector<float>> Communicator::Allgather(std::span<const float> mine) {
  // The lengths first (exact in float32 up to 2^24 values a rank; larger blocks are refused).
  if (mine.size() > (size_t{1} << 24)) {
    return Status::InvalidArgument("allgather: at most 2^24 values a rank, got " + std::to_string(mine.size()));
  }
  std::vector<float> lengths(size(), 0.0f);
  lengths[rank()] = static_cast<float>(mine.size());
  FM_RETURN_IF_ERROR(Drive(ring_.StartAllreduce(std::span<float>(lengths), ReduceOp::kSum, /*exact=*/true)));
  std::vector<uint64_t> counts(size());
  uint64_t total = 0;
  for (int r = 0; r < size(); ++r) total += counts[r] = static_cast<uint64_t>(lengths[r]);
  std::vector<float> out(total);
  FM_RETURN_IF_ERROR(Drive(ring_.StartAllgather(mine, counts, out)));
  return out;
}

Status Communicator::Broadcast(std::span<float> data, int root) { return Drive(ring_.StartBroadcast(data, root)); }

Status Communicator::Barrier() { return Drive(ring_.StartBarrier()); }

}  // namespace fedmesh::collective
