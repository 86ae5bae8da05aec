#include "core/codec/half_float_quantizer.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/codec/checks.h"
#include "core/codec/half_float.h"

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define FEDMESH_CODEC_F16C 1
#endif

namespace fedmesh::codec {
namespace {

// The error for a value the 16-bit format cannot hold: non-finite input first, then the
// first value out of range.
Status Unrepresentable(std::span<const float> values, const char* format, float limit) {
  FM_RETURN_IF_ERROR(CheckFinite(values, format));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!(std::fabs(values[i]) < limit)) {
      return Status::InvalidArgument(std::string(format) + " cannot represent value " +
                                     std::to_string(values[i]) + " at index " +
                                     std::to_string(i) + " (it would round to infinity); " +
                                     "use bf16 or int8 for values this large");
    }
  }
  return Status::Internal(std::string(format) + " encoder flagged a value but none is bad");
}

Status BadPattern(const char* format, size_t i) {
  return Status::Corruption(std::string(format) + " value " + std::to_string(i) +
                            " is infinity or NaN; payload values must be finite");
}

}  // namespace

Status Fp16Quantizer::Encode(std::span<const float> values, uint64_t /*seed*/,
                             uint8_t* out) const {
  const size_t n = values.size();
  const float* x = values.data();
  size_t i = 0;
  uint32_t bad = 0;
#ifdef FEDMESH_CODEC_F16C
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 limit = _mm256_set1_ps(65520.0f);  // the smallest float that rounds to inf
  __m256 bad_lanes = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    // NLT_UQ: true for |v| >= limit and for NaN.
    bad_lanes = _mm256_or_ps(bad_lanes,
                             _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), limit, _CMP_NLT_UQ));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  bad = static_cast<uint32_t>(_mm256_movemask_ps(bad_lanes));
#endif
  for (; i < n; ++i) {
    const uint16_t h = FloatToHalf(x[i]);
    bad |= static_cast<uint32_t>(HalfIsNonFinite(h));
    std::memcpy(out + 2 * i, &h, 2);
  }
  if (bad != 0) return Unrepresentable(values, "fp16", 65520.0f);
  return Status::OK();
}

Status Fp16Quantizer::Decode(std::span<const uint8_t> in, std::span<float> out) const {
  const size_t n = out.size();
  const uint8_t* p = in.data();
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    bad |= static_cast<uint32_t>(HalfIsNonFinite(h));
  }
  if (bad != 0) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      if (HalfIsNonFinite(h)) return BadPattern("fp16", i);
    }
  }
  size_t i = 0;
  float* y = out.data();
#ifdef FEDMESH_CODEC_F16C
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    y[i] = HalfToFloat(h);
  }
  return Status::OK();
}

Status Bf16Quantizer::Encode(std::span<const float> values, uint64_t /*seed*/,
                             uint8_t* out) const {
  const size_t n = values.size();
  const float* x = values.data();
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(x[i]);
    const uint16_t r = static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
    // Exponent all ones, in the input (inf / NaN: some NaNs wrap around in the rounding
    // sum) or in the result (rounded up to infinity).
    bad |= static_cast<uint32_t>((b & 0x7F800000u) == 0x7F800000u) |
           static_cast<uint32_t>((r & 0x7F80u) == 0x7F80u);
    std::memcpy(out + 2 * i, &r, 2);  // memcpy: `out` may be unaligned
  }
  if (bad != 0) return Unrepresentable(values, "bf16", 0x1.FFp127f);
  return Status::OK();
}

Status Bf16Quantizer::Decode(std::span<const uint8_t> in, std::span<float> out) const {
  const size_t n = out.size();
  const uint8_t* p = in.data();
  float* y = out.data();
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    bad |= static_cast<uint32_t>(Bf16IsNonFinite(h));
    y[i] = Bf16ToFloat(h);
  }
  if (bad != 0) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      if (Bf16IsNonFinite(h)) return BadPattern("bf16", i);
    }
  }
  return Status::OK();
}

}  // namespace fedmesh::codec
