#include "core/model_export.h"

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

Status SaveModel(const Model& model, const std::string& path) {
  const graph::GraphModel* g = model.graph_model();
  if (EndsWith(path, ".onnx")) {
    if (!g)
      return Status::InvalidArgument(path + ": the built-in model '" + model.name() +
                                     "' has no ONNX form; save it as .npz, or train an ONNX model");
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
