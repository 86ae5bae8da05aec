#include "core/codec/float32_quantizer.h"

#include <cstring>

#include "core/codec/checks.h"

namespace fedmesh::codec {

Status Float32Quantizer::Encode(std::span<const float> values, uint64_t /*seed*/,
                                uint8_t* out) const {
  FM_RETURN_IF_ERROR(CheckFinite(values, "float32"));
  if (!values.empty()) std::memcpy(out, values.data(), values.size_bytes());
  return Status::OK();
}

Status Float32Quantizer::Decode(std::span<const uint8_t> in, std::span<float> out) const {
  if (!out.empty()) std::memcpy(out.data(), in.data(), out.size_bytes());
  if (!AllFinite(out)) {
    for (size_t i = 0; i < out.size(); ++i) {
      if (!std::isfinite(out[i])) {
        return Status::Corruption("float32 value " + std::to_string(i) +
                                  " is not finite; payload values must be finite");
      }
    }
  }
  return Status::OK();
}

}  // namespace fedmesh::codec
