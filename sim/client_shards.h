// ClientShards: which rank of a sharded fedmesh-sim run owns which virtual client. Client c
// belongs to rank c mod R. The round engine samples clients uniformly, so every rank gets
// an equal share of each round's training in expectation (contiguous blocks would do as
// well), and with [data] shards a multiple of R the clients of one data shard (c mod
// shards) all fall on one rank, which then alone holds that shard's rows.
// Only the owner holds a client's training rows, its carried state (momentum, error
// feedback) and its privacy ledger, and only it trains or evaluates for it.
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "sim/sim_options.h"

namespace fedmesh {

class ClientShards {
 public:
  ClientShards() = default;  // one rank owns every client
  // REQUIRES: 0 <= rank < ranks.
  ClientShards(int rank, int ranks);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  int OwnerOf(uint64_t client) const {
    return static_cast<int>(client % static_cast<uint64_t>(ranks_));
  }
  bool Owns(uint64_t client) const { return OwnerOf(client) == rank_; }
  // How many of clients 0 .. clients - 1 this rank owns.
  uint64_t OwnedCount(uint64_t clients) const;
  // Per data shard k of `shards` (client c trains on shard c mod shards): whether some
  // client of 0 .. clients - 1 that this rank owns trains on it.
  std::vector<bool> NeededDataShards(uint64_t clients, uint64_t shards) const;

 private:
  int rank_ = 0;
  int ranks_ = 1;
};

// OK when `options` can run sharded over `ranks` ranks: aggregator mode (the other modes
// run in one process), and at least one client per rank. InvalidArgument saying what to
// change otherwise.
Status CheckShardable(const SimOptions& options, int ranks);

}  // namespace fedmesh
