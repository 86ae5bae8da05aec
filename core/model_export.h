// Writing a trained model out of fedmesh: as ONNX (opset 17, weights as initializers,
// BatchNorm in inference form, batch dimension dynamic) that onnxruntime or PyTorch run
// with the outputs fedmesh computes, or as .npz of named float32 arrays (the graph's
// initializer names: parameters, then state such as BatchNorm running statistics).
// Thread-safety: reads a model no other thread is changing.
#pragma once

#include <string>

#include "core/model.h"
#include "core/status.h"

namespace fedmesh {

// Writes `model` to `path`, in the format its extension names (.onnx or .npz). Built-in
// (layer) models are written as .npz with one array "params" (the flat vector); they
// have no ONNX form yet.
Status SaveModel(const Model& model, const std::string& path);

}  // namespace fedmesh
