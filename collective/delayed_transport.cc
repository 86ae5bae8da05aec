#include "collective/delayed_transport.h"

namespace fedmesh::collective {

DelayedTransport::DelayedTransport(CollectiveTransport* inner, std::chrono::microseconds delay)
    : inner_(inner), delay_(delay), thread_([this] { Deliver(); }) {}

DelayedTransport::~DelayedTransport() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status DelayedTransport::Send(int to, Chunk chunk) {
  std::lock_guard<std::mutex> l(mu_);
  if (!error_.ok()) return error_;
  held_.emplace_back(Clock::now() + delay_, std::make_pair(to, std::move(chunk)));
  cv_.notify_all();
  return Status::OK();
}

void DelayedTransport::Deliver() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return closing_ || !held_.empty(); });
    if (held_.empty()) return;  // closing, all delivered
    const auto due = held_.front().first;
    if (!closing_ && Clock::now() < due) {
      cv_.wait_until(l, due);
      continue;
    }
    auto [to, chunk] = std::move(held_.front().second);
    held_.pop_front();
    l.unlock();
    Status s = inner_->Send(to, std::move(chunk));
    l.lock();
    if (!s.ok() && error_.ok()) error_ = s;
  }
}

}  // namespace fedmesh::collective
