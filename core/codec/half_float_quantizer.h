// 16-bit float quantizers, 2 bytes per value, round to nearest even:
//   fp16  IEEE binary16: relative error <= 2^-11 for |x| in [2^-14, 65504], absolute error
//         <= 2^-25 below; values beyond 65504 (which would round to infinity) are refused.
//   bf16  bfloat16, float32's exponent range: relative error <= 2^-8; values that would
//         round to infinity (within 2^-8 of FLT_MAX) are refused.
// Decoding rejects infinity and NaN bit patterns. Uses F16C / AVX2 when compiled for them.
// Thread-safety: immutable.
#pragma once

#include "core/codec/stage.h"

namespace fedmesh::codec {

class Fp16Quantizer final : public Quantizer {
 public:
  std::string name() const override { return "fp16"; }
  uint64_t EncodedBytes(uint64_t count) const override { return 2 * count; }
  Status Encode(std::span<const float> values, uint64_t seed, uint8_t* out) const override;
  Status Decode(std::span<const uint8_t> in, std::span<float> out) const override;
};

class Bf16Quantizer final : public Quantizer {
 public:
  std::string name() const override { return "bf16"; }
  uint64_t EncodedBytes(uint64_t count) const override { return 2 * count; }
  Status Encode(std::span<const float> values, uint64_t seed, uint8_t* out) const override;
  Status Decode(std::span<const uint8_t> in, std::span<float> out) const override;
};

}  // namespace fedmesh::codec
