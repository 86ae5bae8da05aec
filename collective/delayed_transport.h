// DelayedTransport: a CollectiveTransport wrapper that delivers every chunk it sends a fixed
// time later, as a link with that one-way latency would (first-in first-out kept; the
// sender does not wait). Wrap every rank's endpoint to delay every link. For benchmarks and
// tests of latency-bound protocols where the kernel offers no tc netem (this project's CI
// kernel lacks sch_netem). The wrapped transport's Send is called from the wrapper's own
// thread, so it must allow that (InProcessHub's does).
// Thread-safety: like the wrapped transport, one thread drives it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "collective/collective_transport.h"

namespace fedmesh::collective {

class DelayedTransport final : public CollectiveTransport {
 public:
  DelayedTransport(CollectiveTransport* inner, std::chrono::microseconds delay);
  ~DelayedTransport() override;  // delivers what is still held first

  Status Send(int to, Chunk chunk) override;
  Result<std::optional<std::pair<int, Chunk>>> Receive(int timeout_ms) override { return inner_->Receive(timeout_ms); }

 private:
  using Clock = std::chrono::steady_clock;
  void Deliver();

  CollectiveTransport* inner_;
  std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Clock::time_point, std::pair<int, Chunk>>> held_;  // due time, (to, chunk)
  bool closing_ = false;
  Status error_;  // the first failed delivery, reported by the next Send
  std::thread thread_;  // last: started after the rest exists
};

}  // namespace fedmesh::collective
