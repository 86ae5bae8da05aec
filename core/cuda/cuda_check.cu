#include "core/cuda/cuda_check.h"

#include <string>

namespace fedmesh::cuda {

Status CudaError(cudaError_t err, const char* call, const char* file, int line) {
  return Status::Internal(std::string(call) + " failed: " + cudaGetErrorName(err) + " (" +
                          std::to_string(static_cast<int>(err)) + "): " + cudaGetErrorString(err) +
                          " at " + file + ":" + std::to_string(line));
}

Status CublasError(cublasStatus_t st, const char* call, const char* file, int line) {
  return Status::Internal(std::string(call) + " failed: " + cublasGetStatusName(st) + " (" +
                          std::to_string(static_cast<int>(st)) + "): " + cublasGetStatusString(st) +
                          " at " + file + ":" + std::to_string(line));
}

}  // namespace fedmesh::cuda
