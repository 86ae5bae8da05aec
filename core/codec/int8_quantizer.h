// int8 quantizer: values in blocks of `block` (default 256); each block stores its absmax
// scale s = max|x| / 127 as float32 and each value as round(x / s), an int8 in
// [-127, 127]. Error bound per value: |x - decoded| <= max|x in its block| / 254 (plus
// float rounding, relative 2^-20, and 2^-140 absolute when the scale is subnormal, i.e.
// max|x| < 1.5e-36). Size: 4 * ceil(count / block) + count bytes, scales
// first (all of them, then all codes: zstd finds more to compress that way).
// Decoding rejects a scale that is negative, not finite or above FLT_MAX / 127, and the
// code -128, which the encoder never writes.
// The per-element arithmetic (int8_math.h) is shared with the CUDA encoder, which writes
// the same bytes (core/cuda/cuda_codecs.h).
// Thread-safety: immutable.
#pragma once

#include <cstdint>

#include "core/codec/int8_math.h"
#include "core/codec/stage.h"

namespace fedmesh::codec {

class Int8Quantizer final : public Quantizer {
 public:
  static constexpr uint32_t kDefaultBlock = 256;
  static constexpr uint32_t kMaxBlock = uint32_t{1} << 24;
  // REQUIRES: 1 <= block <= kMaxBlock (Chain::Parse checks it).
  explicit Int8Quantizer(uint32_t block = kDefaultBlock) : block_(block) {}
  std::string name() const override { return "int8:" + std::to_string(block_); }
  uint32_t block() const { return block_; }
  uint64_t EncodedBytes(uint64_t count) const override {
    return Int8CodesOffset(count, block_) + count;
  }
  Status Encode(std::span<const float> values, uint64_t seed, uint8_t* out) const override;
  Status Decode(std::span<const uint8_t> in, std::span<float> out) const override;

 private:
  uint32_t block_;
};

}  // namespace fedmesh::codec
