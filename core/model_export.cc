#include "core/model_export.h"

#include "core/builtin_graph.h"
#include "core/graph/graph_model.h"
#include "core/graph/inference_graph.h"
#include "core/npz.h"
#include "core/onnx/onnx_writer.h"

namespace fedmesh {
namespace {

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

Status SaveGraph(const graph::Graph& g, const std::string& path) {
  if (EndsWith(path, ".onnx")) return onnx::WriteOnnxFile(g, path);
  if (EndsWith(path, ".npz")) {
    std::vector<NpzArray> arrays;
    for (const graph::Tensor& t : g.initializers)
      if (t.dtype == graph::DType::kFloat32 && !t.dims.empty()) arrays.push_back(t);
    return WriteNpzFile(path, arrays);
  }
  return Status::InvalidArgument(path + ": the model file must end in .onnx or .npz");
}

Status SaveModel(const Model& model, const std::string& path, const ModelSpec* spec) {
  const graph::GraphModel* g = model.graph_model();
  if (!g && spec != nullptr) {
    FM_ASSIGN_OR_RETURN(graph::Graph built, BuiltinModelGraph(*spec, model.GetParams()));
    return SaveGraph(built, path);
  }
  if (EndsWith(path, ".onnx")) {
    if (!g)
      return Status::InvalidArgument(path + ": the built-in model '" + model.name() +
                                     "' has no ONNX form without its spec; save it as .npz");
    return onnx::WriteOnnxFile(graph::InferenceGraph(*g), path);
  }
  if (EndsWith(path, ".npz")) {
    std::vector<NpzArray> arrays;
    if (g) {
      arrays = g->ParamTensors();
      for (graph::Tensor& t : g->StateTensors()) arrays.push_back(std::move(t));
    } else {
      NpzArray a;
      a.name = "params";
      a.f = model.GetParams();
      a.dims = {static_cast<int64_t>(a.f.size())};
      arrays.push_back(std::move(a));
    }
    return WriteNpzFile(path, arrays);
  }
  return Status::InvalidArgument(path + ": the model file must end in .onnx or .npz");
}

}  // namespace fedmesh
