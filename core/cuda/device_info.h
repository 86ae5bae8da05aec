// CUDA device discovery, callable from builds with and without CUDA: without the CUDA
// toolkit (FEDMESH_CUDA=OFF or nvcc absent) it reports zero devices and why.
// Thread-safety: safe from any thread.
#pragma once

#include <string>

namespace fedmesh {

// Number of usable CUDA devices; 0 when none is present or CUDA was not built.
int CudaDeviceCount();
// Why CudaDeviceCount() is 0 ("built without CUDA", the driver's error string, ...).
std::string CudaUnavailableReason();
// "NVIDIA H100 80GB HBM3, 132 SMs, 79.1 GiB, cc 9.0" or an error description.
std::string CudaDeviceDescription(int index);

}  // namespace fedmesh
