// NodeStore: a site node's own persistent state in its own SQLite file (WAL,
// synchronous=FULL): the last global model it received (version + params), its local
// optimizer state (the momentum velocity), the round it last served, and named float
// tensors for state later features keep between rounds (e.g. a codec's error-feedback
// residual). The state is saved and loaded as one NodeCheckpoint, in one transaction: after
// a crash the node finds either the previous checkpoint or the new one, never a mix. Every
// vector carries a SHA-256 checked on load. The schema is documented in docs/storage.md.
// Thread-safety: one thread at a time (it owns one SQLite connection).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "storage/sqlite/database.h"

namespace fedmesh {

struct NodeCheckpoint {
  // The last global model the node received.
  uint64_t model_version = 0;
  std::vector<float> model;
  // Local optimizer state (SGD momentum velocity); empty when the optimizer keeps none.
  std::vector<float> velocity;
  // The last round the node sent an update for; nullopt until it has served one. A node
  // restarted mid-round uses it not to train the same round twice.
  std::optional<uint64_t> last_round_served;
  // Named tensors of later features, e.g. "codec/topk_residual". Names are non-empty.
  std::map<std::string, std::vector<float>> tensors;
  // Named text values of later features (schema v2), e.g. a gossip node's sequence number,
  // incarnation and peer list ("gossip/..."). Names are non-empty.
  std::map<std::string, std::string> attributes;

  friend bool operator==(const NodeCheckpoint&, const NodeCheckpoint&) = default;
};

class NodeStore {
 public:
  // Opens or creates the node's store at `path` (schema version 2; a v1 file is migrated). A file of another kind
  // or written by a newer fedmesh is FailedPrecondition; a damaged file is Corruption.
  static Result<std::unique_ptr<NodeStore>> Open(const std::string& path);
  // For reading only, as AggregatorStore::OpenReadOnly.
  static Result<std::unique_ptr<NodeStore>> OpenReadOnly(const std::string& path);

  NodeStore(const NodeStore&) = delete;
  NodeStore& operator=(const NodeStore&) = delete;

  // Replaces the stored checkpoint with `checkpoint` (tensors absent from it are deleted),
  // in one transaction.
  Status SaveCheckpoint(const NodeCheckpoint& checkpoint);
  // The stored checkpoint, or nullopt when none was ever saved. A vector that fails its
  // SHA-256 or length check is Corruption naming it and the file.
  Result<std::optional<NodeCheckpoint>> LoadCheckpoint();

  // Sets the named text values in one transaction, leaving the checkpoint and the other
  // attributes as they are: for state that must be durable before the next checkpoint (a
  // site's privacy ledger after training and before the update leaves). A later
  // SaveCheckpoint replaces all attributes, so it must carry these too.
  Status SaveAttributes(const std::map<std::string, std::string>& attributes);
  // Every stored attribute, whether or not a checkpoint was ever saved.
  Result<std::map<std::string, std::string>> LoadAttributes();

  const std::string& path() const { return db_->path(); }

 private:
  explicit NodeStore(std::unique_ptr<Database> db) : db_(std::move(db)) {}

  std::unique_ptr<Database> db_;
};

}  // namespace fedmesh
