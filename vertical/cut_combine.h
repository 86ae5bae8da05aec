// How the label party joins the bottom models' outputs into the top model's input
// ([split] combine): side by side (concat: the top takes the sum of their widths, the label
// party's own first, then each feature party's in `peers` order, and each party gets back
// the gradient of its own columns) or added (sum: every bottom gives the same width, the
// top takes that width, and every party gets back the whole gradient, the same for all).
// Sum keeps the top's input as narrow as one bottom's, so its size does not grow with the
// number of parties. It changes the model, not what crosses the cut: the label party still
// receives each party's activations apart, and with sum every feature party receives the
// gradient the label party's own bottom learns from too.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fedmesh::vertical {

enum class CutCombine : uint8_t { kConcat = 0, kSum = 1 };

inline const char* CutCombineName(CutCombine c) { return c == CutCombine::kSum ? "sum" : "concat"; }

// "concat" or "sum"; InvalidArgument otherwise.
inline Result<CutCombine> CutCombineOf(std::string_view name) {
  if (name == "concat") return CutCombine::kConcat;
  if (name == "sum") return CutCombine::kSum;
  return Status::InvalidArgument("combine \"" + std::string(name) + "\": use concat or sum");
}

}  // namespace fedmesh::vertical
