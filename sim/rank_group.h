// RankGroup: the processes (ranks) one fedmesh-sim run is sharded over, and the two
// collectives the sharded simulator needs (docs/simulation.md, "Over MPI"). Every rank runs
// the same deterministic protocol objects from the same seed, so all of them reach the same
// events in the same order; a client's data, state and training live only on its owning
// rank (sim/client_shards.h), and the group carries each owner's answer to the others.
// Implementations, same file name per backend: SingleRankGroup below (a plain run),
// sim/mpi/rank_group.h (OpenMPI; built when CMake finds MPI), sim/threads/rank_group.h
// (ranks as threads of one process, for tests).
// Thread-safety: collectives are called by every rank in the same order, each rank from
// one thread (its simulation loop).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"

namespace fedmesh {

class RankGroup {
 public:
  virtual ~RankGroup() = default;

  virtual int rank() const = 0;  // 0 .. size() - 1; rank 0 writes the outputs
  virtual int size() const = 0;
  // How many ranks of the group run on this machine (they share its cores).
  virtual int local_size() const = 0;

  // Collective: afterwards every rank's `bytes` is root's. While it waits for the root,
  // a rank calls `idle` (when set) until it returns false, then sleeps briefly: a rank
  // waiting for another's answer trains its own clients meanwhile.
  virtual Status Broadcast(int root, std::vector<uint8_t>& bytes,
                           const std::function<bool()>& idle = {}) = 0;
  // Collective: every rank's `bytes`, indexed by rank.
  virtual Result<std::vector<std::vector<uint8_t>>> Allgather(std::span<const uint8_t> bytes) = 0;

  // Ends the run on every rank after this one failed alone (the others may be waiting for
  // it in a collective): MPI ends every process with exit code `code`; an in-process group
  // makes every pending and later collective fail. Returns only where the process lives on.
  virtual void Abort(int code) = 0;
};

// The group of a plain, single-process run: nothing to exchange.
class SingleRankGroup final : public RankGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  Status Broadcast(int, std::vector<uint8_t>&, const std::function<bool()>&) override {
    return Status::OK();
  }
  Result<std::vector<std::vector<uint8_t>>> Allgather(std::span<const uint8_t> bytes) override {
    return std::vector<std::vector<uint8_t>>{{bytes.begin(), bytes.end()}};
  }
  void Abort(int) override {}
};

// The world size an MPI launcher (mpirun / mpiexec of OpenMPI or MPICH) gave this
// process, from its environment; 0 when it was not started by one. Lets fedmesh-sim stay a
// plain process by default and join MPI only under mpirun.
int LauncherWorldSize();

}  // namespace fedmesh
