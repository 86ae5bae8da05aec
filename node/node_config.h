// NodeConfig: what `fedmesh-node --config site.toml` reads: the site's identity and files,
// how to reach the aggregator, and its local training settings as LocalTrainingOptions.
// The schema (NodeConfigSchema) is the single source of the keys; docs/config.md is
// rendered from it. Thread-safety: pure functions returning values.
#pragma once

#include <string>
#include <vector>

#include "core/codec/error_feedback.h"
#include "core/stats/site_statistics.h"
#include "core/status.h"
#include "core/wire/payload_digest.h"
#include "config/config_schema.h"
#include "node/external_trainer.h"
#include "node/local_training.h"
#include "node/secagg_participant.h"

namespace fedmesh {

// [gossip]: serverless mode (node/gossip_service.h). Active when `listen` is set; then
// [aggregator] is not used. Defaults documented in the schema (docs/config.md).
struct GossipConfig {
  std::string listen;               // e.g. tcp://0.0.0.0:7100; empty = aggregator mode
  std::string advertise;            // endpoint peers dial; empty = the bound listen endpoint
  std::vector<std::string> seeds;   // "id@endpoint" of peers to join through
  std::string allow_dir = "allow";  // public keys of the federation's sites
  std::string protocol = "dpsgd";
  std::string topology = "exponential";
  int64_t period_ms = 1000;
  int64_t fanout = 1;
  int64_t local_steps = 10;
  double choco_gamma = 0.2;
  int64_t join_timeout_ms = 5000;
  int64_t probe_interval_ms = 1000;
  int64_t suspicion_timeout_ms = 3000;
  int64_t eval_every = 10;
  int64_t checkpoint_every = 10;
  int64_t max_steps = 0;
  std::string lr_decay = "none";  // none | cosine (to lr_min_fraction * lr at max_steps)
  double lr_min_fraction = 0.1;
  bool enabled() const { return !listen.empty(); }
};

// [train] mode = "allreduce" with [collective]: synchronous data-parallel training among a
// group of ranks, no aggregator (node/allreduce_service.h). Defaults in the schema.
struct CollectiveConfig {
  bool enabled = false;             // [train] mode == "allreduce"
  std::string listen;               // this rank's bind endpoint
  std::vector<std::string> group;   // "site-id@endpoint" of every member, in rank order
  std::string allow_dir = "allow";  // the members' public keys
  int64_t sync_every = 1;           // 1: gradient all-reduce every step; k: model every k steps
  std::string compression = "none"; // none | fp16 | bf16
  int64_t chunk_kb = 1024;          // pipelining grain
  std::string security = "curve";   // curve | aes-256-gcm (collective/zmq_ring_transport.h)
  int64_t timeout_ms = 60000;       // a silent neighbour is taken for dead after this
  bool elastic = true;              // survivors re-form the ring (collective/elastic_steps.h)
  int64_t reform_window_ms = 3000;  // how long re-forming waits for the members' answers
  int64_t min_members = 1;          // fewer live members than this end the run
  bool swim = false;                // SWIM failure detection on each member's port + 1
  int64_t swim_probe_ms = 500;
  int64_t swim_suspicion_ms = 1500;
};

// [train] mode = "split" with [split]: vertical federated learning, one model cut across
// parties that hold different columns of the same records (docs/vertical.md).
struct SplitConfig {
  bool enabled = false;               // [train] mode == "split"
  std::string role;                   // label | feature
  std::string listen;                 // this party's bind endpoint
  std::vector<std::string> peers;     // "site-id@endpoint" of every party, this one included
  std::string allow_dir = "allow";    // the parties' public keys
  std::string id_column;              // the column holding the record ids
  std::string bottom;                 // this party's bottom model (.onnx)
  std::string top;                    // label party: the top model (.onnx)
  int64_t microbatches = 1;           // per step, pipelined
  int64_t staleness = 0;              // label party: steps begun before the last is done (0 or 1)
  double noise = 0.0;                 // std of Gaussian noise on what this party sends over the cut
  std::string compression = "none";   // none | fp16 | bf16 | int8
  std::string combine = "concat";     // label party: concat | sum (the bottom outputs into the top)
  std::string security = "curve";     // curve | aes-256-gcm: the links between the parties (PSI included)
  int64_t timeout_ms = 60000;         // a silent party fails the job after this
  int64_t checkpoint_every = 0;       // steps between checkpoints; 0 = at each epoch's end
  int64_t rejoin_timeout_ms = 300000; // how long the job waits for a lost party to come back
  bool share_part = false;            // feature party: send its trained part to the label party at the end
  std::string assemble;               // label party: write the whole model here (.onnx), if every party consents
};

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
  // Payload bytes per chunk of an upload to the aggregator. Default: 8 MiB (the wire's).
  uint64_t upload_chunk_bytes = uint64_t{8} << 20;
  // [aggregator] payload_digest: the digest on this site's payloads (WireLimits).
  wire::DigestKind payload_digest = wire::DigestKind::kBlake3;
  // [data], [train], [model] and [node] metrics.
  LocalTrainingOptions training;
  // [train] external*: the site's own training program (docs/external-trainer.md); active
  // when enabled(), and then [data] is not read. The loader fills all but `log`.
  ExternalTrainerOptions external;
  // [codec]: the chain updates are encoded with when the aggregator prescribes none
  // (canonical name, e.g. "topk:0.01|int8:256|zstd:3"; "none" = raw float32), and the
  // error feedback that keeps what a lossy chain drops (core/codec/error_feedback.h).
  std::string codec_chain = "none";
  codec::ErrorFeedbackOptions error_feedback;
  GossipConfig gossip;
  CollectiveConfig collective;
  SplitConfig split;
  // [secagg] allow: the public key files of every site that may share a secure
  // aggregation round with this one. A node checks each member's signed keys against them
  // (the aggregator relays the keys and must not be able to swap them). Empty (the
  // default): this node refuses secure aggregation tasks.
  std::string secagg_allow_dir;
  // [secagg] min_clients / min_threshold / min_noise_stddev: this site's floors on the
  // settings a secure aggregation task may ask for (node/secagg_participant.h).
  SecAggFloors secagg_floors;
  // [model] expect_sha256: the only graph hash this site trains (lower-case hex); empty =
  // whatever the aggregator sends.
  std::string expect_model_sha256;
  // [model] local: globs over tensor names that stay on this site (FedBN, personal heads).
  std::vector<std::string> local_patterns;
  // [stats]: what this site lets leave it when the aggregator asks for federated statistics.
  StatsPrivacyPolicy stats_policy;
  // [eval] share_local_model: send the local-only model for cross-evaluation when asked.
  bool share_local_model = false;
  // [metrics] listen: HOST:PORT of this node's Prometheus endpoint (node/node_metrics.h);
  // empty (the default) = none.
  std::string metrics_listen;
};

const ConfigSchema& NodeConfigSchema();

// LoadConfig(NodeConfigSchema(), path, overrides), converted to NodeConfig and checked with
// ValidateLocalTrainingOptions; every error names the file (or --set) and the key.
Result<NodeConfig> LoadNodeConfig(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace fedmesh
