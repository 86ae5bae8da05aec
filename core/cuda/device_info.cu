// Built only when FEDMESH_CUDA finds nvcc; core/cuda_stub.cc provides the same functions
// otherwise.
#include <cuda_runtime.h>

#include <cstdio>

#include "core/cuda/device_info.h"

namespace fedmesh {

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::string CudaUnavailableReason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
  if (n == 0) return "no CUDA device present";
  return "";
}

std::string CudaDeviceDescription(int index) {
  cudaDeviceProp p{};
  const cudaError_t err = cudaGetDeviceProperties(&p, index);
  if (err != cudaSuccess) return std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err);
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s, %d SMs, %.1f GiB, cc %d.%d", p.name, p.multiProcessorCount,
                p.totalGlobalMem / double(1ull << 30), p.major, p.minor);
  return buf;
}

}  // namespace fedmesh
