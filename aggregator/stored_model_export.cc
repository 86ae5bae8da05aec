#include "aggregator/stored_model_export.h"

#include "core/backend.h"
#include "core/builtin_graph.h"
#include "core/graph/inference_graph.h"
#include "core/model.h"
#include "core/onnx/onnx_reader.h"
#include "core/onnx/onnx_writer.h"

namespace fedmesh {

Result<ExportedModel> ExportStoredModel(AggregatorStore& store, std::optional<uint64_t> version) {
  FM_ASSIGN_OR_RETURN(std::optional<StoredGraph> stored, store.ModelGraph());
  if (!stored) {
    return Status::FailedPrecondition(store.path() +
                                      " keeps no model graph (a store from an older fedmesh)");
  }
  ExportedModel out;
  std::vector<float> params;
  if (version) {
    FM_ASSIGN_OR_RETURN(params, store.LoadModel(*version));
    out.version = *version;
  } else {
    FM_ASSIGN_OR_RETURN(std::optional<StoredModel> latest, store.LatestModel());
    if (!latest) return Status::NotFound(store.path() + " holds no model yet");
    out.version = latest->version;
    params = std::move(latest->params);
  }
  if (stored->sha256 == kBuiltinModelGraph) {
    FM_ASSIGN_OR_RETURN(ModelSpec spec, SpecFromText(stored->onnx));
    FM_ASSIGN_OR_RETURN(graph::Graph g, BuiltinModelGraph(spec, params));
    FM_ASSIGN_OR_RETURN(out.onnx, onnx::SerializeOnnx(g));
    return out;
  }
  onnx::ReaderLimits limits;
  limits.absent_weights_as_zeros = true;
  FM_ASSIGN_OR_RETURN(graph::Graph g, onnx::ParseOnnx(stored->onnx, limits));
  auto backend = MakeCpuBackend(1);
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, Model::CreateFromGraph("export", backend.get(), std::move(g)));
  FM_RETURN_IF_ERROR(m->SetParams(params));
  FM_ASSIGN_OR_RETURN(out.onnx, onnx::SerializeOnnx(graph::InferenceGraph(*m->graph_model())));
  return out;
}

Result<ExportedModel> ExportStoredModel(const std::string& db_path, std::optional<uint64_t> version) {
  FM_ASSIGN_OR_RETURN(std::unique_ptr<AggregatorStore> store, AggregatorStore::Open(db_path));
  return ExportStoredModel(*store, version);
}

}  // namespace fedmesh
