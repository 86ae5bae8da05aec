#include "node/site_model.h"

#include <algorithm>
#include <string>

#include "core/data/data_source.h"
#include "core/data/impute.h"
#include "core/data/partition.h"
#include "core/model_zoo.h"

namespace fedmesh {

Result<SiteModel> LoadSiteModel(const LocalTrainingOptions& t, bool with_test,
                                bool impute_locally, bool own_loss) {
  SiteModel site;
  // The held-out rows of a source without a test split are never trained on, whether or
  // not this mode evaluates on them.
  const bool own_test = !t.data.test.empty() || t.data.train == "fashion-mnist";
  Dataset full;
  if (own_test && !with_test) {
    FM_ASSIGN_OR_RETURN(full, LoadDataSource(t.data, DataSplit::kTrain));
  } else {
    FM_ASSIGN_OR_RETURN(SiteData data, LoadSiteData(t.data));
    full = std::move(data.train);
    if (with_test) site.test = std::move(data.test);
  }
  FM_RETURN_IF_ERROR(ValidatePartitionSpec(t.partition, full.size()));
  FM_ASSIGN_OR_RETURN(auto indices,
                      PartitionFor(full.labels, full.num_classes, t.partition, t.index));
  site.train = full.Subset(indices);
  full = Dataset();
  if (site.train.size() == 0) {
    return Status::FailedPrecondition("partition " + std::to_string(t.index) + " of " +
                                      std::to_string(t.partition.num_partitions) +
                                      " holds no samples; use fewer partitions");
  }
  if (impute_locally && (HasMissing(site.train) || HasMissing(site.test))) {
    auto means = ColumnMeans(site.train);
    if (!means.ok()) return means.status().WithContext(t.data.train);
    FM_RETURN_IF_ERROR(ImputeMissing(site.train, *means).status());
    FM_RETURN_IF_ERROR(ImputeMissing(site.test, *means).status());
  }
  // Every site builds the same architecture: num_classes comes from the dataset (Subset
  // keeps the full set's count; csv sites should set [data] num_classes explicitly).
  ModelSpec spec = t.model;
  spec.input_shape = site.train.sample_shape;
  spec.num_classes = std::max(site.train.num_classes, site.test.num_classes);
  FM_ASSIGN_OR_RETURN(site.backend, MakeBackend(t.device, t.threads));
  FM_ASSIGN_OR_RETURN(site.model, BuildModel(spec, site.backend.get(), {t.engine}));
  site.model->InitParams(t.seed);
  if (own_loss) FM_RETURN_IF_ERROR(site.model->SetLoss(t.trainer.loss));
  FM_RETURN_IF_ERROR(site.model->CheckCompatible(site.train));
  if (site.test.size() > 0) FM_RETURN_IF_ERROR(site.model->CheckCompatible(site.test));
  return site;
}

Result<SiteModel> LoadSiteModelWithoutData(const LocalTrainingOptions& t) {
  if (!IsOnnxModelName(t.model.name)) {
    return Status::FailedPrecondition(
        "with an external trainer the model must be an ONNX file ([model] onnx), the trainer's "
        "module exported (docs/external-trainer.md); '" + t.model.name + "' is a built-in model");
  }
  SiteModel site;
  FM_ASSIGN_OR_RETURN(site.backend, MakeBackend(t.device, t.threads));
  FM_ASSIGN_OR_RETURN(site.model, BuildModel(t.model, site.backend.get()));
  site.model->InitParams(t.seed);
  return site;
}

}  // namespace fedmesh
