#include "collective/in_process_hub.h"

#include <chrono>

namespace fedmesh::collective {

class InProcessHub::Endpoint final : public CollectiveTransport {
 public:
  Endpoint(InProcessHub* hub, int rank) : hub_(hub), rank_(rank) {}

  Status Send(int to, Chunk chunk) override {
    if (to < 0 || to >= hub_->size()) return Status::InvalidArgument("no rank " + std::to_string(to));
    Queue& q = *hub_->queues_[to];
    {
      std::lock_guard<std::mutex> lock(q.mu);
      if (q.down || hub_->queues_[rank_]->down) return Status::OK();  // lost, as on a dead link
      q.chunks.emplace_back(rank_, std::move(chunk));
    }
    q.cv.notify_one();
    return Status::OK();
  }

  Result<std::optional<std::pair<int, Chunk>>> Receive(int timeout_ms) override {
    Queue& q = *hub_->queues_[rank_];
    std::unique_lock<std::mutex> lock(q.mu);
    q.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !q.chunks.empty() || q.down; });
    if (q.chunks.empty() || q.down) return std::optional<std::pair<int, Chunk>>();
    auto front = std::move(q.chunks.front());
    q.chunks.pop_front();
    return std::optional<std::pair<int, Chunk>>(std::move(front));
  }

 private:
  InProcessHub* hub_;
  int rank_;
};

InProcessHub::InProcessHub(int size) {
  for (int r = 0; r < size; ++r) {
    queues_.push_back(std::make_unique<Queue>());
    endpoints_.push_back(std::make_unique<Endpoint>(this, r));
  }
}

void InProcessHub::Disconnect(int rank) {
  Queue& q = *queues_[rank];
  {
    std::lock_guard<std::mutex> lock(q.mu);
    q.down = true;
    q.chunks.clear();
  }
  q.cv.notify_all();
}

void InProcessHub::Reconnect(int rank) {
  Queue& q = *queues_[rank];
  std::lock_guard<std::mutex> lock(q.mu);
  q.down = false;
  q.chunks.clear();
}

}  // namespace fedmesh::collective
