// MakeCudaBatchedOps for builds without CUDA (see core/cuda/cuda_batched_ops.h).
#ifndef FEDMESH_HAVE_CUDA
#include "core/cuda/cuda_batched_ops.h"
#include "core/cuda/device_info.h"

namespace fedmesh {

Result<std::unique_ptr<BatchedOps>> MakeCudaBatchedOps(int device) {
  return Status::Unavailable("CUDA device " + std::to_string(device) + " requested but " +
                             CudaUnavailableReason() + "; use device cpu or auto");
}

}  // namespace fedmesh
#endif
