// InProcessHub: N ranks in one process, each with its own CollectiveTransport endpoint, for
// tests and the simulator: a chunk sent to rank r waits in r's queue (first-in first-out
// per link, as over TCP) until r receives it. Thread-safety: each endpoint is used by one
// thread; the hub is safe across them.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "collective/collective_transport.h"

namespace fedmesh::collective {

class InProcessHub {
 public:
  explicit InProcessHub(int size);
  // Rank `rank`'s endpoint; owned by the hub.
  CollectiveTransport* endpoint(int rank) { return endpoints_[rank].get(); }
  int size() const { return static_cast<int>(endpoints_.size()); }
  // Stops delivering to and from `rank` (a crashed rank): its queued chunks are dropped, and
  // what others send it is discarded.
  void Disconnect(int rank);
  // Delivers to and from `rank` again (a restarted rank), with an empty queue.
  void Reconnect(int rank);

 private:
  class Endpoint;
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<int, Chunk>> chunks;
    bool down = false;
  };
  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<std::unique_ptr<CollectiveTransport>> endpoints_;
};

}  // namespace fedmesh::collective
