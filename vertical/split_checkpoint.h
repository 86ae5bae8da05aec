// What a party of a split job keeps to resume after a crash (docs/vertical.md, "Faults"):
// its parts' parameters and optimizer velocity after a step, the rows it trains on (its
// own table's rows, in the job's order: no second PSI on resume) and the alignment digest
// both sides of a link compute, so a party never resumes against another job's rows.
// Checkpoints are two-phase: every party saves the same step, and the label party commits
// it once all have; a resume goes back to the last committed step. A feature party keeps
// its last two saved steps (the label party may have crashed before committing the newer).
// Thread-safety: a store belongs to one party's thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace fedmesh::vertical {

struct PartyCheckpoint {
  uint64_t step = 0;                  // steps completed
  std::string alignment;              // per link, comma-separated (the label party's: one per feature party)
  std::vector<uint32_t> rows;         // this party's table rows, in the job's row order
  std::vector<std::vector<float>> params, velocity;  // per part: bottom (then top, label party)
  friend bool operator==(const PartyCheckpoint&, const PartyCheckpoint&) = default;
};

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  // Keeps `cp`, and the newest earlier one; older ones go.
  virtual Status Save(const PartyCheckpoint& cp) = 0;
  // The label party: the saved checkpoint of `step` is now the one to resume from.
  // NotFound when none of that step is kept.
  virtual Status Commit(uint64_t step) = 0;
  // The checkpoint of `step`; or, for nullopt, the committed one (label party) or the
  // newest saved (a feature party commits nothing). nullopt when there is none.
  virtual Result<std::optional<PartyCheckpoint>> Load(std::optional<uint64_t> step) = 0;
};

// In memory (tests, the simulator).
class MemoryCheckpointStore final : public CheckpointStore {
 public:
  Status Save(const PartyCheckpoint& cp) override;
  Status Commit(uint64_t step) override;
  Result<std::optional<PartyCheckpoint>> Load(std::optional<uint64_t> step) override;

  std::map<uint64_t, PartyCheckpoint> kept;
  std::optional<uint64_t> committed;
};

}  // namespace fedmesh::vertical
