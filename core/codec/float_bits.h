// A float32's bit pattern, for code that runs on the host and in CUDA kernels alike (the
// codec stages and core/cuda/cuda_codec_kernels.cu). With the sign cleared, the patterns of
// non-negative floats order like their values, so magnitude comparisons, maxima and radix
// digits become integer operations; NaN and infinity are the patterns >= kNonFiniteKey.
// C++17 and no CUDA headers: nvcc compiles it as part of .cu files (CUDA_STANDARD 17).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace fedmesh::codec {

// Every magnitude key at or above this is an infinity or a NaN.
inline constexpr uint32_t kNonFiniteKey = 0x7F800000u;

FM_HD inline uint32_t FloatBits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
#endif
}

FM_HD inline float FloatFromBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
#endif
}

// |v|'s bit pattern: orders like |v| for finite v; -0 and +0 both give 0.
FM_HD inline uint32_t MagnitudeKey(float v) { return FloatBits(v) & 0x7FFFFFFFu; }

}  // namespace fedmesh::codec
