// Standard-normal test vectors from a seed (core/rng.h), shared by the backend tests.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace fedmesh {

inline std::vector<float> RandomVector(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

}  // namespace fedmesh
