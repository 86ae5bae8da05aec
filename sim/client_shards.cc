#include "sim/client_shards.h"

#include <string>

#include "core/check.h"

namespace fedmesh {

ClientShards::ClientShards(int rank, int ranks) : rank_(rank), ranks_(ranks) {
  FM_CHECK_GE(rank, 0);
  FM_CHECK_LT(rank, ranks);
}

uint64_t ClientShards::OwnedCount(uint64_t clients) const {
  const uint64_t r = static_cast<uint64_t>(ranks_), me = static_cast<uint64_t>(rank_);
  return clients / r + (me < clients % r ? 1 : 0);
}

std::vector<bool> ClientShards::NeededDataShards(uint64_t clients, uint64_t shards) const {
  std::vector<bool> needed(shards, false);
  uint64_t marked = 0;
  // Stops once every shard is marked: a million clients over a thousand shards cost a few
  // thousand steps.
  for (uint64_t c = static_cast<uint64_t>(rank_); c < clients && marked < shards;
       c += static_cast<uint64_t>(ranks_)) {
    if (!needed[c % shards]) {
      needed[c % shards] = true;
      ++marked;
    }
  }
  return needed;
}

Status CheckShardable(const SimOptions& options, int ranks) {
  if (ranks <= 1) return Status::OK();
  const std::string r = std::to_string(ranks);
  if (options.mode != SimMode::kAggregator) {
    return Status::InvalidArgument(
        "[sim] mode " + std::string(SimModeName(options.mode)) + " runs in one process only; " + r +
        " MPI ranks were started. Only aggregator mode shards its clients over MPI ranks: "
        "run without mpirun (or with -n 1), or set [sim] mode = \"aggregator\"");
  }
  if (options.clients < static_cast<uint64_t>(ranks)) {
    return Status::InvalidArgument(
        r + " MPI ranks for " + std::to_string(options.clients) +
        " clients: every rank must own at least one client; start at most " +
        std::to_string(options.clients) + " ranks (mpirun -n) or raise [sim] clients");
  }
  return Status::OK();
}

}  // namespace fedmesh
