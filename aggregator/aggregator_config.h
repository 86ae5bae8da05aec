// AggregatorConfig: what `fedmesh-aggregator --config agg.toml` reads: the federation, the
// aggregator's socket, key, allowlist, store and metrics, the round engine's settings
// (RoundEngineOptions), the strategy, the initial model and the evaluation data. The schema
// (AggregatorConfigSchema) is the single source of the keys; docs/config.md is rendered
// from it. Thread-safety: pure functions returning values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aggregator/round_engine.h"
#include "aggregator/strategy.h"
#include "core/loss.h"
#include "core/model_zoo.h"
#include "core/status.h"
#include "core/wire/payload_digest.h"
#include "config/config_schema.h"

namespace fedmesh {

struct AggregatorConfig {
  std::string config_path;  // the file loaded; empty when none
  std::string federation_id;  // [federation] id; also rounds.federation_id
  // [aggregator]
  std::string listen;        // ZeroMQ endpoint to bind, e.g. tcp://*:5555
  std::string key_path;      // the aggregator's long-term key pair
  std::string allow_dir;     // enrolled node public keys, one file each
  std::string db_path;       // the aggregator's SQLite store
  std::string metrics_path;  // per-round JSON lines; empty = none
  // [metrics] listen: HOST:PORT of the Prometheus endpoint (aggregator/aggregator_metrics.h);
  // empty (the default) = none.
  std::string metrics_listen;
  // [admin]: the admin channel's endpoint (empty = none) and its key directories.
  std::string admin_listen;
  std::string admin_dir;
  std::string observer_dir;
  // [status_page]: HOST:PORT of the status page (empty = none) and its token file.
  std::string status_listen;
  std::string status_token_file;
  // Bytes all nodes' partial uploads may hold together; 0 = (clients_per_round + 2) x the
  // largest update the model allows (aggregator/upload_limits.h).
  uint64_t max_pending_upload_bytes = 0;
  // [aggregator] payload_digest: the digest on the payloads the aggregator sends.
  wire::DigestKind payload_digest = wire::DigestKind::kBlake3;
  double upload_idle_timeout_s = 60.0;  // a partial upload idle this long is dropped
  // [storage] keep_models: model versions kept (AggregatorStore::PruneModels after every
  // round: the newest this many, the best and the latest). Default 0: keep all.
  uint64_t keep_models = 0;
  // [rounds], [train], [aggregator] id/heartbeat_ms, plus federation_id.
  RoundEngineOptions rounds;
  // [rounds] strategy / prox_mu
  std::string strategy = "fedavg";
  StrategyOptions strategy_options;
  // [train] loss, class_weights, pos_weight (also in rounds, as sent to nodes): the loss
  // the global model is evaluated with.
  LossOptions loss;
  // [model]: name (or onnx), input_shape, num_classes. The model alone fixes its input and
  // output shapes; the [eval] dataset must fit it.
  ModelSpec model;
  uint64_t model_seed = 0;
  // [eval]
  std::string eval_dataset;  // data source of the held-out set; empty = no evaluation
  std::string eval_label_column = "label";  // csv eval data: the label column
  // [stats] report: the federated statistics report (JSON; PNG beside it)
  std::string stats_report = "stats.json";
  // [data] normalize: "none" or "federated" (input normalization from the statistics)
  std::string normalize = "none";
  // [upstream]: a regional aggregator's seat in a top aggregator's federation
  // (aggregator/upstream_link.h); endpoint empty = a top-level (or only) aggregator.
  struct Upstream {
    std::string endpoint;       // the top aggregator's endpoint
    std::string public_key;     // the top's public key file
    std::string key;            // this region's site key at the top (its name is the region's id there)
    std::string federation_id;  // the top's [federation] id; default: this one's
  } upstream;
};

const ConfigSchema& AggregatorConfigSchema();

// LoadConfig(AggregatorConfigSchema(), path, overrides), converted to AggregatorConfig and
// checked with Validate(RoundEngineOptions), MakeStrategy and ValidateModelName; every error
// names the file (or --set) and the key.
Result<AggregatorConfig> LoadAggregatorConfig(const std::string& path,
                                              const std::vector<std::string>& overrides);

}  // namespace fedmesh
