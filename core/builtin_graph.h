// The built-in models (logreg, mlp, cnn) as graphs in ONNX's layout, with a trained
// built-in model's flat parameters moved into the graph's tensors: the layer code computes
// images as NHWC with OHWI convolution weights, ONNX as NCHW / OIHW, so convolution weights
// are transposed and the columns of the first Dense after a Flatten permuted from HWC to
// CHW order. The result is an inference graph (Dropout left out unless asked for) whose input is [N, C, H, W]
// for images and [N, F] for tabular data, and whose outputs equal the built-in model's.
// Also: a one-line text form of a ModelSpec, how the aggregator's store remembers which
// built-in model its flat vectors belong to.
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <string>

#include "core/graph/graph.h"
#include "core/model_zoo.h"
#include "core/status.h"

namespace fedmesh {

struct BuiltinGraphOptions {
  // true: Dropout nodes (ratio spec.dropout) where the built-in model has Dropout layers,
  // for a graph that is trained further (the aggregator trains a built-in model as a graph
  // when it puts the federation's input normalization in front). Default false: an
  // inference graph, as exported.
  bool training_dropout = false;
};

// REQUIRES: params.size() is the built-in model's parameter count (checked: an error
// otherwise).
Result<graph::Graph> BuiltinModelGraph(const ModelSpec& spec, std::span<const float> params,
                                       const BuiltinGraphOptions& options = {});

// The built-in model as the graph fedmesh trains it on (BuildModel's BuiltinEngine::kGraph):
// the layer code's layout throughout, so its flat vector is the layer model's, element for
// element. Its input is the dataset's sample as stored ([N, H, W, C] images, [N, F] tables);
// convolutions read NCHW through Transpose nodes on their input and on their OHWI weight
// initializers, and fc1 reads the last pooled map flattened in HWC order, as the layer code
// does. Dropout nodes where the model has Dropout layers. Not an export format: exports
// use BuiltinModelGraph.
// REQUIRES: as BuiltinModelGraph.
Result<graph::Graph> BuiltinTrainingGraph(const ModelSpec& spec, std::span<const float> params);

// "name=mlp;input=28,28,1;classes=10;hidden=256;dropout=0", and back.
std::string SpecToText(const ModelSpec& spec);
Result<ModelSpec> SpecFromText(const std::string& text);

}  // namespace fedmesh
