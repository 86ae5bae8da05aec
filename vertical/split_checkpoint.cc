#include "vertical/split_checkpoint.h"

namespace fedmesh::vertical {

Status MemoryCheckpointStore::Save(const PartyCheckpoint& cp) {
  kept[cp.step] = cp;
  // The newest two, and the committed one if older.
  while (kept.size() > 2) {
    auto oldest = kept.begin();
    if (committed && oldest->first == *committed) {
      if (kept.size() <= 3) break;
      oldest = std::next(oldest);
    }
    kept.erase(oldest);
  }
  return Status::OK();
}

Status MemoryCheckpointStore::Commit(uint64_t step) {
  if (kept.count(step) == 0) return Status::NotFound("no checkpoint of step " + std::to_string(step) + " to commit");
  committed = step;
  for (auto it = kept.begin(); it != kept.end();) it = it->first < step ? kept.erase(it) : std::next(it);
  return Status::OK();
}

Result<std::optional<PartyCheckpoint>> MemoryCheckpointStore::Load(std::optional<uint64_t> step) {
  if (!step) step = committed ? committed : (kept.empty() ? std::nullopt : std::optional<uint64_t>(kept.rbegin()->first));
  if (!step || kept.count(*step) == 0) return std::optional<PartyCheckpoint>();
  return std::optional<PartyCheckpoint>(kept.at(*step));
}

}  // namespace fedmesh::vertical
