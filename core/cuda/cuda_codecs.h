// Codec chains (core/codec/codec.h) encoded on a CUDA device: the values stay in GPU memory,
// top-k selection and int8 quantisation run there, and the bytes that come back are exactly
// Chain::Encode's for the same values: same index section, same scales and codes, the same
// coordinates kept on ties (larger magnitude first, then the lower index). Only O(k) data
// crosses to the host for top-k chains; the varint index section and zstd are written there
// by the CPU codec's own code (Chain::EncodeParts), so the format lives in one place.
//
// Chains: [topk:<ratio>|][int8[:block]|][zstd[:level]], float32 values when no quantizer is
// named. Others (randk, qsgd, fp16, bf16) are Unimplemented: encode them on the host. A
// non-finite value is InvalidArgument with Chain::Encode's message. Builds without CUDA
// link core/cuda_codecs_stub.cc: Unimplemented for the same chains, Unavailable otherwise;
// so is a CUDA build on a machine without a device.
//
// Thread-safety: a CudaCodecEncoder is used by one thread at a time; EncodeOnDevice keeps
// one per thread. Synchronous: calls return when the bytes are on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/codec/codec.h"
#include "core/status.h"

namespace fedmesh::cuda {

class CudaCodecEncoder {
 public:
  // An encoder on the current device, with device scratch that grows to the largest input
  // seen and is reused (no allocation per call once warm). `stream`: a cudaStream_t to
  // encode on, so work queued on it before (whatever produced the values) runs first; it
  // must outlive the encoder. Null: the encoder makes its own stream, which orders only
  // after the legacy default stream; values produced on another stream must then be
  // complete (synchronised) before Encode. Unavailable without a device.
  static Result<std::unique_ptr<CudaCodecEncoder>> Create(void* stream = nullptr);
  ~CudaCodecEncoder();
  CudaCodecEncoder(const CudaCodecEncoder&) = delete;
  CudaCodecEncoder& operator=(const CudaCodecEncoder&) = delete;

  // chain.Encode(values, seed, out) for the n floats at `device_values` (device memory of
  // this encoder's device). `seed` drives no stage the device runs; it is taken for
  // symmetry with Chain::Encode.
  Status Encode(const codec::Chain& chain, const float* device_values, size_t n, uint64_t seed,
                std::vector<uint8_t>* out);

 private:
  struct Impl;
  explicit CudaCodecEncoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// CudaCodecEncoder::Encode with this thread's encoder for the current device (made on first
// use, remade when the thread's current device changes; it has its own stream).
Status EncodeOnDevice(const codec::Chain& chain, const float* device_values, size_t n,
                      uint64_t seed, std::vector<uint8_t>* out);

}  // namespace fedmesh::cuda
