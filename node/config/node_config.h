// NodeConfig: what `fedmesh-node --config site.toml` reads: the site's identity and files,
// how to reach the aggregator, and its local training settings as LocalTrainingOptions.
// The schema (NodeConfigSchema) is the single source of the keys; docs/config.md is
// rendered from it. Thread-safety: pure functions returning values.
#pragma once

#include <string>
#include <vector>

#include "core/codec/error_feedback.h"
#include "core/status.h"
#include "node/config/config_schema.h"
#include "node/local_training.h"

namespace fedmesh {

struct NodeConfig {
  std::string config_path;  // the file loaded; empty when none
  // [federation]
  std::string federation_id;  // must equal the aggregator's [federation] id
  // [node]
  std::string node_id;   // also training.node_id
  std::string key_path;  // this site's long-term key pair
  std::string db_path;   // the node's SQLite store
  // [aggregator]
  std::string aggregator_endpoint;        // e.g. tcp://aggregator.example:5555
  std::string aggregator_public_key_path; // the aggregator's public key file
  // [data], [train], [model] and [node] metrics.
  LocalTrainingOptions training;
  // [codec]: the chain updates are encoded with when the aggregator prescribes none
  // (canonical name, e.g. "topk:0.01|int8:256|zstd:3"; "none" = raw float32), and the
  // error feedback that keeps what a lossy chain drops (core/codec/error_feedback.h).
  std::string codec_chain = "none";
  codec::ErrorFeedbackOptions error_feedback;
};

const ConfigSchema& NodeConfigSchema();

// LoadConfig(NodeConfigSchema(), path, overrides), converted to NodeConfig and checked with
// ValidateLocalTrainingOptions; every error names the file (or --set) and the key.
Result<NodeConfig> LoadNodeConfig(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace fedmesh
