// Every CUDA runtime and cuBLAS call is checked: a failure becomes a Status naming the
// call, the code and the driver's message (CONVENTIONS.md: errors are values). Include only
// from CUDA sources (core/cuda/*.cu).
// Thread-safety: the functions are pure; the macros evaluate the call once.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/status.h"

namespace fedmesh::cuda {

// "cudaMalloc(&p, bytes) failed: cudaErrorMemoryAllocation (2): out of memory at file:line"
Status CudaError(cudaError_t err, const char* call, const char* file, int line);
// "cublasSgemm(...) failed: CUBLAS_STATUS_INVALID_VALUE (7): ... at file:line"
Status CublasError(cublasStatus_t st, const char* call, const char* file, int line);

}  // namespace fedmesh::cuda

// Evaluates a CUDA runtime call to a Status.
#define FM_CUDA_STATUS(call)                                                       \
  ([&]() -> ::fedmesh::Status {                                                    \
    const cudaError_t fm_err_ = (call);                                            \
    return fm_err_ == cudaSuccess                                                  \
               ? ::fedmesh::Status::OK()                                           \
               : ::fedmesh::cuda::CudaError(fm_err_, #call, __FILE__, __LINE__);   \
  }())
// Evaluates a cuBLAS call to a Status.
#define FM_CUBLAS_STATUS(call)                                                      \
  ([&]() -> ::fedmesh::Status {                                                     \
    const cublasStatus_t fm_st_ = (call);                                           \
    return fm_st_ == CUBLAS_STATUS_SUCCESS                                          \
               ? ::fedmesh::Status::OK()                                            \
               : ::fedmesh::cuda::CublasError(fm_st_, #call, __FILE__, __LINE__);   \
  }())
#define FM_CUDA_RETURN_IF_ERROR(call)                        \
  do {                                                       \
    ::fedmesh::Status fm_s_ = FM_CUDA_STATUS(call);          \
    if (!fm_s_.ok()) return fm_s_;                           \
  } while (0)
#define FM_CUBLAS_RETURN_IF_ERROR(call)                      \
  do {                                                       \
    ::fedmesh::Status fm_s_ = FM_CUBLAS_STATUS(call);        \
    if (!fm_s_.ok()) return fm_s_;                           \
  } while (0)
