// FederationStatus: what the aggregator shows about itself, to fedmesh-admin (status, sites,
// rounds) and on the status page: the federation, the current round and its progress, every
// enrolled site's liveness and last contribution, and every closed round's figures. The
// service builds it on its event loop and publishes it on a StatusBoard, from which other
// threads (the status page's HTTP server) read a consistent copy.
// Thread-safety: FederationStatus is a value; StatusBoard is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/aggregator_store.h"

namespace fedmesh {

struct SiteStatus {
  std::string name;
  bool enrolled = true;        // its key is in the allowlist now
  bool connected = false;      // registered and not silent past the dead-peer limit
  bool selected = false;       // in the open round's selection
  bool answered = false;       // its update for the open round was accepted
  double last_seen_unix = 0;   // its last message; 0 = not since this process started
  uint64_t last_round = 0;     // the last round it contributed an accepted update to; 0 = none
  uint64_t last_examples = 0;  // that update's examples
  uint64_t updates = 0;        // updates accepted from it since this process started
};

struct RoundRow {
  RoundMetrics metrics;  // as the store keeps them (test_* NaN without an [eval] dataset)
  double train_loss = 0;  // example-weighted; NaN when not known (closed before a restart)
};

struct FederationStatus {
  std::string federation_id;
  std::string aggregator_id;
  // "waiting for sites", "round open", "paused", "finished", "aborted" or "failed".
  std::string state;
  std::string message;  // why it finished, failed, was aborted or paused; may be empty
  uint64_t round = 0;   // the current (or last) round
  uint64_t total_rounds = 0;
  uint64_t rounds_completed = 0;
  uint64_t model_version = 0;
  uint32_t attempt = 0;
  uint64_t selected = 0;  // of the open round
  uint64_t answered = 0;
  double deadline_in_s = 0;  // of the open round; 0 when none is open
  double updated_unix = 0;   // when this view was built
  std::vector<SiteStatus> sites;  // by name
  std::vector<RoundRow> rounds;   // by round
};

// {"federation": ..., "round": ..., "sites": [...], "rounds": [...]}; NaN figures as null.
nlohmann::json StatusToJson(const FederationStatus& status);

class StatusBoard {
 public:
  void Publish(FederationStatus status);
  // The latest published view (an empty one before the first Publish).
  std::shared_ptr<const FederationStatus> Get() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const FederationStatus> current_ = std::make_shared<FederationStatus>();
};

}  // namespace fedmesh
