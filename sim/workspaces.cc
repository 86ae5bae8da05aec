#include "sim/workspaces.h"

#include <omp.h>

#include <thread>

namespace fedmesh {

Result<Workspaces> Workspaces::Create(const ModelSpec& spec, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Workspaces w;
  for (int i = 0; i < threads; ++i) {
    w.backends_.push_back(MakeCpuBackend(1));
    FM_ASSIGN_OR_RETURN(auto model, BuildModel(spec, w.backends_.back().get()));
    w.models_.push_back(std::move(model));
  }
  return w;
}

Status Workspaces::Run(size_t n, const std::function<Status(size_t, Model&)>& fn) {
  std::vector<Status> results(n);
  const int workers = static_cast<int>(std::min(n, models_.size()));
  if (workers <= 1) {
    for (size_t j = 0; j < n; ++j) results[j] = fn(j, *models_[0]);
  } else {
#pragma omp parallel for num_threads(workers) schedule(dynamic, 1)
    for (size_t j = 0; j < n; ++j) {
      results[j] = fn(j, *models_[static_cast<size_t>(omp_get_thread_num())]);
    }
  }
  for (Status& s : results) {
    if (!s.ok()) return s;
  }
  return Status::OK();
}

}  // namespace fedmesh
