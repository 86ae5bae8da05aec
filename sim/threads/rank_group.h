// ThreadRankGroup: a RankGroup (sim/rank_group.h) whose ranks are threads of one process,
// meeting in shared memory. Tests run a sharded simulation with it, one thread per rank,
// without MPI (as gloo's tests run many ranks in one process). Every collective checks
// that all ranks called the same one with the same root: a rank that ran different events
// fails the check loudly instead of exchanging the wrong bytes.
// Thread-safety: each group object is used by its own rank's thread; the groups of one
// Create share a hub that is internally locked.
#pragma once

#include <memory>
#include <vector>

#include "sim/rank_group.h"

namespace fedmesh {

class ThreadRankGroup final : public RankGroup {
 public:
  struct Hub;
  // `ranks` groups (rank 0 .. ranks - 1) of one world. REQUIRES: ranks >= 1.
  static std::vector<std::unique_ptr<ThreadRankGroup>> Create(int ranks);

  ThreadRankGroup(std::shared_ptr<Hub> hub, int rank);
  int rank() const override { return rank_; }
  int size() const override;
  int local_size() const override { return size(); }
  Status Broadcast(int root, std::vector<uint8_t>& bytes,
                   const std::function<bool()>& idle = {}) override;
  Result<std::vector<std::vector<uint8_t>>> Allgather(std::span<const uint8_t> bytes) override;
  // Every rank's pending and later collectives fail with Unavailable.
  void Abort(int code) override;

 private:
  // Deposits `bytes` as this rank's part of collective number `seq_` and returns every
  // rank's parts once all have deposited. `root` is -1 for an allgather.
  Result<std::vector<std::vector<uint8_t>>> Exchange(int root, std::vector<uint8_t> bytes,
                                                     const std::function<bool()>& idle);

  std::shared_ptr<Hub> hub_;
  int rank_;
  uint64_t seq_ = 0;  // collectives this rank has entered
};

}  // namespace fedmesh
