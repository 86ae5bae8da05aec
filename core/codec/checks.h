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

// InvalidArgument naming the first non-finite value of `values` (`stage` encodes them), or
// OK when there is none.
inline Status CheckFinite(std::span<const float> values, std::string_view stage) {
  if (AllFinite(values)) return Status::OK();
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return Status::InvalidArgument(std::string(stage) + " cannot encode value " +
                                     (std::isnan(values[i]) ? "NaN" : "infinity") +
                                     " at index " + std::to_string(i) +
                                     "; an update must be finite");
    }
  }
  return Status::OK();
}

}  // namespace fedmesh::codec
