// The identity quantizer: values as little-endian float32, 4 bytes each. Used when a chain
// names no quantizer ("none", "topk:0.01", "zstd"). Decoding rejects NaN and infinities.
// Thread-safety: immutable.
#pragma once

#include "core/codec/stage.h"

namespace fedmesh::codec {

class Float32Quantizer final : public Quantizer {
 public:
  std::string name() const override { return "f32"; }
  bool lossless() const override { return true; }
  bool unbiased() const override { return true; }
  uint64_t EncodedBytes(uint64_t count) const override { return 4 * count; }
  Status Encode(std::span<const float> values, uint64_t seed, uint8_t* out) const override;
  Status Decode(std::span<const uint8_t> in, std::span<float> out) const override;
};

}  // namespace fedmesh::codec
