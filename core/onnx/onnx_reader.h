// Reading ONNX models (what torch.onnx.export writes) into a graph::Graph. The ONNX
// protobuf schema comes from Debian's libonnx-dev; this file and onnx_writer.cc are the
// only places that include its generated types. Every size a file claims is checked
// against the bytes it holds and against ReaderLimits before anything is allocated for
// it; external tensor data, other op domains, and dtypes other than float32 / int64 /
// int32 / bool are refused with a sentence naming the tensor, node or attribute.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/graph/graph.h"
#include "core/status.h"

namespace fedmesh::onnx {

struct ReaderLimits {
  size_t max_file_bytes = size_t{1} << 30;  // 1 GiB; protobuf itself stops at 2 GiB
  int64_t min_opset = 9;                    // default-domain opsets accepted
  int64_t max_opset = 17;
  graph::GraphLimits graph;
  // Float initializers of rank >= 1 that hold no data at all become zeros of their dims
  // (an architecture from SerializeArchitecture); the weights arrive separately. Their
  // total is bounded by max_absent_elements. Default: false, missing data is an error.
  bool absent_weights_as_zeros = false;
  int64_t max_absent_elements = int64_t{1} << 28;  // 1 GiB of float32
};

// Parses a serialized ModelProto. The dim 0 of every graph input becomes the batch
// dimension (-1), whatever the file declares, since fedmesh feeds batches of any size.
Result<graph::Graph> ParseOnnx(std::string_view bytes, const ReaderLimits& limits = {});
// Reads and parses a file; errors name the path.
Result<graph::Graph> ReadOnnxFile(const std::string& path, const ReaderLimits& limits = {});

// Reads one serialized TensorProto (the format of ONNX's test_data_set_*/input_0.pb files,
// which tests/fixtures/onnx uses for PyTorch's reference values).
Result<graph::Tensor> ReadOnnxTensorFile(const std::string& path, const ReaderLimits& limits = {});

}  // namespace fedmesh::onnx
