// Workspaces: the simulator's training workers. One model (on a one-thread CPU backend) per
// worker; jobs get a worker's model, so no client ever allocates a model of its own and
// memory stays at `threads` models however many clients train. Jobs run on OpenMP
// threads: OpenBLAS then keeps each GEMM on its caller's thread instead of starting a
// second pool (its OpenMP build is not meant to be called from other threads at once).
//
// Two ways to run jobs:
//  - Run(n, fn): a parallel loop that returns when all n jobs have run.
//  - Serve(driver) with Submit/Wait: the driver (the simulator's event loop) runs on the
//    calling thread as worker 0 while workers 1.. train the jobs it submits in the
//    background, so the driver's serial work (the aggregator's handling of each result)
//    overlaps training instead of leaving the other cores idle. While the driver waits for
//    a job it runs queued jobs itself.
// Thread-safety: Run, Serve, Submit, Wait and RunOneQueued are called from one thread
// (inside Serve: the driver); the jobs run in parallel and must only touch their own state.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "core/model.h"
#include "core/model_zoo.h"
#include "core/status.h"

namespace fedmesh {

class Workspaces {
 public:
  struct Task;
  // A submitted job; Wait on it before reading what it wrote.
  using Ticket = std::shared_ptr<Task>;

  // `threads` workers (0 = all cores) for models of `spec`, built with EngineFor(spec).
  static Result<Workspaces> Create(const ModelSpec& spec, int threads);
  // How a worker runs a built-in model: the layer code for those the batched trainer trains
  // (logreg, mlp: a client trained here instead must step exactly as one trained there),
  // the CPU's default (the graph executor, as fedmesh-node runs it) for the others (cnn).
  static BuiltinEngine EngineFor(const ModelSpec& spec);
  Workspaces() = default;
  Workspaces(Workspaces&& other) noexcept
      : backends_(std::move(other.backends_)), models_(std::move(other.models_)) {}

  size_t size() const { return models_.size(); }
  Model& model(size_t i) { return *models_[i]; }

  // Runs fn(job, model) for every job in [0, n) and returns the first error in job order
  // (every job runs either way). Inside Serve these jobs go ahead of the queued ones.
  Status Run(size_t n, const std::function<Status(size_t job, Model& model)>& fn);

  // Runs driver() on this thread while the other workers run submitted jobs. Returns once
  // driver() has returned and no job is running; jobs still queued then are dropped unrun
  // (their tickets never complete). Not reentrant.
  void Serve(const std::function<void()>& driver);
  // Queues fn to run on some worker's model. Outside Serve it runs in Wait.
  Ticket Submit(std::function<void(Model&)> fn);
  // Blocks until the ticket's job has run, running queued jobs on this thread meanwhile
  // (the awaited one first when no worker has started it).
  void Wait(const Ticket& ticket);
  // Inside Serve, on the driver: runs the oldest queued job on this thread and returns
  // true, or returns false when none is queued. A sharded simulation trains its own
  // clients this way while it waits for another rank's answer.
  bool RunOneQueued();

 private:
  // Pops `task` (or the queue's front when null) and runs it on worker `w`'s model.
  // REQUIRES: lock holds mu_, the queue is not empty.
  void RunQueued(std::unique_lock<std::mutex>& lock, const Ticket& task, size_t w);
  void WorkerLoop(size_t w);

  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<Model>> models_;
  // The background queue (Serve/Submit/Wait).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Ticket> queue_;
  bool serving_ = false;
  bool stopping_ = false;
};

struct Workspaces::Task {
  std::function<void(Model&)> fn;
  bool started = false;  // guarded by Workspaces::mu_
  bool done = false;     // guarded by Workspaces::mu_
};

}  // namespace fedmesh
