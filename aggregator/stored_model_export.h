// A stored global model as ONNX bytes, for downloads (the status page, fedmesh-admin
// export): the graph the store keeps with the version's weights, in the inference form
// fedmesh-model export writes (BatchNorm with its running statistics, batch dimension
// dynamic). Thread-safety: opens its own connection to the store, so any thread may call it
// while the aggregator writes (SQLite serialises them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "storage/aggregator_store.h"

namespace fedmesh {

struct ExportedModel {
  uint64_t version = 0;
  std::string onnx;
};

// Model `version` (the latest when empty) of `store`. NotFound when the version is not
// stored or its weights were pruned ([storage] keep_models); FailedPrecondition for a
// store from before model graphs were kept.
Result<ExportedModel> ExportStoredModel(AggregatorStore& store, std::optional<uint64_t> version);
// The same, opening the store at `db_path` for this call.
Result<ExportedModel> ExportStoredModel(const std::string& db_path, std::optional<uint64_t> version);

}  // namespace fedmesh
