#include "aggregator/aggregator_config.h"


#include <algorithm>
#include <cmath>

#include "config/config_loader.h"
#include "core/model_zoo.h"
#include "core/data/data_source.h"
#include "core/host_port.h"
#include "config/loss_config.h"
#include "aggregator/strategy_config.h"

namespace fedmesh {

const ConfigSchema& AggregatorConfigSchema() {
  static const ConfigSchema* schema = [] {
    using T = ConfigType;
    std::vector<std::string> strategies;
    for (std::string_view n : KnownStrategyNames()) strategies.emplace_back(n);
    auto* s = new ConfigSchema;
    s->name = "fedmesh-aggregator";
    s->description =
        "The federation operator's config: the federation, the aggregator's socket, keys and "
        "store, how rounds run, and the local training settings sent to nodes with every task.";
    s->keys = {
        RequiredKey("federation", "id", T::kString,
                    "The federation every message must name; printable ASCII, no spaces"),
        StringKey("aggregator", "id", "aggregator", "Sender id of the aggregator's messages"),
        StringKey("aggregator", "listen", "tcp://*:5555", "ZeroMQ endpoint to bind"),
        StringKey("aggregator", "key", "aggregator.key", "The aggregator's long-term key pair file (0600)")
            .Path(),
        StringKey("aggregator", "allow", "allow",
                  "Directory of enrolled node public keys; only these may connect")
            .Path(),
        StringKey("aggregator", "db", "aggregator.db", "The aggregator's SQLite store").Path(),
        IntKey("storage", "keep_models", 0,
               "Model versions the store keeps: the newest this many, plus the best (highest "
               "test accuracy, else best federated evaluation) and the latest; older ones are "
               "pruned after each round (docs/storage.md). With [eval] federated, more than "
               "[eval] every. 0 = keep all")
            .Min(0),
        StringKey("aggregator", "metrics", "", "Per-round metrics as JSON lines; empty = none").Path(),
        StringKey("metrics", "listen", "",
                  "HOST:PORT of a Prometheus endpoint (/metrics: rounds, participants, "
                  "rejections, bytes, durations, DP epsilon, process); e.g. 127.0.0.1:9464, "
                  "port 0 = any free one (logged). Empty = none. It has no authentication: "
                  "bind it to loopback or a monitoring network"),
        StringKey("admin", "listen", "",
                  "ZeroMQ endpoint of the admin channel (fedmesh-admin; CurveZMQ with the "
                  "aggregator's key, admitting only the keys in [admin] admins and observers); "
                  "e.g. tcp://127.0.0.1:5556. Empty = no admin channel (docs/operations.md)"),
        StringKey("admin", "admins", "admins",
                  "Directory of admin public keys: may pause, resume, abort and kick as well "
                  "as read")
            .Path(),
        StringKey("admin", "observers", "observers",
                  "Directory of observer public keys: may only read (status, sites, rounds, "
                  "log, export); a missing directory = none")
            .Path(),
        StringKey("status_page", "listen", "",
                  "HOST:PORT of the read-only status page (round progress, accuracy chart, "
                  "sites, model downloads); port 0 = any free one (logged). Empty = none. "
                  "Off loopback it needs [status_page] token_file"),
        StringKey("status_page", "token_file", "",
                  "File holding the access token the page then requires (?token= or "
                  "Authorization: Bearer); required when listen is not a loopback address")
            .Path(),
        StringKey("aggregator", "payload_digest", "blake3",
                  "Digest on the payloads the aggregator sends (tasks, models): blake3 (about 3x "
                  "as fast) or sha256, which sites built before BLAKE3 require (docs/wire.md, "
                  "Hash). Any build reads both")
            .Choices({"blake3", "sha256"}),
        IntKey("aggregator", "max_pending_upload_mb", 0,
               "MiB that all nodes' partial uploads may hold together (a header frame that "
               "does not fit is refused); 0: (clients_per_round + 2) x the largest update the "
               "model allows, 4 bytes per parameter plus a quarter and 1 MiB for codecs")
            .Min(0)
            .Max(1 << 30),
        FloatKey("aggregator", "upload_idle_timeout_s", 60.0,
                 "A partial upload that received no chunk for this many seconds is dropped; "
                 "until then a site cut off mid-upload is not declared dead, and resumes the "
                 "upload where it stopped when it reconnects")
            .Min(0, true)
            .Max(86400),
        IntKey("aggregator", "heartbeat_ms", 5000, "How often nodes send a heartbeat, in milliseconds")
            .Min(1)
            .Max(86400000),
        IntKey("rounds", "total", 10, "Rounds to run").Min(1).Max(1000000000),
        IntKey("rounds", "clients_per_round", 10,
               "Nodes selected per round (all connected ones when fewer are connected)")
            .Min(1)
            .Max(1000000),
        IntKey("rounds", "min_clients", 2,
               "Fewest answers with which a round may close; <= clients_per_round")
            .Min(1)
            .Max(1000000),
        IntKey("rounds", "min_available_clients", 0,
               "Connected nodes needed before a round opens; 0 = min_clients")
            .Min(0)
            .Max(1000000),
        FloatKey("rounds", "timeout_s", 600.0, "Seconds from opening a round to its deadline")
            .Min(0, true)
            .Max(31536000),
        IntKey("rounds", "max_examples_per_node", 0,
               "The most examples one update weighs with in the average; a node's claim is "
               "also bounded by what it registered, and a capped claim is logged and counted. "
               "0: bounded by the registration only")
            .Min(0),
        IntKey("rounds", "max_retries", 3, "Retries of a round that timed out below min_clients")
            .Min(0)
            .Max(1000000),
        IntKey("rounds", "failure_backoff_max_rounds", 8,
               "A node that failed its training task f times in a row is not selected for the "
               "next min(2^(f-1), this) rounds (unless a round would lack nodes without it); an "
               "accepted update clears the count. Not applied with [dp]. 0 = never left out")
            .Min(0)
            .Max(1000000),
        StringKey("rounds", "strategy", "fedavg", "How updates are combined").Choices(strategies),
        BoolKey("secagg", "enabled", false,
                "Secure aggregation (SecAgg+): the aggregator learns only the sum of each "
                "round's clipped updates; every node needs [secagg] allow"),
        IntKey("secagg", "threshold", 0,
               "Shamir threshold t; 0 = ceil(k/2) + 1 for the round's graph degree k")
            .Min(0)
            .Max(254),
        IntKey("secagg", "neighbours", 0,
               "Graph degree k (even); 0 = 2 ceil(log2 n) for n selected nodes")
            .Min(0)
            .Max(254),
        FloatKey("secagg", "clip", 1.0, "L2 bound of each node's change before encoding").Min(0, true),
        IntKey("secagg", "bits", 16, "Fixed-point bits per coordinate").Min(2).Max(32),
        FloatKey("secagg", "stage_timeout_s", 60.0,
                 "Seconds each protocol stage after the first waits for the nodes' messages")
            .Min(0, true),
        FloatKey("rounds", "prox_mu", 0.01, "fedprox: the proximal coefficient mu sent to nodes")
            .Min(0, true),
        IntKey("train", "epochs", 1, "Local epochs each node runs per round").Min(1).Max(1000000),
        IntKey("train", "batch", 32, "Local batch size").Min(1).Max(1000000),
        FloatKey("train", "lr", 0.01, "Local SGD learning rate").Min(0, true),
        FloatKey("train", "momentum", 0.0, "Local heavy-ball momentum").Min(0).Max(1, true),
        StringKey("model", "name", "mlp", "Model architecture of the global model")
            .Choices(KnownModelNames()),
        StringKey("model", "onnx", "",
                  "ONNX file of the global model (torch.onnx.export, opsets 9-17); its "
                  "initializers are the initial weights and sites receive its graph with each "
                  "task. Replaces [model] name; empty = use name")
            .Path(PathKind::kPath),
        IntKey("model", "seed", 0, "Seed of the initial global model").Min(0),
        FloatListKey("model", "input_shape", {28, 28, 1},
                     "Input of a built-in model, one sample: [height, width, channels] for "
                     "images, [features] for table rows; the sites' data must match. Ignored "
                     "with [model] onnx (the file declares it)")
            .Min(1),
        IntKey("model", "num_classes", 10,
               "Outputs of a built-in model (classes; 1 for bce_with_logits or a single "
               "regression target). Ignored with [model] onnx")
            .Min(1)
            .Max(65536),
        StringKey("codec", "update", "",
                  "Codec chain every node must encode its update with, e.g. topk:0.01|int8|zstd; "
                  "empty = each node's own [codec] chain"),
        StringKey("codec", "downlink", "none",
                  "Codec chain of the global model sent to nodes: none, or fp16, bf16, int8, "
                  "qsgd and/or zstd (no sparsifier)"),
        FloatKey("rounds", "update_prediction", 0.0,
                 "Update prediction beta: FitTasks also carry beta x the last round's global "
                 "change and nodes send their change minus it, which lets sparse update codecs "
                 "(topk) spend their coordinates on what differs; doubles the downlink with "
                 "[codec] downlink = none. Synchronous rounds, no secagg. 0 = off")
            .Min(0)
            .Max(1),
        StringKey("eval", "dataset", "fashion-mnist",
                  "Held-out data the global model is evaluated on after each round; empty = none")
            .Path(PathKind::kDataSource),
        BoolKey("eval", "federated", false,
                "Federated evaluation: after rounds `every`, 2 x `every`, ... and the last, every "
                "connected site evaluates the global model on its own held-out data ([data] test) "
                "and reports its metrics; no data at the aggregator (docs/evaluation.md)"),
        IntKey("eval", "every", 1, "Federated evaluation every this many rounds").Min(1),
        IntKey("eval", "min_sites", 1,
               "Fewest site answers for a federated evaluation to report federated metrics")
            .Min(1)
            .Max(1000000),
        FloatKey("eval", "timeout_s", 120.0,
                 "Seconds a federated evaluation waits for the sites' answers")
            .Min(0, true),
        IntKey("eval", "finetune_epochs", 0,
               "Federated evaluation after the last round: each site also fine-tunes the global "
               "model on its own data for this many epochs and reports finetuned_* metrics; 0 = off")
            .Min(0)
            .Max(10000),
        IntKey("eval", "local_only_epochs", 0,
               "Federated evaluation after the last round: each site also trains the first "
               "global model alone for this many epochs (its local-only baseline) and reports "
               "local_only_* metrics; 0 = off (rounds x epochs compares like for like)")
            .Min(0)
            .Max(10000),
        BoolKey("eval", "cross_eval", false,
                "After the last round, every site that shares its local-only model ([eval] "
                "share_local_model at the site) has it scored at every site too: the matrix of "
                "candidates x sites (needs local_only_epochs > 0; --cross-eval)"),
        StringKey("eval", "label_column", "label",
                  "csv [eval] dataset: the column holding the integer class labels"),
        BoolKey("stats", "enabled", false,
                "Federated statistics before round 1: every connected site summarises its "
                "training data (counts, mean, std, min/max, quantiles, histograms, labels) under "
                "its own [stats] privacy policy; written to [stats] report (docs/data.md)"),
        IntKey("stats", "bins", 10, "Histogram bins per feature; 0 = no histograms").Min(0).Max(1024),
        FloatListKey("stats", "quantiles", {0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99},
                     "Quantiles reported per feature, each in [0, 1]"),
        IntKey("stats", "min_sites", 1,
               "Fewest sites releasing statistics for federation figures").Min(1).Max(1000000),
        FloatKey("stats", "timeout_s", 120.0, "Seconds each statistics phase waits for the sites")
            .Min(0, true),
        StringKey("data", "normalize", "none",
                  "federated: after the statistics ([stats] enabled), every feature (images: every "
                  "channel) is z-scored with the federation's mean and standard deviation, as a "
                  "Sub/Div in front of the model (a built-in model is trained as its graph), so "
                  "every site scales alike and the exported ONNX takes raw rows")
            .Choices({"none", "federated"}),
        StringKey("upstream", "endpoint", "",
                  "Hierarchical aggregation: this aggregator is a region of the top aggregator at "
                  "this endpoint. It takes part in each upstream round as one node, running one "
                  "regional round with its own sites from the top's model and answering with "
                  "their combined change and example count (docs/hierarchy.md). Its own [rounds] "
                  "total is then ignored: it runs until stopped. Empty = none"),
        StringKey("upstream", "public_key", "upstream.pub", "The top aggregator's public key file")
            .Path(),
        StringKey("upstream", "key", "region.key",
                  "This region's site key at the top (enrolled in the top's allow directory); "
                  "its name is the region's node id there")
            .Path(),
        StringKey("upstream", "federation", "",
                  "The top's [federation] id; empty = this aggregator's own [federation] id"),
        StringKey("stats", "report", "stats.json",
                  "Where the statistics report goes (JSON; a PNG of the histograms per site is "
                  "written next to it with gnuplot); relative to the working directory"),
    };
    // The loss keys sit after [train] momentum, where the docs list them.
    const auto momentum = std::find_if(s->keys.begin(), s->keys.end(), [](const ConfigKey& k) {
      return k.section == "train" && k.key == "momentum";
    });
    std::vector<ConfigKey> loss = LossConfigKeys(
        "Loss nodes train with and the global model is evaluated by; metrics follow its task (docs/models.md)");
    s->keys.insert(momentum + 1, loss.begin(), loss.end());
    for (ConfigKey& k : RoundModeConfigKeys(10, "in [min_clients, clients_per_round]")) {
      s->keys.push_back(std::move(k));
    }
    for (ConfigKey& k : StrategyConfigKeys()) s->keys.push_back(std::move(k));
    return s;
  }();
  return *schema;
}

namespace {

// [upstream]: a regional aggregator runs rounds only when its top grants them, with plain
// (stateless) averaging, so the region's answer is exactly its sites' weighted mean.
Status ReadUpstream(const ConfigValues& v, AggregatorConfig* c) {
  AggregatorConfig::Upstream& u = c->upstream;
  u.endpoint = v.GetString("upstream", "endpoint");
  FM_RETURN_IF_ERROR(CheckEndpointKey(v, "upstream", "endpoint", EndpointUse::kConnect));
  u.public_key = v.GetString("upstream", "public_key");
  u.key = v.GetString("upstream", "key");
  u.federation_id = v.GetString("upstream", "federation");
  if (u.federation_id.empty()) u.federation_id = c->federation_id;
  if (u.endpoint.empty()) return Status::OK();
  RoundEngineOptions& r = c->rounds;
  auto refuse = [&](std::string_view section, std::string_view key, const std::string& why) {
    return AttributeToKey(Status::InvalidArgument("with [upstream] endpoint set (a regional "
                                                  "aggregator): " + why),
                          v, {{"", section, key}});
  };
  if (r.mode != RoundMode::kSynchronous) return refuse("rounds", "mode", "rounds must be synchronous");
  if (r.federated_stats.enabled) {
    return refuse("stats", "enabled", "federated statistics are not run at a region");
  }
  if (r.federated_eval.enabled) {
    return refuse("eval", "federated", "federated evaluation is not run at a region");
  }
  if (r.update_prediction != 0.0) {
    return refuse("rounds", "update_prediction", "update prediction is not used at a region");
  }
  for (std::string_view plain : {"fedavg", "median", "trimmed_mean", "krum", "multikrum"}) {
    if (c->strategy == plain) {
      r.rounds_on_demand = true;
      break;
    }
  }
  if (!r.rounds_on_demand) {
    return refuse("rounds", "strategy", "strategy \"" + c->strategy +
                                            "\" keeps server state or a proximal term; a region "
                                            "averages plainly (fedavg or a robust strategy) and "
                                            "the top runs the server optimiser");
  }
  if (c->strategy_options.dp.central || c->strategy_options.dp.distributed) {
    return refuse("dp", "mode", "differential privacy is accounted at the top, not at a region");
  }
  // The top decides how many rounds there are; the region serves until stopped.
  r.total_rounds = 1000000000;
  return Status::OK();
}

}  // namespace

Result<AggregatorConfig> LoadAggregatorConfig(const std::string& path,
                                              const std::vector<std::string>& overrides) {
  FM_ASSIGN_OR_RETURN(ConfigValues v, LoadConfig(AggregatorConfigSchema(), path, overrides));
  AggregatorConfig c;
  c.config_path = path;
  c.federation_id = v.GetString("federation", "id");
  c.listen = v.GetString("aggregator", "listen");
  FM_RETURN_IF_ERROR(CheckEndpointKey(v, "aggregator", "listen", EndpointUse::kBind));
  c.key_path = v.GetString("aggregator", "key");
  c.allow_dir = v.GetString("aggregator", "allow");
  c.payload_digest = v.GetString("aggregator", "payload_digest") == "sha256"
                         ? wire::DigestKind::kSha256
                         : wire::DigestKind::kBlake3;
  c.max_pending_upload_bytes =
      static_cast<uint64_t>(v.GetInt("aggregator", "max_pending_upload_mb")) << 20;
  c.upload_idle_timeout_s = v.GetFloat("aggregator", "upload_idle_timeout_s");
  c.db_path = v.GetString("aggregator", "db");
  c.metrics_path = v.GetString("aggregator", "metrics");
  c.metrics_listen = v.GetString("metrics", "listen");
  FM_RETURN_IF_ERROR(CheckHostPortKey(v, "metrics", "listen"));
  c.admin_listen = v.GetString("admin", "listen");
  FM_RETURN_IF_ERROR(CheckEndpointKey(v, "admin", "listen", EndpointUse::kBind));
  c.admin_dir = v.GetString("admin", "admins");
  c.observer_dir = v.GetString("admin", "observers");
  c.status_listen = v.GetString("status_page", "listen");
  c.status_token_file = v.GetString("status_page", "token_file");
  FM_RETURN_IF_ERROR(CheckHostPortKey(v, "status_page", "listen"));
  if (!c.status_listen.empty() && !IsLoopbackHostPort(c.status_listen) &&
      c.status_token_file.empty()) {
    return AttributeToKey(
        Status::InvalidArgument("the status page at " + c.status_listen +
                                " is not on a loopback address: set [status_page] token_file "
                                "to a file holding its access token"),
        v, {{"", "status_page", "listen"}});
  }
  c.keep_models = static_cast<uint64_t>(v.GetInt("storage", "keep_models"));

  RoundEngineOptions& r = c.rounds;
  r.federation_id = c.federation_id;
  r.aggregator_id = v.GetString("aggregator", "id");
  r.heartbeat_interval_ms = static_cast<uint64_t>(v.GetInt("aggregator", "heartbeat_ms"));
  r.total_rounds = static_cast<uint64_t>(v.GetInt("rounds", "total"));
  r.clients_per_round = static_cast<int>(v.GetInt("rounds", "clients_per_round"));
  r.min_clients = static_cast<int>(v.GetInt("rounds", "min_clients"));
  r.min_available_clients = static_cast<int>(v.GetInt("rounds", "min_available_clients"));
  r.timeout_s = v.GetFloat("rounds", "timeout_s");
  r.max_retries = static_cast<int>(v.GetInt("rounds", "max_retries"));
  r.max_examples_per_node = static_cast<uint64_t>(v.GetInt("rounds", "max_examples_per_node"));
  r.failure_backoff_max_rounds = static_cast<int>(v.GetInt("rounds", "failure_backoff_max_rounds"));
  r.mode = ReadRoundMode(v);
  r.buffer_size = static_cast<int>(v.GetInt("rounds", "buffer_size"));
  r.max_staleness = static_cast<int>(v.GetInt("rounds", "max_staleness"));
  r.local_epochs = static_cast<int>(v.GetInt("train", "epochs"));
  r.batch_size = static_cast<int>(v.GetInt("train", "batch"));
  r.learning_rate = v.GetFloat("train", "lr");
  r.momentum = v.GetFloat("train", "momentum");
  r.loss = v.GetString("train", "loss");
  for (double w : v.GetFloatList("train", "class_weights")) r.class_weights.push_back(static_cast<float>(w));
  r.pos_weight = v.GetFloat("train", "pos_weight");
  FM_RETURN_IF_ERROR(ReadLossOptions(v, &c.loss));
  r.update_codec = v.GetString("codec", "update");
  r.downlink_codec = v.GetString("codec", "downlink");
  r.update_prediction = v.GetFloat("rounds", "update_prediction");

  r.secagg.enabled = v.GetBool("secagg", "enabled");
  r.secagg.threshold = static_cast<uint32_t>(v.GetInt("secagg", "threshold"));
  r.secagg.neighbours = static_cast<uint32_t>(v.GetInt("secagg", "neighbours"));
  r.secagg.clip = v.GetFloat("secagg", "clip");
  r.secagg.bits = static_cast<uint32_t>(v.GetInt("secagg", "bits"));
  r.secagg.stage_timeout_s = v.GetFloat("secagg", "stage_timeout_s");

  c.strategy = v.GetString("rounds", "strategy");
  c.strategy_options.prox_mu = v.GetFloat("rounds", "prox_mu");
  ReadStrategyOptions(v, static_cast<uint32_t>(r.clients_per_round), &c.strategy_options);
  if (c.strategy_options.dp.distributed) {
    // Each node's share of the noise, so that the sum of any n >= min_clients shares has a
    // standard deviation of at least z * clip: the accountant's mechanism, conservatively.
    c.strategy_options.dp.clip = r.secagg.clip;
    const double n_min = std::max(2, r.min_clients);
    r.secagg.noise_stddev =
        c.strategy_options.dp.noise_multiplier * r.secagg.clip / std::sqrt(n_min);
  }
  c.model.name = v.GetString("model", "name");
  if (const std::string onnx = v.GetString("model", "onnx"); !onnx.empty()) c.model.name = onnx;
  c.model_seed = static_cast<uint64_t>(v.GetInt("model", "seed"));
  c.eval_dataset = v.GetString("eval", "dataset");
  if (!c.eval_dataset.empty()) {
    FM_RETURN_IF_ERROR(AttributeToKey(CheckDataSourceName(c.eval_dataset), v, {{"", "eval", "dataset"}}));
  }
  c.eval_label_column = v.GetString("eval", "label_column");
  r.federated_eval.enabled = v.GetBool("eval", "federated");
  r.federated_eval.every = static_cast<uint64_t>(v.GetInt("eval", "every"));
  r.federated_eval.min_sites = static_cast<int>(v.GetInt("eval", "min_sites"));
  r.federated_eval.timeout_s = v.GetFloat("eval", "timeout_s");
  r.federated_eval.finetune_epochs = static_cast<uint32_t>(v.GetInt("eval", "finetune_epochs"));
  r.federated_eval.local_only_epochs = static_cast<uint32_t>(v.GetInt("eval", "local_only_epochs"));
  r.federated_eval.cross_eval = v.GetBool("eval", "cross_eval");
  // A round's federated evaluation may close as late as when round + every closes; its model
  // must still be stored then, or the best by that evaluation could be pruned unjudged.
  if (r.federated_eval.enabled && c.keep_models > 0 && c.keep_models <= r.federated_eval.every) {
    return AttributeToKey(
        Status::InvalidArgument("keep_models = " + std::to_string(c.keep_models) +
                                " with [eval] federated = true must be 0 or more than [eval] "
                                "every (" + std::to_string(r.federated_eval.every) +
                                "), so that a model is still stored when its evaluation closes"),
        v, {{"", "storage", "keep_models"}});
  }
  if (r.federated_eval.cross_eval && !r.federated_eval.enabled) {
    return AttributeToKey(Status::InvalidArgument("cross_eval scores models at the sites: set "
                                                  "[eval] federated = true"),
                          v, {{"", "eval", "cross_eval"}});
  }
  r.federated_stats.enabled = v.GetBool("stats", "enabled");
  r.federated_stats.bins = static_cast<uint32_t>(v.GetInt("stats", "bins"));
  r.federated_stats.quantiles = v.GetFloatList("stats", "quantiles");
  r.federated_stats.min_sites = static_cast<int>(v.GetInt("stats", "min_sites"));
  r.federated_stats.timeout_s = v.GetFloat("stats", "timeout_s");
  c.stats_report = v.GetString("stats", "report");
  c.normalize = v.GetString("data", "normalize");
  if (c.normalize == "federated" && !r.federated_stats.enabled) {
    return AttributeToKey(Status::InvalidArgument("normalize = \"federated\" needs the federation's "
                                                  "statistics: set [stats] enabled = true (or --stats)"),
                          v, {{"", "data", "normalize"}});
  }
  c.model.num_classes = static_cast<int>(v.GetInt("model", "num_classes"));
  c.model.input_shape.clear();
  for (double d : v.GetFloatList("model", "input_shape")) {
    if (d != std::floor(d) || d > (1 << 24)) {
      return AttributeToKey(Status::InvalidArgument("input_shape must hold whole numbers up to "
                                                    "2^24, got " + std::to_string(d)),
                            v, {{"", "model", "input_shape"}});
    }
    c.model.input_shape.push_back(static_cast<int>(d));
  }
  if (c.model.input_shape.empty() || c.model.input_shape.size() > 3) {
    return AttributeToKey(
        Status::InvalidArgument("input_shape needs 1 value ([features]) or 3 ([height, width, "
                                "channels]), got " + std::to_string(c.model.input_shape.size())),
        v, {{"", "model", "input_shape"}});
  }
  if (Status s = CheckModelSize(c.model); !s.ok()) {
    return AttributeToKey(std::move(s), v, {{"", "model", "input_shape"}});
  }

  FM_RETURN_IF_ERROR(ReadUpstream(v, &c));

  // Field names as Validate(RoundEngineOptions) spells them; longer names first where one
  // contains another, so "min_available_clients" is not taken for "min_clients".
  static const std::vector<FieldKey> kRoundFields = {
      {"federated_stats.quantiles", "stats", "quantiles"},
      {"federated_stats.timeout_s", "stats", "timeout_s"},
      {"federated_stats.min_sites", "stats", "min_sites"},
      {"federated_eval.local_only_epochs", "eval", "local_only_epochs"},
      {"federation_id", "federation", "id"},
      {"aggregator_id", "aggregator", "id"},
      {"total_rounds", "rounds", "total"},
      {"clients_per_round", "rounds", "clients_per_round"},
      {"min_available_clients", "rounds", "min_available_clients"},
      {"min_clients", "rounds", "min_clients"},
      {"timeout_s", "rounds", "timeout_s"},
      {"max_retries", "rounds", "max_retries"},
      {"buffer_size", "rounds", "buffer_size"},
      {"max_staleness", "rounds", "max_staleness"},
      {"local_epochs", "train", "epochs"},
      {"batch_size", "train", "batch"},
      {"learning_rate", "train", "lr"},
      {"momentum", "train", "momentum"},
      {"heartbeat_interval_ms", "aggregator", "heartbeat_ms"},
      {"update_codec", "codec", "update"},
      {"downlink_codec", "codec", "downlink"},
      {"update_prediction", "rounds", "update_prediction"},
  };
  FM_RETURN_IF_ERROR(AttributeToKey(Validate(r), v, kRoundFields));
  FM_RETURN_IF_ERROR(MakeConfiguredStrategy(c.strategy, c.strategy_options, v,
                                            {"", "rounds", "strategy"}, {"", "rounds", "prox_mu"})
                         .status());
  FM_RETURN_IF_ERROR(AttributeToKey(ValidateModelName(c.model.name), v, {{"", "model", "name"}}));
  FM_RETURN_IF_ERROR(AttributeToKey(CheckOnnxModelFile(v.GetString("model", "onnx")), v,
                                    {{"", "model", "onnx"}}));
  if (c.strategy_options.dp.distributed && !r.secagg.enabled) {
    return AttributeToKey(Status::InvalidArgument(
                              "distributed DP adds the noise under secure aggregation: set "
                              "[secagg] enabled = true, or use mode = \"central\""),
                          v, {{"", "dp", "mode"}});
  }
  if (c.strategy_options.dp.central && r.mode == RoundMode::kBuffered) {
    return AttributeToKey(Status::InvalidArgument(kDpNeedsSynchronousRounds), v, {{"", "rounds", "mode"}});
  }
  if (const DpOptions& dp = c.strategy_options.dp; dp.central || dp.distributed) {
    r.secure_selection = true;
    // The accountant's q = clients_per_round / population holds only while rounds sample
    // from that many nodes: with fewer connected, each would be selected more often than
    // accounted for. So a round opens only once the whole population is connected.
    if (dp.population > static_cast<uint64_t>(r.min_available_clients)) {
      r.min_available_clients = static_cast<int>(std::min<uint64_t>(dp.population, 1000000000));
    }
  }
  if (r.secagg.enabled) {
    // The strategy gets one update per round, the mean of the masked ones.
    auto refuse = [&](std::string_view section, std::string_view key, const std::string& why) {
      return AttributeToKey(Status::InvalidArgument(why), v, {{"", section, key}});
    };
    if (c.strategy_options.dp.central) {
      return refuse("dp", "mode", "[secagg] enabled with central DP: the aggregator would "
                                  "clip and noise a mean it never sees per node; not supported");
    }
    for (std::string_view robust : {"median", "trimmed_mean", "krum", "multikrum"}) {
      if (c.strategy == robust) {
        return refuse("rounds", "strategy",
                      "[secagg] enabled: a robust strategy needs the individual updates, which "
                      "secure aggregation hides; use fedavg or a server optimiser");
      }
    }
  }
  return c;
}

}  // namespace fedmesh
