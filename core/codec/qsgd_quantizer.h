// QSGD quantizer (Alistarh et al., NeurIPS 2017): values in buckets of `bucket` (default
// 512); each bucket stores its L2 norm as float32 and each value as a signed level
// sign(x) * l, l in [0, levels], where l is |x| / norm * levels rounded down or up at
// random with the probability that makes it unbiased: E[decoded] = x. Levels <= 127, so a
// code is one int8. Size: 4 * ceil(count / bucket) + count bytes, norms first.
// Randomness comes from the seed (counter-based, per global index): the same seed gives
// the same bytes; the decoder needs no seed.
// Decoding rejects a norm that is negative or not finite, and a code with |l| > levels.
// Thread-safety: immutable.
#pragma once

#include <cstdint>

#include "core/codec/stage.h"

namespace fedmesh::codec {

class QsgdQuantizer final : public Quantizer {
 public:
  static constexpr uint32_t kMaxLevels = 127;
  static constexpr uint32_t kDefaultBucket = 512;
  static constexpr uint32_t kMaxBucket = uint32_t{1} << 24;
  // REQUIRES: 1 <= levels <= kMaxLevels, 1 <= bucket <= kMaxBucket (Parse checks them).
  QsgdQuantizer(uint32_t levels, uint32_t bucket = kDefaultBucket)
      : levels_(levels), bucket_(bucket) {}
  std::string name() const override {
    return "qsgd:" + std::to_string(levels_) + ":" + std::to_string(bucket_);
  }
  bool unbiased() const override { return true; }
  uint64_t EncodedBytes(uint64_t count) const override {
    return 4 * ((count + bucket_ - 1) / bucket_) + count;
  }
  Status Encode(std::span<const float> values, uint64_t seed, uint8_t* out) const override;
  Status Decode(std::span<const uint8_t> in, std::span<float> out) const override;

 private:
  uint32_t levels_;
  uint32_t bucket_;
};

}  // namespace fedmesh::codec
