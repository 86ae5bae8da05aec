// Local-only training: a site trains a model on its own partition of a dataset and
// evaluates it on the test set, with no network at all. This is what
// `fedmesh-node --local-only` runs, and the baseline federated training must beat.
// Thread-safety: RunLocalTraining is a blocking call; run one per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/data/data_source.h"
#include "core/data/partition.h"
#include "core/env.h"
#include "core/model_zoo.h"
#include "core/status.h"
#include "core/trainer.h"
#include "node/record_privacy.h"

namespace fedmesh {

struct LocalTrainingOptions {
  std::string node_id = "local";  // appears in logs and metrics
  ModelSpec model;                // "mlp" by default
  DataSourceSpec data;            // fashion-mnist by default
  PartitionSpec partition;        // iid, 1 partition (all the data) by default
  int index = 0;                  // which partition is this node's, in [0, num_partitions)
  int epochs = 1;                 // passes over the local data, >= 1
  TrainerOptions trainer;         // batch 32, lr 0.01, no momentum by default
  std::string device = "cpu";     // cpu | auto | cuda[:N]
  int threads = 0;                // compute threads; 0 = all cores
  // How a built-in model runs (core/model_zoo.h): auto = the graph executor on the CPU,
  // the layer code on a GPU.
  BuiltinEngine engine = BuiltinEngine::kAuto;
  uint64_t seed = 0;              // model init, shuffling and dropout
  std::string metrics_path;       // JSON lines, one per epoch; empty = none
  std::string save_model_path;    // .onnx | .npz written after training; empty = none
  // [privacy]: DP-SGD with this site's own ledger; an epoch that would exceed
  // epsilon_budget is not started (training stops there). Off by default.
  RecordPrivacyOptions privacy;
};

Status ValidateLocalTrainingOptions(const LocalTrainingOptions& o);

struct LocalTrainingReport {
  int epochs = 0;
  int64_t train_samples = 0;
  double test_accuracy = 0.0;
  double test_loss = 0.0;
  double samples_per_s = 0.0;  // training throughput over all epochs
  double train_seconds = 0.0;
  double epsilon = 0.0;          // DP-SGD: epsilon spent, for privacy.delta (0 when off)
  int64_t dp_steps = 0;          // DP-SGD steps composed
  std::string stopped_by_budget; // why training stopped early for the budget; empty = it did not
};

// Loads this node's partition and the test set, trains, evaluates after every epoch,
// writes one JSON line per epoch to options.metrics_path and calls `progress` with a
// human-readable line per epoch.
Result<LocalTrainingReport> RunLocalTraining(
    const LocalTrainingOptions& options, Env* env,
    const std::function<void(const std::string&)>& progress);

}  // namespace fedmesh
