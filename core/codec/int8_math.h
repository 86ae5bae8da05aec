// The int8 quantizer's arithmetic (core/codec/int8_quantizer.h), written once for the CPU
// encoder and the CUDA kernel (core/cuda/cuda_codec_kernels.cu), which must produce the
// same bytes. Each function names every rounding step: on the device through the _rn
// intrinsics, which nvcc never fuses or reorders; on the host through plain IEEE operations
// and std::fma where a fused multiply-add is meant.
//
// Why the FMA: the CPU encoder has always been compiled with -march=x86-64-v3 and GCC's
// default -ffp-contract=fast (C++ is not covered by GCC's ISO no-contraction rule), so
// x * inv + magic became one vfmadd: the wire bytes are those of the fused form (a
// separately rounded product changes about 3 codes in 2^20 Gaussian values, near-ties
// after the product's rounding). Int8CodeFma keeps that form everywhere; Int8CodeExact
// computes the same code without FMA hardware (see there), for builds without -mfma.
//
// C++17 and no CUDA headers: nvcc compiles it as part of .cu files (CUDA_STANDARD 17).
// REQUIRES for the device: no --use_fast_math / -ftz=true (scales of tiny blocks are
// subnormal). Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "core/codec/float_bits.h"
#include "core/host_device.h"

namespace fedmesh::codec {

// Adding and subtracting 1.5 * 2^23 rounds a float in (-2^22, 2^22) to the nearest integer,
// ties to even, in plain arithmetic the compiler vectorises (lrintf does not, without
// -fno-math-errno).
inline constexpr float kInt8RoundMagic = 12582912.0f;

// Scale blocks and layout: ceil(m / block) float32 scales, then m int8 codes.
FM_HD inline uint64_t Int8BlockCount(uint64_t m, uint32_t block) { return (m + block - 1) / block; }
FM_HD inline uint64_t Int8CodesOffset(uint64_t m, uint32_t block) {
  return 4 * Int8BlockCount(m, block);
}

// What a block's codes are computed with, from its absmax (finite, >= 0).
struct Int8BlockScale {
  float scale;  // written to the wire: amax / 127
  float inv;    // 127 / amax, 0 for an all-zero block
  bool tiny;    // 127 / amax overflows float (amax < ~3.7e-37): codes use Int8TinyInverse
};

FM_HD inline Int8BlockScale Int8ScaleFor(float amax) {
  Int8BlockScale s;
#if defined(__CUDA_ARCH__)
  s.scale = __fdiv_rn(amax, 127.0f);
  s.inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
#else
  s.scale = amax / 127.0f;
  s.inv = amax > 0.0f ? 127.0f / amax : 0.0f;
#endif
  // 0 * inf would be NaN: the rare tiny block takes double precision.
  s.tiny = !(s.inv <= FLT_MAX);
  return s;
}

// 127 / amax in double, for a tiny block's codes (Int8CodeTiny).
FM_HD inline double Int8TinyInverse(float amax) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(127.0, static_cast<double>(amax));
#else
  return 127.0 / static_cast<double>(amax);
#endif
}

// r clamped to [-127, 127] and converted. r is never NaN, so the device's ternaries and
// the host's std::min / std::max (which GCC vectorises best) agree.
FM_HD inline int8_t Int8Clamp(float r) {
#if defined(__CUDA_ARCH__)
  r = (-127.0f < r) ? r : -127.0f;
  r = (r < 127.0f) ? r : 127.0f;
#else
  r = std::min(127.0f, std::max(-127.0f, r));
#endif
  return static_cast<int8_t>(static_cast<int32_t>(r));
}

// The code of x in a block with inverse scale `inv` (not tiny): round(x * inv) with the
// product unrounded, i.e. fma(x, inv, magic) - magic.
FM_HD inline int8_t Int8CodeFma(float x, float inv) {
#if defined(__CUDA_ARCH__)
  const float r = __fsub_rn(__fmaf_rn(x, inv, kInt8RoundMagic), kInt8RoundMagic);
#else
  const float r = std::fma(x, inv, kInt8RoundMagic) - kInt8RoundMagic;
#endif
  return Int8Clamp(r);
}

// Int8CodeFma without an FMA instruction, bit for bit: the product P = x * inv of two floats
// is exact in double (48 significant bits), and for |P| < 2^22 (here |P| <= 127 * (1 +
// 2^-24)) fma(x, inv, magic) lands in [2^23, 2^24), where floats are the integers, so it is
// magic + round-half-even(P) (magic is even) and subtracting magic is exact: both are
// nearbyint(P). REQUIRES: |x * inv| < 2^22. Host only (the device has FMA).
inline int8_t Int8CodeExact(float x, float inv) {
  return Int8Clamp(static_cast<float>(std::nearbyint(static_cast<double>(x) * inv)));
}

// The code of x in a tiny block (Int8BlockScale::tiny), in double precision;
// inv_d = Int8TinyInverse(amax).
FM_HD inline int8_t Int8CodeTiny(float x, double inv_d) {
#if defined(__CUDA_ARCH__)
  double r = rint(__dmul_rn(static_cast<double>(x), inv_d));
#else
  double r = std::nearbyint(static_cast<double>(x) * inv_d);
#endif
#if defined(__CUDA_ARCH__)
  r = (-127.0 < r) ? r : -127.0;
  r = (r < 127.0) ? r : 127.0;
#else
  r = std::min(127.0, std::max(-127.0, r));
#endif
  return static_cast<int8_t>(r);
}

}  // namespace fedmesh::codec
