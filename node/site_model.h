// SiteModel: what every training mode of a site starts from: its partition of the data
// (loaded once; nothing of it ever leaves the node), the backend, and the model built for
// that data and initialised from the configured seed, so that every site of a federation
// builds the same architecture and, with the same seed, the same initial weights. The
// federated client and the gossip service both start here. Thread-safety: a value.
#pragma once

#include <memory>

#include "core/backend.h"
#include "core/data/dataset.h"
#include "core/model.h"
#include "core/status.h"
#include "node/local_training.h"

namespace fedmesh {

struct SiteModel {
  Dataset train;
  Dataset test;  // empty unless requested
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

// Loads partition `t.index` of t.data (without its held-out rows, core/data/data_source.h
// LoadSiteData), builds t.model on t.device and initialises it with t.seed. With
// `with_test`, also keeps the held-out data (for metrics; empty when the source has none
// and test_fraction is 0). Errors name the data source; FailedPrecondition for an empty
// partition. Missing cells ([data] missing = "impute_mean") are replaced by this
// partition's training means when `impute_locally` (gossip: there are no federation
// statistics), and left NaN otherwise (a federation's node imputes with the means the
// aggregator sends, FederatedClient). With `own_loss` the model takes t.trainer.loss
// before its data is checked against it (a one-logit model needs bce_with_logits); a
// federation's node leaves it to each task's loss.
Result<SiteModel> LoadSiteModel(const LocalTrainingOptions& t, bool with_test,
                                bool impute_locally = true, bool own_loss = true);

// The model alone, for a site whose data an external trainer holds ([train] external):
// t.model must be an ONNX file (its initializers are the initial weights); train and test
// stay empty. FailedPrecondition for a built-in model, which needs the data's shape.
Result<SiteModel> LoadSiteModelWithoutData(const LocalTrainingOptions& t);

}  // namespace fedmesh
