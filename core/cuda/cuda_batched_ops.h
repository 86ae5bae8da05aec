// CudaBatchedOps: BatchedOps on one CUDA device (core/cuda/cuda_batched_ops.cu). GEMMs are
// cublasSgemmStridedBatched calls in full FP32 (no TF32); every other op is one kernel over
// (client, element) that calls the FM_HD math of core/cuda/kernel_math.h, the code the host
// tests check against the CPU backend. All work is queued on the instance's own stream.
// Builds without CUDA link core/batched/cuda_batched_ops_stub.cc instead, whose factory
// returns Unavailable. This header includes no CUDA header: plain C++ may include it.
// Thread-safety: one thread drives an instance at a time.
#pragma once

#include <memory>

#include "core/batched/batched_ops.h"
#include "core/status.h"

namespace fedmesh {

// Ops on CUDA device `device` (its own stream and cuBLAS handle). Unavailable when the
// build has no CUDA or the device does not exist; Internal when the driver fails.
Result<std::unique_ptr<BatchedOps>> MakeCudaBatchedOps(int device);

}  // namespace fedmesh
