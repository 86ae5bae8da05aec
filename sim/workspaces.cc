#include "sim/workspaces.h"

#include <omp.h>

#include <algorithm>
#include <thread>

#include "core/batched/batched_trainer.h"
#include "core/check.h"

namespace fedmesh {

BuiltinEngine Workspaces::EngineFor(const ModelSpec& spec) {
  return BatchedTrainer::Trains(spec) ? BuiltinEngine::kLayers : BuiltinEngine::kAuto;
}

Result<Workspaces> Workspaces::Create(const ModelSpec& spec, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Workspaces w;
  for (int i = 0; i < threads; ++i) {
    w.backends_.push_back(MakeCpuBackend(1));
    FM_ASSIGN_OR_RETURN(auto model, BuildModel(spec, w.backends_.back().get(), {EngineFor(spec)}));
    w.models_.push_back(std::move(model));
  }
  return w;
}

Status Workspaces::Run(size_t n, const std::function<Status(size_t, Model&)>& fn) {
  std::vector<Status> results(n);
  if (serving_) {
    // Ahead of the background jobs, in order: this thread runs them, and so does any
    // worker that comes free meanwhile.
    std::vector<Ticket> tickets(n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t j = 0; j < n; ++j) {
        tickets[j] = std::make_shared<Task>();
        tickets[j]->fn = [&results, &fn, j](Model& m) { results[j] = fn(j, m); };
      }
      queue_.insert(queue_.begin(), tickets.begin(), tickets.end());
    }
    cv_.notify_all();
    for (const Ticket& t : tickets) Wait(t);
  } else {
    const int workers = static_cast<int>(std::min(n, models_.size()));
    if (workers <= 1) {
      for (size_t j = 0; j < n; ++j) results[j] = fn(j, *models_[0]);
    } else {
#pragma omp parallel for num_threads(workers) schedule(dynamic, 1)
      for (size_t j = 0; j < n; ++j) {
        results[j] = fn(j, *models_[static_cast<size_t>(omp_get_thread_num())]);
      }
    }
  }
  for (Status& s : results) {
    if (!s.ok()) return s;
  }
  return Status::OK();
}

void Workspaces::RunQueued(std::unique_lock<std::mutex>& lock, const Ticket& task, size_t w) {
  Ticket t = task;
  if (t == nullptr) {
    t = queue_.front();
    queue_.pop_front();
  } else {
    auto it = std::find(queue_.begin(), queue_.end(), t);
    FM_CHECK(it != queue_.end());  // a ticket dropped when Serve ended never runs
    queue_.erase(it);
  }
  t->started = true;
  lock.unlock();
  t->fn(*models_[w]);
  t->fn = nullptr;  // what it captured (often the owner of the ticket) is released now
  lock.lock();
  t->done = true;
  cv_.notify_all();
}

void Workspaces::WorkerLoop(size_t w) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping (the driver dropped what was left)
    RunQueued(lock, nullptr, w);
  }
}

void Workspaces::Serve(const std::function<void()>& driver) {
  FM_CHECK(!serving_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    serving_ = true;
    stopping_ = false;
  }
  auto finish = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
  };
  const int workers = static_cast<int>(models_.size());
  if (workers <= 1) {
    driver();
    finish();
  } else {
#pragma omp parallel num_threads(workers)
    {
      const int me = omp_get_thread_num();
      if (me == 0) {
        driver();
        finish();
        cv_.notify_all();
      } else {
        WorkerLoop(static_cast<size_t>(me));
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  serving_ = false;
}

Workspaces::Ticket Workspaces::Submit(std::function<void(Model&)> fn) {
  auto t = std::make_shared<Task>();
  t->fn = std::move(fn);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(t);
  }
  cv_.notify_one();
  return t;
}

void Workspaces::Wait(const Ticket& ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!ticket->done) {
    if (!ticket->started) {
      RunQueued(lock, ticket, 0);
    } else if (!queue_.empty()) {
      RunQueued(lock, nullptr, 0);
    } else {
      cv_.wait(lock);
    }
  }
}

bool Workspaces::RunOneQueued() {
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.empty()) return false;
  RunQueued(lock, nullptr, 0);
  return true;
}

}  // namespace fedmesh
