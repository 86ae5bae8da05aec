// Federated input normalization baked into a model graph ([data] normalize = "federated",
// docs/data.md): x' = (Where(IsNaN(x), mean, x) - mean) / std on the model's input, as two
// Constant nodes, IsNaN, Where, Sub and Div in front of everything else. A missing cell
// (NaN) takes the federation's mean and so becomes 0. Every site scales its raw rows with
// the federation's constants, and the exported ONNX takes raw rows (or images), missing
// cells included. The nodes' names start with kInputNormalizationPrefix;
// RemoveInputNormalization takes them out again, so a site that pinned the model's hash
// ([model] expect_sha256) can recognise its model with the federation's normalization in
// front.
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <string_view>

#include "core/graph/graph.h"
#include "core/status.h"

namespace fedmesh::graph {

inline constexpr std::string_view kInputNormalizationPrefix = "fedmesh_input_norm_";

// `g` with x' = (x - mean) / stddev on input 0, which must be a float tensor [batch,
// features] with features == mean.size() == stddev.size(), or images [batch, channels,
// height, width] with one mean and stddev per channel (constants [channels, 1, 1], as
// torchvision's Normalize). A stddev of 0 (a constant feature) divides by 1. InvalidArgument for another input shape, sizes that differ,
// non-finite values, or a graph that already has the normalization. The result is
// Finalize()d.
Result<Graph> AddInputNormalization(const Graph& g, std::span<const double> mean,
                                    std::span<const double> stddev);

// `g` without the nodes AddInputNormalization put in; `g` itself when it has none.
// Finalize()d.
Result<Graph> RemoveInputNormalization(const Graph& g);

// Whether `g` has them.
bool HasInputNormalization(const Graph& g);

}  // namespace fedmesh::graph
