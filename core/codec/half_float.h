// Scalar float32 <-> IEEE binary16 (fp16) and bfloat16 conversions, round to nearest even.
// The fp16 / bf16 quantizers use vector instructions where the CPU has them; these are the
// reference they are tested against and the fallback on other CPUs.
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstdint>

namespace fedmesh::codec {

// Rounds to the nearest fp16, ties to even; overflow gives infinity (|x| >= 65520), NaN
// stays NaN.
inline uint16_t FloatToHalf(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t x = bits & 0x7FFFFFFFu;
  if (x > 0x7F800000u) return sign | 0x7E00u;  // NaN
  if (x >= 0x38800000u) {                       // >= 2^-14: normal (or overflow)
    uint32_t r = x - 0x38000000u;               // rebias exponent 127 -> 15
    r += 0x0FFFu + ((r >> 13) & 1u);            // round to nearest even at bit 13
    r >>= 13;
    return sign | static_cast<uint16_t>(r >= 0x7C00u ? 0x7C00u : r);
  }
  if (x < 0x33000000u) return sign;  // below 2^-25: rounds to zero
  // Subnormal fp16: value in units of 2^-24 is m * 2^(e - 126).
  const uint32_t e = x >> 23;
  const uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14 .. 24
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return sign | static_cast<uint16_t>(r);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

// True when the fp16 bit pattern is infinity or NaN.
inline bool HalfIsNonFinite(uint16_t h) { return (h & 0x7C00u) == 0x7C00u; }

// Rounds to the nearest bfloat16 (the top 16 bits of a float32), ties to even. Finite
// inputs near FLT_MAX may round to infinity. REQUIRES: f is not NaN.
inline uint16_t FloatToBf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

inline float Bf16ToFloat(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

inline bool Bf16IsNonFinite(uint16_t h) { return (h & 0x7F80u) == 0x7F80u; }

}  // namespace fedmesh::codec
