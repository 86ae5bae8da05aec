#include "core/codec/int8_quantizer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/codec/byte_io.h"
#include "core/codec/checks.h"
#include "core/codec/float_bits.h"
#include "core/codec/int8_math.h"

namespace fedmesh::codec {

// The per-element arithmetic is in int8_math.h, shared with the CUDA kernel. With FMA
// hardware (the default -march=x86-64-v3) Int8CodeFma is one vfmadd and vectorises; without
// it std::fma is a libm call per value, so such builds take Int8CodeExact, the same codes
// through an exact double product.
namespace {

inline int8_t HostInt8Code(float x, float inv) {
#if defined(__FMA__)
  return Int8CodeFma(x, inv);
#else
  return Int8CodeExact(x, inv);
#endif
}

}  // namespace

Status Int8Quantizer::Encode(std::span<const float> values, uint64_t /*seed*/,
                             uint8_t* out) const {
  const size_t n = values.size();
  const size_t blocks = Int8BlockCount(n, block_);
  uint8_t* scales = out;
  int8_t* codes = reinterpret_cast<int8_t*>(out + Int8CodesOffset(n, block_));
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block_;
    const size_t len = std::min<size_t>(block_, n - begin);
    const float* x = values.data() + begin;
    // Max of |x|'s bit patterns: for non-negative floats they order like the values, and
    // an integer max reduction vectorises (a float one does not without -ffast-math; the
    // scalar maxss chain was ~90% of the encode time). Any inf / NaN gives a max pattern
    // >= 0x7F800000.
    uint32_t amax_bits = 0;
    for (size_t j = 0; j < len; ++j) amax_bits = std::max(amax_bits, MagnitudeKey(x[j]));
    if (amax_bits >= kNonFiniteKey) return CheckFinite(values, "int8");
    const float amax = FloatFromBits(amax_bits);
    const Int8BlockScale s = Int8ScaleFor(amax);
    StoreF32(scales + 4 * b, s.scale);
    int8_t* q = codes + begin;
    if (s.tiny) {
      const double inv_d = Int8TinyInverse(amax);
      for (size_t j = 0; j < len; ++j) q[j] = Int8CodeTiny(x[j], inv_d);
      continue;
    }
    const float inv = s.inv;
    for (size_t j = 0; j < len; ++j) q[j] = HostInt8Code(x[j], inv);
  }
  return Status::OK();
}

Status Int8Quantizer::Decode(std::span<const uint8_t> in, std::span<float> out) const {
  const size_t n = out.size();
  const size_t blocks = (n + block_ - 1) / block_;
  const uint8_t* scales = in.data();
  const int8_t* codes = reinterpret_cast<const int8_t*>(in.data() + 4 * blocks);
  for (size_t b = 0; b < blocks; ++b) {
    const float scale = LoadF32(scales + 4 * b);
    // Keeps 127 * scale finite but for one scale: FLT_MAX / 127 rounds up as a float, so
    // 127 * scale overflows for the largest one (clamped below).
    if (!(scale >= 0.0f && scale <= FLT_MAX / 127.0f)) {
      return Status::Corruption("int8 block " + std::to_string(b) + " has scale " +
                                std::to_string(scale) +
                                "; scales must be finite, >= 0 and <= FLT_MAX / 127");
    }
    const size_t begin = b * block_;
    const size_t len = std::min<size_t>(block_, n - begin);
    const int8_t* q = codes + begin;
    float* y = out.data() + begin;
    uint32_t bad = 0;
    for (size_t j = 0; j < len; ++j) {
      bad |= static_cast<uint32_t>(q[j] == -128);
      y[j] = static_cast<float>(q[j]) * scale;
    }
    if (bad != 0) {
      const size_t at = static_cast<size_t>(std::find(q, q + len, int8_t{-128}) - codes);
      return Status::Corruption("int8 code " + std::to_string(at) +
                                " is -128; codes must be in [-127, 127]");
    }
    // The encoder writes that scale for max|x| within an ulp or so of FLT_MAX: code +-127
    // then means +-FLT_MAX, not infinity.
    if (!(127.0f * scale <= FLT_MAX)) {
      for (size_t j = 0; j < len; ++j) y[j] = std::clamp(y[j], -FLT_MAX, FLT_MAX);
    }
  }
  return Status::OK();
}

}  // namespace fedmesh::codec
