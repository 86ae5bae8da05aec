// Writing a trained model out of fedmesh: as ONNX (opset 17, weights as initializers,
// BatchNorm in inference form, batch dimension dynamic) that onnxruntime or PyTorch run
// with the outputs fedmesh computes, or as .npz of named float32 arrays (the graph's
// initializer names: parameters, then state such as BatchNorm running statistics).
// Thread-safety: reads a model no other thread is changing.
#pragma once

#include <string>

#include "core/graph/graph.h"
#include "core/model.h"
#include "core/model_zoo.h"
#include "core/status.h"

namespace fedmesh {

// Writes `model` to `path`, in the format its extension names (.onnx or .npz). A built-in
// (layer) model needs the spec it was built from (with its input shape and class count):
// it is written as its graph (core/builtin_graph.h); without a spec, only as .npz with one
// array "params", the flat vector.
Status SaveModel(const Model& model, const std::string& path, const ModelSpec* spec = nullptr);
// The same for a graph: ONNX as it is, .npz as its float initializers by name.
Status SaveGraph(const graph::Graph& g, const std::string& path);

}  // namespace fedmesh
