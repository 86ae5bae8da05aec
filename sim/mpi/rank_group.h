// MpiRankGroup: a RankGroup (sim/rank_group.h) over MPI_COMM_WORLD, for fedmesh-sim started
// by mpirun. Built only when CMake finds MPI (FEDMESH_HAVE_MPI; Debian libopenmpi-dev).
// It owns MPI's lifetime: Create initializes MPI (MPI_THREAD_SERIALIZED: the simulation loop
// and, while it trains in a broadcast's idle callback, a helper thread that keeps MPI's
// progress going; never both at once), the destructor finalizes it. Training workers never
// call MPI. Broadcasts are non-blocking (MPI_Ibcast) and polled with MPI_Test between
// short sleeps, so a waiting rank neither spins a core nor stops training its own clients.
// Thread-safety: one thread (the one that created it) calls it.
#pragma once

#include <memory>

#include "sim/rank_group.h"

namespace fedmesh {

class MpiRankGroup final : public RankGroup {
 public:
  // Initializes MPI with the program's arguments. Unavailable when MPI fails to start.
  // At most one per process.
  static Result<std::unique_ptr<MpiRankGroup>> Create(int* argc, char*** argv);
  ~MpiRankGroup() override;
  MpiRankGroup(const MpiRankGroup&) = delete;
  MpiRankGroup& operator=(const MpiRankGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  Status Broadcast(int root, std::vector<uint8_t>& bytes,
                   const std::function<bool()>& idle = {}) override;
  Result<std::vector<std::vector<uint8_t>>> Allgather(std::span<const uint8_t> bytes) override;
  // MPI_Abort: every rank's process ends with `code`.
  void Abort(int code) override;

 private:
  MpiRankGroup() = default;
  int rank_ = 0;
  int size_ = 1;
  int local_size_ = 1;
  bool helper_allowed_ = false;  // MPI granted MPI_THREAD_SERIALIZED
};

}  // namespace fedmesh
