// Workspaces: the simulator's training workers. One model (on a one-thread CPU backend) per
// worker; Run hands each job a worker's model, so no client ever allocates a model of its
// own and memory stays at `threads` models however many clients train. Jobs run on OpenMP
// threads: OpenBLAS then keeps each GEMM on its caller's thread instead of starting a
// second pool. Thread-safety: Run is called from one thread; the jobs run in parallel and
// must only touch their own state.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/model.h"
#include "core/model_zoo.h"
#include "core/status.h"

namespace fedmesh {

class Workspaces {
 public:
  // `threads` workers (0 = all cores) for models of `spec`.
  static Result<Workspaces> Create(const ModelSpec& spec, int threads);

  size_t size() const { return models_.size(); }
  Model& model(size_t i) { return *models_[i]; }

  // Runs fn(job, model) for every job in [0, n) and returns the first error in job order
  // (every job runs either way).
  Status Run(size_t n, const std::function<Status(size_t job, Model& model)>& fn);

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<Model>> models_;
};

}  // namespace fedmesh
