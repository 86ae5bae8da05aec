#include "node/local_training.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>

#include "core/data/impute.h"
#include "core/json_line.h"
#include "core/model_export.h"

namespace fedmesh {

Status ValidateLocalTrainingOptions(const LocalTrainingOptions& o) {
  if (o.epochs < 1) return Status::InvalidArgument("epochs must be >= 1, got " + std::to_string(o.epochs));
  if (o.threads < 0) return Status::InvalidArgument("threads must be >= 0 (0 = all cores), got " + std::to_string(o.threads));
  if (o.partition.num_partitions < 1) {
    return Status::InvalidArgument("num-partitions must be >= 1, got " +
                                   std::to_string(o.partition.num_partitions));
  }
  if (o.index < 0 || o.index >= o.partition.num_partitions) {
    return Status::InvalidArgument("index " + std::to_string(o.index) + " is outside [0, " +
                                   std::to_string(o.partition.num_partitions) +
                                   "): num-partitions must be greater than index");
  }
  // Checked before any data loads, so a typo fails at once.
  FM_RETURN_IF_ERROR(ValidateModelName(o.model.name));
  if (!o.save_model_path.empty() && !(o.save_model_path.ends_with(".onnx") ||
                                      o.save_model_path.ends_with(".npz")))
    return Status::InvalidArgument("--save-model '" + o.save_model_path +
                                   "': the file must end in .onnx or .npz");
  FM_RETURN_IF_ERROR(ValidateRecordPrivacy(o.privacy));
  return ValidateTrainerOptions(o.trainer);
}

namespace {

// OK while the loss and every parameter are finite; otherwise why the run stops.
Status CheckTrainingFinite(const Model& model, double mean_loss, int epoch, double lr) {
  const std::vector<float> params = model.GetParams();
  const auto bad = std::find_if(params.begin(), params.end(), [](float v) { return !std::isfinite(v); });
  if (std::isfinite(mean_loss) && bad == params.end()) return Status::OK();
  char lr_text[32];
  std::snprintf(lr_text, sizeof(lr_text), "%g", lr);
  std::string what = bad != params.end()
                         ? "parameter " + std::to_string(bad - params.begin()) + " of " + std::to_string(params.size()) +
                               " is " + (std::isnan(*bad) ? "NaN" : "infinite")
                         : "the mean training loss is " + std::string(std::isnan(mean_loss) ? "NaN" : "infinite");
  return Status::FailedPrecondition("training diverged in epoch " + std::to_string(epoch) + ": " + what +
                                    "; lower the learning rate (lr " + lr_text +
                                    "), or look for extreme values in the data or the initial weights; no "
                                    "model is written");
}

}  // namespace

Result<LocalTrainingReport> RunLocalTraining(
    const LocalTrainingOptions& options, Env* env,
    const std::function<void(const std::string&)>& progress) {
  FM_RETURN_IF_ERROR(ValidateLocalTrainingOptions(options));

  FM_ASSIGN_OR_RETURN(SiteData data, LoadSiteData(options.data));
  Dataset full = std::move(data.train);
  Dataset test = std::move(data.test);
  if (test.size() == 0) {
    return Status::InvalidArgument("data '" + options.data.train + "' has no test split of its "
                                   "own: give one with --test-data, or hold out a part of it "
                                   "with --test-fraction");
  }
  FM_RETURN_IF_ERROR(ValidatePartitionSpec(options.partition, full.size()));
  FM_ASSIGN_OR_RETURN(auto indices, PartitionFor(full.labels, full.num_classes, options.partition,
                                                 options.index));
  Dataset train = full.Subset(indices);
  full = Dataset();  // this node keeps only its own share
  if (HasMissing(train) || HasMissing(test)) {
    // Alone, the only means this site has are its own training rows'.
    auto means = ColumnMeans(train);
    if (!means.ok()) return means.status().WithContext(options.data.train);
    FM_ASSIGN_OR_RETURN(size_t n, ImputeMissing(train, *means));
    FM_ASSIGN_OR_RETURN(size_t m, ImputeMissing(test, *means));
    if (progress) {
      progress("imputed " + std::to_string(n + m) + " missing cells with this site's training means");
    }
  }

  ModelSpec spec = options.model;
  spec.input_shape = train.sample_shape;
  spec.num_classes = std::max(train.num_classes, test.num_classes);
  FM_ASSIGN_OR_RETURN(auto backend, MakeBackend(options.device, options.threads));
  FM_ASSIGN_OR_RETURN(auto model, BuildModel(spec, backend.get(), {options.engine}));
  model->InitParams(options.seed);
  FM_RETURN_IF_ERROR(model->SetLoss(options.trainer.loss));
  FM_RETURN_IF_ERROR(model->CheckCompatible(train));
  FM_RETURN_IF_ERROR(model->CheckCompatible(test));

  std::ofstream metrics;
  if (!options.metrics_path.empty()) {
    metrics.open(options.metrics_path, std::ios::out | std::ios::trunc);
    if (!metrics) {
      return Status::IOError("cannot open metrics file '" + options.metrics_path + "' for writing");
    }
  }

  TrainerOptions trainer_options = options.trainer;
  std::optional<RecordPrivacyLedger> ledger;
  if (options.privacy.enabled()) {
    FM_ASSIGN_OR_RETURN(ledger, RecordPrivacyLedger::Create(options.privacy));
    FM_ASSIGN_OR_RETURN(trainer_options.dp, ledger->TrainerOptions());
    FM_RETURN_IF_ERROR(model->SupportsPerExampleClipping());
  }
  Trainer trainer(model.get(), trainer_options, env);
  if (progress) {
    progress("model " + model->name() + " (" + std::to_string(model->num_params()) +
             " parameters) on " + backend->name() + " with " + std::to_string(backend->threads()) +
             " thread(s); partition " + std::to_string(options.index) + "/" +
             std::to_string(options.partition.num_partitions) + " (" + options.partition.scheme +
             ") = " + std::to_string(train.size()) + " samples; test " +
             std::to_string(test.size()) + " samples");
  }

  LocalTrainingReport report;
  report.train_samples = static_cast<int64_t>(train.size());
  int64_t total_samples = 0;
  // DP-SGD's sampling rate and steps per epoch (core/trainer.h, DpSgdOptions).
  const DpSgdEpoch dp_epoch = DpSgdEpochOf(train.size(), options.trainer.batch_size);
  const double dp_q = dp_epoch.sampling_rate;
  const int64_t dp_epoch_steps = dp_epoch.steps;
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    if (ledger) {
      if (Status budget = ledger->CheckBudget(dp_q, dp_epoch_steps); !budget.ok()) {
        report.stopped_by_budget = "epoch " + std::to_string(epoch) + " not started: " + budget.message();
        if (progress) progress(report.stopped_by_budget);
        break;
      }
    }
    FM_ASSIGN_OR_RETURN(EpochStats es, trainer.TrainEpoch(train));
    if (ledger) {
      FM_RETURN_IF_ERROR(ledger->Spend(es.dp_sampling_rate, es.dp_steps));
      report.epsilon = ledger->epsilon();
      report.dp_steps = ledger->steps();
    }
    FM_ASSIGN_OR_RETURN(EvalStats ev, trainer.Evaluate(test));
    total_samples += es.samples;
    report.train_seconds += es.seconds;
    report.epochs = epoch;
    report.test_accuracy = ev.accuracy;
    report.test_loss = ev.loss;
    report.samples_per_s = report.train_seconds > 0 ? total_samples / report.train_seconds : 0.0;
    if (progress) {
      char line[256];
      std::snprintf(line, sizeof(line),
                    "epoch %d/%d  train_loss %.4f  train_acc %.4f  test_loss %.4f  test_acc %.4f  "
                    "%.0f samples/s  %.1fs",
                    epoch, options.epochs, es.mean_loss, es.train_accuracy, ev.loss, ev.accuracy,
                    es.samples_per_s, es.seconds);
      std::string extra;
      for (const auto& [name, value] : ev.metrics) {
        if (name == "accuracy") continue;
        char item[64];
        std::snprintf(item, sizeof(item), "  test_%s %.4f", name.c_str(), value);
        extra += item;
      }
      if (ledger) {
        char item[96];
        std::snprintf(item, sizeof(item), "  epsilon %.4f (delta %g, %lld dp-sgd steps)",
                      report.epsilon, options.privacy.delta, static_cast<long long>(report.dp_steps));
        extra += item;
      }
      progress(std::string(line) + extra);
    }
    if (metrics.is_open()) {
      JsonLine j;
      j.Add("node", options.node_id)
          .Add("model", model->name())
          .Add("epoch", epoch)
          .Add("epochs", epoch)
          .Add("train_loss", es.mean_loss)
          .Add("train_accuracy", es.train_accuracy)
          .Add("test_loss", ev.loss)
          .Add("test_accuracy", ev.accuracy)
          .Add("samples_per_s", report.samples_per_s)
          .Add("epoch_samples_per_s", es.samples_per_s)
          .Add("train_samples", report.train_samples)
          .Add("seconds", report.train_seconds);
      for (const auto& [name, value] : ev.metrics)
        if (name != "accuracy") j.Add("test_" + name, value);  // test_accuracy is above
      if (ledger) {
        j.Add("epsilon", report.epsilon).Add("delta", options.privacy.delta).Add("dp_steps", report.dp_steps);
      }
      metrics << j.str() << '\n';
      metrics.flush();
      if (!metrics) return Status::IOError("writing metrics file '" + options.metrics_path + "' failed");
    }
    // A diverged run stops here: more epochs cannot bring it back, and its model must not
    // be written (nothing could load it: every reader refuses non-finite weights).
    FM_RETURN_IF_ERROR(CheckTrainingFinite(*model, es.mean_loss, epoch, options.trainer.sgd.lr));
  }
  if (!options.save_model_path.empty()) {
    FM_RETURN_IF_ERROR(SaveModel(*model, options.save_model_path, &spec));
    if (progress) progress("model written to " + options.save_model_path);
  }
  return report;
}

}  // namespace fedmesh
