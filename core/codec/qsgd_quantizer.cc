#include "core/codec/qsgd_quantizer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/codec/byte_io.h"
#include "core/codec/checks.h"
#include "core/rng.h"

namespace fedmesh::codec {

Status QsgdQuantizer::Encode(std::span<const float> values, uint64_t seed, uint8_t* out) const {
  FM_RETURN_IF_ERROR(CheckFinite(values, "qsgd"));
  const size_t n = values.size();
  const size_t buckets = (n + bucket_ - 1) / bucket_;
  int8_t* codes = reinterpret_cast<int8_t*>(out + 4 * buckets);
  const float s = static_cast<float>(levels_);
  for (size_t b = 0; b < buckets; ++b) {
    const size_t begin = b * bucket_;
    const size_t len = std::min<size_t>(bucket_, n - begin);
    const float* x = values.data() + begin;
    double sum_sq = 0.0;
    for (size_t j = 0; j < len; ++j) sum_sq += static_cast<double>(x[j]) * x[j];
    const double norm_d = std::sqrt(sum_sq);
    if (norm_d > FLT_MAX) {
      return Status::InvalidArgument("qsgd bucket " + std::to_string(b) +
                                     " has an L2 norm beyond float32's range; scale the update");
    }
    const float norm = static_cast<float>(norm_d);
    StoreF32(out + 4 * b, norm);
    // In double: s / norm overflows float for norms below s / FLT_MAX, and the decoder
    // multiplies by the float norm, so that (not norm_d) is what keeps E[decoded] = x.
    const double to_level = norm > 0.0f ? s / static_cast<double>(norm) : 0.0;
    int8_t* q = codes + begin;
    for (size_t j = 0; j < len; ++j) {
      const double r = std::min<double>(s, std::fabs(x[j]) * to_level);
      double l = std::floor(r);
      // Round up with probability r - l: E[l] = r.
      if (CounterUniform(seed, begin + j) < r - l) l += 1.0;
      const int32_t level = static_cast<int32_t>(l);
      q[j] = static_cast<int8_t>(x[j] < 0.0f ? -level : level);
    }
  }
  return Status::OK();
}

Status QsgdQuantizer::Decode(std::span<const uint8_t> in, std::span<float> out) const {
  const size_t n = out.size();
  const size_t buckets = (n + bucket_ - 1) / bucket_;
  const int8_t* codes = reinterpret_cast<const int8_t*>(in.data() + 4 * buckets);
  const int32_t s = static_cast<int32_t>(levels_);
  for (size_t b = 0; b < buckets; ++b) {
    const float norm = LoadF32(in.data() + 4 * b);
    if (!(norm >= 0.0f && norm <= FLT_MAX)) {
      return Status::Corruption("qsgd bucket " + std::to_string(b) + " has norm " +
                                std::to_string(norm) + "; norms must be finite and >= 0");
    }
    const size_t begin = b * bucket_;
    const size_t len = std::min<size_t>(bucket_, n - begin);
    const int8_t* q = codes + begin;
    float* y = out.data() + begin;
    // |level| <= levels, so |y| <= norm: finite. Double keeps norm * level / levels from
    // overflowing on the way.
    const double unit = static_cast<double>(norm) / s;
    for (size_t j = 0; j < len; ++j) {
      const int32_t level = q[j];
      if (level > s || level < -s) {
        return Status::Corruption("qsgd code " + std::to_string(begin + j) + " is level " +
                                  std::to_string(level) + "; levels must be within +-" +
                                  std::to_string(s));
      }
      y[j] = static_cast<float>(unit * level);
    }
  }
  return Status::OK();
}

}  // namespace fedmesh::codec
