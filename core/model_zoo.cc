#include "core/model_zoo.h"

#include <algorithm>
#include <cstdio>

#include "core/builtin_graph.h"
#include "core/graph/graph.h"
#include "core/layers/activations.h"
#include "core/layers/conv2d.h"
#include "core/layers/dense.h"
#include "core/layers/max_pool2d.h"
#include "core/onnx/onnx_reader.h"

namespace fedmesh {

const std::vector<std::string>& KnownModelNames() {
  static const std::vector<std::string> kNames = {"logreg", "mlp", "cnn"};
  return kNames;
}

bool IsOnnxModelName(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".onnx") == 0;
}

Status CheckOnnxModelFile(const std::string& path) {
  if (path.empty()) return Status::OK();
  if (!IsOnnxModelName(path))
    return Status::InvalidArgument("'" + path + "' does not end in .onnx");
  auto backend = MakeCpuBackend(1);
  ModelSpec spec;
  spec.name = path;
  return BuildModel(spec, backend.get()).status();
}

Status ValidateModelName(const std::string& name) {
  if (IsOnnxModelName(name)) return Status::OK();
  for (const auto& n : KnownModelNames()) {
    if (n == name) return Status::OK();
  }
  std::string known;
  for (const auto& n : KnownModelNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown model '" + name + "'; known models: " + known +
                                 ", or the path of an .onnx file");
}

Result<BuiltinEngine> ParseBuiltinEngine(const std::string& text) {
  if (text == "auto") return BuiltinEngine::kAuto;
  if (text == "graph") return BuiltinEngine::kGraph;
  if (text == "layers") return BuiltinEngine::kLayers;
  return Status::InvalidArgument("engine '" + text + "' is not one of auto, graph, layers");
}

double BuiltinModelParams(const ModelSpec& spec) {
  double features = 1;
  for (int d : spec.input_shape) features *= std::max(d, 0);
  const double k = std::max(spec.num_classes, 0);
  double params = 0;
  if (spec.name == "logreg") {
    params = features * k + k;
  } else if (spec.name == "mlp") {
    double in = features;
    for (int h : spec.hidden) {
      params += in * std::max(h, 0) + std::max(h, 0);
      in = std::max(h, 0);
    }
    params += in * k + k;
  } else if (spec.name == "cnn" && spec.input_shape.size() == 3) {
    const double h = spec.input_shape[0] / 4, w = spec.input_shape[1] / 4, c = spec.input_shape[2];
    params = (c * 25 * 32 + 32) + (32 * 25 * 64 + 64) + (h * w * 64 * 512 + 512) + (512 * k + k);
  }
  return params;
}

Status CheckModelSize(const ModelSpec& spec) {
  if (IsOnnxModelName(spec.name)) return Status::OK();
  const double params = BuiltinModelParams(spec);
  if (params <= static_cast<double>(kMaxBuiltinModelParams)) return Status::OK();
  char count[32];
  std::snprintf(count, sizeof(count), "%.3g", params);
  return Status::InvalidArgument(spec.name + " over input " + ShapeToString(spec.input_shape) + " with " +
                                 std::to_string(spec.num_classes) + " outputs would have " + count +
                                 " parameters; a built-in model has at most " +
                                 std::to_string(kMaxBuiltinModelParams) +
                                 " (1 GiB of float32): use a smaller input shape (resize images), fewer "
                                 "classes or hidden units");
}

Result<std::unique_ptr<Model>> BuildModel(const ModelSpec& spec, Backend* backend,
                                          const BuildModelOptions& options) {
  FM_RETURN_IF_ERROR(ValidateModelName(spec.name));
  if (IsOnnxModelName(spec.name)) {
    auto g = onnx::ReadOnnxFile(spec.name);
    if (!g.ok()) return Status::InvalidArgument(g.status().message());
    auto m = Model::CreateFromGraph(spec.name, backend, std::move(*g));
    if (!m.ok()) return Status::InvalidArgument(spec.name + ": " + m.status().message());
    return m;
  }
  // One output is a binary logit (bce_with_logits) or a regression target; the loss checks
  // that the count fits it (Model::SetLoss).
  if (spec.num_classes < 1) {
    return Status::InvalidArgument("a model needs at least one output (num_classes), got " +
                                   std::to_string(spec.num_classes));
  }
  if (!(spec.dropout >= 0.0f && spec.dropout < 1.0f)) {
    return Status::InvalidArgument("dropout must be in [0, 1), got " + std::to_string(spec.dropout));
  }
  FM_RETURN_IF_ERROR(CheckModelSize(spec));
  std::vector<std::unique_ptr<Layer>> L;
  if (spec.name == "logreg") {
    L.push_back(std::make_unique<Flatten>());
    L.push_back(std::make_unique<Dense>(spec.num_classes));
  } else if (spec.name == "mlp") {
    if (spec.hidden.empty()) return Status::InvalidArgument("mlp needs at least one hidden layer size");
    L.push_back(std::make_unique<Flatten>());
    for (int h : spec.hidden) {
      if (h <= 0) return Status::InvalidArgument("mlp hidden sizes must be positive, got " + std::to_string(h));
      L.push_back(std::make_unique<Dense>(h));
      L.push_back(std::make_unique<Relu>());
      if (spec.dropout > 0.0f) L.push_back(std::make_unique<Dropout>(spec.dropout));
    }
    L.push_back(std::make_unique<Dense>(spec.num_classes));
  } else if (spec.name == "cnn") {
    if (spec.input_shape.size() != 3 || spec.input_shape[0] < 4 || spec.input_shape[1] < 4) {
      return Status::InvalidArgument("cnn needs image input (HxWxC, at least 4x4), got " +
                                     ShapeToString(spec.input_shape) + ": use mlp or logreg for tabular data");
    }
    // conv5x5x32 - pool - conv5x5x64 - pool - fc512 - fc10 ("same" padding keeps 28->14->7).
    L.push_back(std::make_unique<Conv2d>(Conv2dOptions{32, 5, 1, 2}));
    L.push_back(std::make_unique<Relu>());
    L.push_back(std::make_unique<MaxPool2d>(2));
    L.push_back(std::make_unique<Conv2d>(Conv2dOptions{64, 5, 1, 2}));
    L.push_back(std::make_unique<Relu>());
    L.push_back(std::make_unique<MaxPool2d>(2));
    L.push_back(std::make_unique<Flatten>());
    L.push_back(std::make_unique<Dense>(512));
    L.push_back(std::make_unique<Relu>());
    if (spec.dropout > 0.0f) L.push_back(std::make_unique<Dropout>(spec.dropout));
    L.push_back(std::make_unique<Dense>(spec.num_classes));
  } else {
    return ValidateModelName(spec.name);
  }
  const bool on_graph = options.builtin_engine == BuiltinEngine::kGraph ||
                        (options.builtin_engine == BuiltinEngine::kAuto && backend->host_memory());
  if (!on_graph) return Model::Create(spec.name, backend, spec.input_shape, spec.num_classes, std::move(L));
  return Model::CreateBuiltinOnGraph(spec.name, backend, spec.input_shape, spec.num_classes,
                                     std::move(L), [&](size_t num_params) {
                                       return BuiltinTrainingGraph(spec, std::vector<float>(num_params, 0.0f));
                                     });
}

}  // namespace fedmesh
