#include "core/codec/int8_quantizer.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/codec/byte_io.h"
#include "core/codec/checks.h"

namespace fedmesh::codec {
namespace {

// Adding and subtracting 1.5 * 2^23 rounds a float in (-2^22, 2^22) to the nearest integer,
// ties to even, in plain arithmetic the compiler vectorises (lrintf does not, without
// -fno-math-errno).
constexpr float kRoundMagic = 12582912.0f;

}  // namespace

Status Int8Quantizer::Encode(std::span<const float> values, uint64_t /*seed*/,
                             uint8_t* out) const {
  const size_t n = values.size();
  const size_t blocks = (n + block_ - 1) / block_;
  uint8_t* scales = out;
  int8_t* codes = reinterpret_cast<int8_t*>(out + 4 * blocks);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block_;
    const size_t len = std::min<size_t>(block_, n - begin);
    const float* x = values.data() + begin;
    // Max of |x|'s bit patterns: for non-negative floats they order like the values, and
    // an integer max reduction vectorises (a float one does not without -ffast-math; the
    // scalar maxss chain was ~90% of the encode time). Any inf / NaN gives a max pattern
    // >= 0x7F800000.
    uint32_t amax_bits = 0;
    for (size_t j = 0; j < len; ++j) {
      amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(x[j]) & 0x7FFFFFFFu);
    }
    if (amax_bits >= 0x7F800000u) return CheckFinite(values, "int8");
    const float amax = std::bit_cast<float>(amax_bits);
    const float scale = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    StoreF32(scales + 4 * b, scale);
    int8_t* q = codes + begin;
    if (!(inv <= FLT_MAX)) {
      // amax < 127 / FLT_MAX (~3.7e-37): 127 / amax overflows float (0 * inf would be NaN);
      // the rare tiny block takes double precision.
      const double inv_d = 127.0 / static_cast<double>(amax);
      for (size_t j = 0; j < len; ++j) {
        const double r = std::nearbyint(static_cast<double>(x[j]) * inv_d);
        q[j] = static_cast<int8_t>(std::min(127.0, std::max(-127.0, r)));
      }
      continue;
    }
    for (size_t j = 0; j < len; ++j) {
      float r = (x[j] * inv + kRoundMagic) - kRoundMagic;
      r = std::min(127.0f, std::max(-127.0f, r));
      q[j] = static_cast<int8_t>(static_cast<int32_t>(r));
    }
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
