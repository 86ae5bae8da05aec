// The device half of the CUDA codecs (core/cuda/cuda_codecs.h): device scratch, a stream,
// and the host functions that launch the kernels of core/cuda/cuda_codec_kernels.cu. The
// per-element arithmetic is the CPU codecs' own, from core/codec/int8_math.h and
// core/codec/top_k_radix.h. No CUDA types here (streams travel as void*): the glue that
// includes it, core/cuda/cuda_codecs.cc, is C++20 host code, which the .cu files (built as
// C++17) cannot be.
// Thread-safety: a CodecDeviceWorkspace belongs to one thread at a time. Enqueue* calls
// are asynchronous on the workspace's stream; Wait and CopyToHost block until it is idle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"

namespace fedmesh::cuda {

// "No non-finite value seen".
inline constexpr uint64_t kNoIndex = ~uint64_t{0};

class CodecDeviceWorkspace {
 public:
  // A workspace on the current device. `stream`: a cudaStream_t to work on (not owned; it
  // must outlive the workspace), or null to create an own blocking stream, which orders
  // after work on the legacy default stream but not after other streams.
  static Status Create(void* stream, std::unique_ptr<CodecDeviceWorkspace>* out);
  ~CodecDeviceWorkspace();
  CodecDeviceWorkspace(const CodecDeviceWorkspace&) = delete;
  CodecDeviceWorkspace& operator=(const CodecDeviceWorkspace&) = delete;

  // Starts an encoding: forgets the previous one's non-finite index and top-k.
  Status Begin();
  // Records the lowest index of a NaN or infinity in x[0, n). REQUIRES: n >= 1.
  Status EnqueueFindNonFinite(const float* x, uint64_t n);
  // SelectTopK(x[0, n), k): the kept indices (increasing) and their values to
  // kept_indices() / kept_values(); also records non-finite values as above.
  // REQUIRES: 1 <= k <= n < 2^32.
  Status EnqueueTopK(const float* x, uint64_t n, uint64_t k);
  // Int8Quantizer(block).Encode of x[0, m) (device memory; kept_values() allowed) to
  // value_section(): ceil(m / block) float32 scales, then m codes. Records non-finite
  // values only when `record_non_finite` (their index in x is then an index of the input).
  // REQUIRES: m >= 1, 1 <= block <= 2^24.
  Status EnqueueInt8(const float* x, uint64_t m, uint32_t block, bool record_non_finite);

  const uint32_t* kept_indices() const { return kept_indices_; }
  const float* kept_values() const { return kept_values_; }
  const uint8_t* value_section() const { return section_; }

  // Waits for the queued work. *first_non_finite: the lowest index recorded, or kNoIndex.
  // *select_ok: false when a top-k since Begin found no threshold, which only non-finite
  // input (or a bug) causes.
  Status Wait(uint64_t* first_non_finite, bool* select_ok);
  // Copies `bytes` of device memory to host memory and waits.
  Status CopyToHost(const void* device_src, void* host_dst, size_t bytes);

 private:
  CodecDeviceWorkspace() = default;

  void* stream_ = nullptr;  // cudaStream_t
  bool own_stream_ = false;
  int sm_count_ = 1;
  // One allocation: the three radix histograms, the search state, the non-finite index.
  void* small_ = nullptr;
  uint64_t topk_k_ = 0;  // k of the top-k since Begin, 0 when none
  uint32_t* kept_indices_ = nullptr;
  float* kept_values_ = nullptr;
  uint8_t* section_ = nullptr;
  unsigned long long* tile_counts_ = nullptr;  // packed per-tile class counts, then their scan
  uint8_t* scan_temp_ = nullptr;               // cub::DeviceScan scratch
  size_t kept_indices_cap_ = 0, kept_values_cap_ = 0, section_cap_ = 0, tile_counts_cap_ = 0,
         scan_temp_cap_ = 0;
};

// The current device of the calling thread, or the CUDA error.
Status CurrentCudaDevice(int* device);

}  // namespace fedmesh::cuda
