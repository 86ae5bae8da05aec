// Device discovery for builds without CUDA (see core/cuda/device_info.h).
#ifndef FEDMESH_HAVE_CUDA
#include "core/cuda/device_info.h"

namespace fedmesh {

int CudaDeviceCount() { return 0; }
std::string CudaUnavailableReason() { return "this build has no CUDA support (FEDMESH_CUDA=OFF or nvcc not found)"; }
std::string CudaDeviceDescription(int) { return CudaUnavailableReason(); }

}  // namespace fedmesh
#endif
