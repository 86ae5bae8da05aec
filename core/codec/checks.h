// Finite-value checks shared by the codec stages: a branch-free scan the compiler
// vectorises, and the slow path that names the first bad value for the error message.
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fedmesh::codec {

// True when no value is NaN or infinite.
inline bool AllFinite(std::span<const float> values) {
  uint32_t bad = 0;
  for (float v : values) {
    bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(v) & 0x7F800000u) == 0x7F800000u);
  }
  return bad == 0;
}

// The error for the first non-finite value, `value` at `index`, of what `stage` encodes.
// Also used by encoders that find the index elsewhere (core/cuda/cuda_codecs.h).
inline Status NonFiniteError(std::string_view stage, uint64_t index, float value) {
  return Status::InvalidArgument(std::string(stage) + " cannot encode value " +
                                 (std::isnan(value) ? "NaN" : "infinity") + " at index " +
                                 std::to_string(index) + "; an update must be finite");
}

// InvalidArgument naming the first non-finite value of `values` (`stage` encodes them), or
// OK when there is none.
inline Status CheckFinite(std::span<const float> values, std::string_view stage) {
  if (AllFinite(values)) return Status::OK();
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return NonFiniteError(stage, i, values[i]);
  }
  return Status::OK();
}

}  // namespace fedmesh::codec
