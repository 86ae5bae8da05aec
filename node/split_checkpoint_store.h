// The checkpoints of a split-training party (vertical/split_checkpoint.h) in its node
// store, beside the model it exports: each kept step's parts, velocity, rows and alignment
// under "split/ckpt/STEP/..." tensors and attributes, and the committed step.
// Thread-safety: one thread, like the store.
#pragma once

#include <memory>
#include <string>

#include "storage/node_store.h"
#include "vertical/split_checkpoint.h"

namespace fedmesh {

class NodeCheckpointStore final : public vertical::CheckpointStore {
 public:
  // Reads what `store` keeps. Corruption when its split entries are damaged.
  static Result<std::unique_ptr<NodeCheckpointStore>> Open(NodeStore* store);

  Status Save(const vertical::PartyCheckpoint& cp) override;
  Status Commit(uint64_t step) override;
  Result<std::optional<vertical::PartyCheckpoint>> Load(std::optional<uint64_t> step) override;

 private:
  explicit NodeCheckpointStore(NodeStore* store) : store_(store) {}
  Status Write();
  NodeStore* store_;
  vertical::MemoryCheckpointStore kept_;
};

}  // namespace fedmesh
