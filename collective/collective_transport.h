// CollectiveTransport: how a Communicator (collective/communicator.h) moves ring chunks: to
// a rank, and from whichever rank sent one. Over CurveZMQ between sites, or in process
// (collective/in_process_hub.h) for tests and the simulator. A transport must keep each
// link first-in first-out (TCP does); ranks are the ring's, 0 .. size - 1.
// Thread-safety: one thread per transport object.
#pragma once

#include <optional>
#include <utility>

#include "collective/chunk.h"
#include "core/status.h"

namespace fedmesh::collective {

class CollectiveTransport {
 public:
  virtual ~CollectiveTransport() = default;
  // Queues `chunk` for rank `to`; does not wait for it to arrive.
  virtual Status Send(int to, Chunk chunk) = 0;
  // The next chunk sent to this rank, with its sender, waiting up to timeout_ms; nullopt
  // when none came in time.
  virtual Result<std::optional<std::pair<int, Chunk>>> Receive(int timeout_ms) = 0;
};

}  // namespace fedmesh::collective
