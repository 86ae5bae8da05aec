// Writing a graph::Graph as an ONNX ModelProto (opset = graph.opset, weights as
// initializers in raw little-endian form, -1 dims as the symbolic dim "N"), so that
// onnxruntime, PyTorch or any ONNX consumer can run what fedmesh trained.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "core/graph/graph.h"
#include "core/status.h"

namespace fedmesh::onnx {

// The serialized ModelProto. Fails only on a graph too large for protobuf (2 GiB).
Result<std::string> SerializeOnnx(const graph::Graph& g);
// The architecture alone: SerializeOnnx of `g` with the values of every float
// initializer of rank >= 1 (the weights and state) left out, their names and dims kept.
// What a FitTask carries so a site needs no model file; read back with
// ReaderLimits::absent_weights_as_zeros.
Result<std::string> SerializeArchitecture(const graph::Graph& g);
// SerializeOnnx written to `path` (replaced atomically: written beside it, then renamed).
Status WriteOnnxFile(const graph::Graph& g, const std::string& path);

}  // namespace fedmesh::onnx
