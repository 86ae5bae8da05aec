// Device discovery and the CUDA backend factory for builds without CUDA (see
// core/cuda/device_info.h and core/cuda/cuda_backend.h).
#ifndef FEDMESH_HAVE_CUDA
#include "core/cuda/cuda_backend.h"
#include "core/cuda/device_info.h"
#include "core/graph/op_kernel.h"

namespace fedmesh {

int CudaDeviceCount() { return 0; }
std::string CudaUnavailableReason() {
  return "this build has no CUDA support (FEDMESH_CUDA=OFF or nvcc not found)";
}
std::string CudaDeviceDescription(int) { return CudaUnavailableReason(); }

Result<std::unique_ptr<Backend>> MakeCudaBackend(int device_index, CudaBackendOptions) {
  return Status::Unavailable("CUDA device " + std::to_string(device_index) + " requested but " +
                             CudaUnavailableReason() + "; use --device cpu or auto");
}

namespace graph {

Result<std::unique_ptr<OpKernel>> MakeCudaKernel(const KernelContext& ctx) {
  return Status::Unavailable(ctx.node->Label() + ": " + CudaUnavailableReason());
}
std::vector<std::string> CudaSupportedOps() { return {}; }

}  // namespace graph
}  // namespace fedmesh
#endif
