// Small builders shared by the graph tests: random float initializers, int64 constants and
// one-kind attributes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/graph/graph.h"
#include "core/rng.h"

namespace fedmesh::graph {

// A float32 tensor `name` of `dims`, uniform in [lo, hi).
inline Tensor F(const std::string& name, Dims dims, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t{name, DType::kFloat32, dims, {}, {}};
  for (int64_t i = 0; i < NumElements(dims); ++i) t.f.push_back(static_cast<float>(rng.Uniform(lo, hi)));
  return t;
}
// An int64 tensor (shapes, axes, indices).
inline Tensor I(const std::string& name, Dims dims, std::vector<int64_t> v) {
  return Tensor{name, DType::kInt64, dims, {}, std::move(v)};
}
inline Attribute Int(int64_t v) { return Attribute::OfInt(v); }
inline Attribute Ints(std::vector<int64_t> v) { return Attribute::OfInts(std::move(v)); }
inline Attribute Flt(float v) { return Attribute::OfFloat(v); }
inline Attribute Str(std::string v) { return Attribute::OfString(std::move(v)); }

}  // namespace fedmesh::graph
