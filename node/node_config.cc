#include "node/node_config.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "config/config_loader.h"
#include "core/backend.h"
#include "config/data_source_config.h"
#include "config/loss_config.h"
#include "crypto/identity.h"
#include "node/ring_liveness.h"

namespace fedmesh {

// `[SECTION] security`: how the links of a group over collective::ZmqRingTransport are
// encrypted (the ring's and split training's; every member must choose the same).
static ConfigKey LinkSecurityKey(const char* section, const std::string& what) {
  return StringKey(section, "security", "curve",
                   what + " are encrypted and authenticated between the members' keys: curve (CurveZMQ) or "
                          "aes-256-gcm (sealed links, faster on CPUs with AES instructions; docs/collectives.md); "
                          "every member must use the same")
      .Choices({"curve", "aes-256-gcm"});
}

const ConfigSchema& NodeConfigSchema() {
  static const ConfigSchema* schema = [] {
    using T = ConfigType;
    auto* s = new ConfigSchema;
    s->name = "fedmesh-node";
    s->description =
        "A site's config: who it is, where the aggregator is, which data it trains on and "
        "how. Keys of `[data]` that define the split (`dataset`, `partition`, `alpha`, "
        "`num_partitions`, `seed`) must be the same on every node of a simulated split; "
        "only `index` differs.";
    s->keys = {
        RequiredKey("federation", "id", T::kString,
                    "The federation this site belongs to: the aggregator's [federation] id"),
        RequiredKey("node", "id", T::kString,
                    "This site's id: in every message and log line, and the name in its key file: "
                    "1-64 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit"),
        StringKey("node", "key", "node.key", "This site's long-term key pair file (0600)").Path(),
        StringKey("node", "db", "node.db", "The node's SQLite store (checkpoints, state)").Path(),
        StringKey("node", "metrics", "", "Per-epoch metrics as JSON lines; empty = none").Path(),
        StringKey("aggregator", "endpoint", "",
                  "The aggregator's ZeroMQ endpoint, e.g. tcp://aggregator.example:5555; "
                  "required unless [gossip] listen is set"),
        StringKey("aggregator", "public_key", "",
                  "The aggregator's public key file, as fedmesh-keys wrote it; required unless "
                  "[gossip] listen is set")
            .Path(),
        StringKey("aggregator", "payload_digest", "blake3",
                  "Digest on the payloads this site sends: blake3 (about 3x as fast) or sha256, which aggregators built before BLAKE3 require (docs/wire.md, Hash); an update always answers in its task's kind. Any build reads both")
            .Choices({"blake3", "sha256"}),
        IntKey("aggregator", "upload_chunk_kb", 8192,
               "KiB per chunk of an update sent to the aggregator; an upload cut by a lost "
               "connection resumes from the first chunk the aggregator lacks, so sites on "
               "flaky links lose less with smaller chunks (e.g. 1024)")
            .Min(64)
            .Max(65536),
        StringKey("train", "mode", "federated",
                  "federated: rounds with an aggregator (or gossip with [gossip] listen); "
                  "allreduce: synchronous data-parallel training with the [collective] group, "
                  "no aggregator (docs/collectives.md); split: vertical federated learning, one "
                  "model cut across the [split] parties (docs/vertical.md)")
            .Choices({"federated", "allreduce", "split"}),
        StringKey("collective", "listen", "",
                  "allreduce mode: the endpoint this rank binds, e.g. tcp://0.0.0.0:7200"),
        StringListKey("collective", "group", {},
                      "allreduce mode: every member as site-id@endpoint, this site included; "
                      "rank = position in the list"),
        StringKey("collective", "allow", "allow",
                  "allreduce mode: directory of the members' public keys (one per member)")
            .Path(),
        IntKey("collective", "sync_every", 1,
               "1: all-reduce the gradients every step; k > 1: local SGD, all-reduce the model "
               "every k steps")
            .Min(1)
            .Max(1000000),
        StringKey("collective", "compression", "none", "How all-reduce values travel: none (float32), fp16, bf16")
            .Choices({"none", "fp16", "bf16"}),
        IntKey("collective", "chunk_kb", 1024, "KiB per pipelined chunk").Min(1).Max(65536),
        LinkSecurityKey("collective", "How the ring's links"),
        IntKey("collective", "timeout_ms", 60000,
               "A member silent this long in a collective call is taken for dead (elastic: the "
               "others re-form the ring; otherwise the call fails); also how long the start "
               "waits for every member")
            .Min(100),
        BoolKey("collective", "elastic", true,
                "Survive dead members: the others re-form the ring and go on from the last step "
                "they all completed; a restarted member rejoins with the ring's model "
                "(docs/collectives.md); false: a dead member fails the run"),
        IntKey("collective", "reform_window_ms", 3000,
               "Elastic: how long re-forming the ring waits for the members' answers")
            .Min(10)
            .Max(600000),
        IntKey("collective", "min_members", 1,
               "Elastic: the run fails when fewer members than this are left")
            .Min(1),
        BoolKey("collective", "swim", false,
                "Elastic: SWIM failure detection beside the ring, on each member's port + 1 (listen and "
                "every group endpoint): a dead member is declared dead within about swim_probe_ms + "
                "swim_suspicion_ms, and the ring goes on without waiting timeout_ms for it"),
        IntKey("collective", "swim_probe_ms", 500, "SWIM: probe interval (one member probed per interval)")
            .Min(20)
            .Max(60000),
        IntKey("collective", "swim_suspicion_ms", 1500,
               "SWIM: how long a suspected member has to refute before it is declared dead")
            .Min(20)
            .Max(600000),
        StringKey("split", "role", "",
                  "split mode: label (holds the label and the top model, drives the job) or "
                  "feature (holds columns only)")
            .Choices({"", "label", "feature"}),
        StringKey("split", "listen", "", "split mode: the endpoint this party binds, e.g. tcp://0.0.0.0:7300"),
        StringListKey("split", "peers", {},
                      "split mode: every party as site-id@endpoint, this one included; the top "
                      "model's input is the label party's bottom output, then the feature "
                      "parties' in this order"),
        StringKey("split", "allow", "allow", "split mode: directory of the parties' public keys").Path(),
        StringKey("split", "id_column", "",
                  "split mode: the [data] column holding the record ids the parties align on "
                  "(private set intersection); never a feature"),
        StringKey("split", "bottom", "", "split mode: this party's bottom model (.onnx): its columns in, a vector out")
            .Path(),
        StringKey("split", "top", "",
                  "split mode, label party: the top model (.onnx) over the concatenated (or, with "
                  "combine = sum, summed) bottom outputs")
            .Path(),
        IntKey("split", "microbatches", 1,
               "split mode: micro-batches per [train] batch, pipelined so parties compute one "
               "while another's result is in flight")
            .Min(1)
            .Max(4096),
        IntKey("split", "staleness", 0,
               "split mode, label party: 0 = exact synchronous steps; 1 = the next step's forwards start "
               "before this step's gradients are back (hides the link's round trip; the feature parties' "
               "bottoms then learn from weights one step old, with exact gradients for those weights)")
            .Min(0)
            .Max(1),
        FloatKey("split", "noise", 0.0,
                 "split mode: standard deviation of Gaussian noise this party adds to what it "
                 "sends over the cut (activations, or the label party's gradients); 0 = none")
            .Min(0),
        StringKey("split", "compression", "none",
                  "split mode: how activations and gradients travel: none (float32), fp16, bf16, or int8 (one "
                  "float32 scale per 256 values)")
            .Choices({"none", "fp16", "bf16", "int8"}),
        StringKey("split", "combine", "concat",
                  "split mode, label party: how the bottom outputs become the top model's input: concat (side by "
                  "side, the own first, then [split] peers order) or sum (added; every bottom gives the top's "
                  "input width)")
            .Choices({"concat", "sum"}),
        LinkSecurityKey("split", "split mode: how the links between the parties (PSI and training)"),
        IntKey("split", "timeout_ms", 60000,
               "split mode: a party silent this long is lost (the job then waits for it to come back)")
            .Min(100),
        IntKey("split", "checkpoint_every", 0,
               "split mode: steps between checkpoints (two-phase, every party at the same step); 0 = at each "
               "epoch's end")
            .Min(0),
        BoolKey("split", "share_part", false,
                "split mode, feature party: consent to send this party's trained part to the label party at the "
                "end, so that it can assemble the whole model ([split] assemble)"),
        StringKey("split", "assemble", "",
                  "split mode, label party: write the whole model here as one ONNX file (a joined row in: every "
                  "party's feature columns, the label party's first), if every feature party consents "
                  "([split] share_part); empty = parts only")
            .Path(),
        IntKey("split", "rejoin_timeout_ms", 300000,
               "split mode: how long the job waits for a lost party to restart before it fails; every party then "
               "goes back to the last committed checkpoint")
            .Min(100),
        StringKey("gossip", "listen", "",
                  "Serverless mode: the endpoint this node's gossip socket binds, e.g. "
                  "tcp://0.0.0.0:7100 (tcp://127.0.0.1:* = a port the OS picks); empty = "
                  "aggregator mode"),
        StringKey("gossip", "advertise", "",
                  "The endpoint peers dial to reach this node; empty = the bound listen "
                  "endpoint (set it when listening on 0.0.0.0)"),
        StringListKey("gossip", "seeds", {},
                      "Peers to join through, as \"site-id@tcp://host:port\"; their keys come "
                      "from the allowlist. Empty: this node waits to be joined"),
        StringKey("secagg", "allow", "",
                  "Directory of the public key files of the sites this node may aggregate "
                  "securely with; empty = refuse secure aggregation tasks")
            .Path(),
        IntKey("secagg", "min_clients", 3,
               "Refuse a secure aggregation task whose min_clients (the smallest roster and "
               "survivor set) is below this: an update must hide among at least this many")
            .Min(2)
            .Max(1000000),
        IntKey("secagg", "min_threshold", 0,
               "Refuse a task whose Shamir threshold (explicit, or the default rule for its "
               "smallest roster) is below this; 0 = the protocol's rule only")
            .Min(0)
            .Max(254),
        FloatKey("secagg", "min_noise_stddev", 0.0,
                 "Refuse a task whose distributed-DP noise per node is below this (update "
                 "units)")
            .Min(0)
            .Max(1e6),
        StringKey("gossip", "allow", "allow",
                  "Directory of the public key files of every site in the federation "
                  "(fedmesh-keys); only these peers are admitted")
            .Path(),
        StringKey("gossip", "protocol", "dpsgd",
                  "Averaging protocol: pushpull, dpsgd (Metropolis-Hastings neighbour "
                  "averaging), choco (compressed with [codec] chain) or pushsum")
            .Choices({"pushpull", "dpsgd", "choco", "pushsum"}),
        StringKey("gossip", "topology", "exponential",
                  "Who talks to whom: random, ring, exponential or one_peer_exponential")
            .Choices({"random", "ring", "exponential", "one_peer_exponential"}),
        IntKey("gossip", "period_ms", 1000, "Milliseconds between gossip steps").Min(1).Max(3600000),
        IntKey("gossip", "fanout", 1, "Peers per step for random topology and pushsum").Min(1).Max(1024),
        IntKey("gossip", "local_steps", 10, "Local SGD steps between gossip steps").Min(0).Max(1000000),
        FloatKey("gossip", "choco_gamma", 0.2, "choco: consensus step size (0.5 diverged with topk:0.1|int8 in tests; 0.2 converged)").Min(0, true).Max(1),
        IntKey("gossip", "join_timeout_ms", 5000,
               "A new node waits this long for a neighbour's model before it starts from its own")
            .Min(0)
            .Max(3600000),
        IntKey("gossip", "probe_interval_ms", 1000, "SWIM: one liveness probe per interval")
            .Min(10)
            .Max(3600000),
        IntKey("gossip", "suspicion_timeout_ms", 3000,
               "SWIM: a suspected peer is declared dead after this long without refuting")
            .Min(10)
            .Max(3600000),
        IntKey("gossip", "eval_every", 10, "Gossip steps between test evaluations (metrics lines)")
            .Min(1)
            .Max(1000000),
        IntKey("gossip", "checkpoint_every", 10, "Gossip steps between SQLite checkpoints")
            .Min(1)
            .Max(1000000),
        IntKey("gossip", "max_steps", 0, "Stop after this many gossip steps; 0 = run until SIGTERM")
            .Min(0),
        StringKey("metrics", "listen", "",
                  "HOST:PORT of a Prometheus endpoint (/metrics: rounds served, refusals, "
                  "bytes, training time, gossip peers, process); e.g. 127.0.0.1:9465, port 0 = "
                  "any free one (logged). Empty = none. No authentication: bind it to loopback "
                  "or a monitoring network"),
        StringKey("gossip", "lr_decay", "none",
                  "Learning-rate schedule over the gossip steps: none, or cosine from [train] lr "
                  "down to lr_min_fraction x lr at max_steps (needs max_steps), which lets the "
                  "sites settle on their consensus instead of each ending on its own data")
            .Choices({"none", "cosine"}),
        FloatKey("gossip", "lr_min_fraction", 0.1, "cosine: the final learning rate as a fraction of [train] lr")
            .Min(0)
            .Max(1),
        StringKey("data", "partition", "iid",
                  "How the dataset is split among num_partitions simulated sites")
            .Choices({"iid", "dirichlet", "shards", "quantity"}),
        FloatKey("data", "alpha", 0.5,
                 "dirichlet: label concentration; 0.1 = few classes per site, 100+ = near IID")
            .Min(0, true),
        IntKey("data", "shards", 2, "shards: label-sorted shards per partition").Min(1).Max(1000000),
        FloatKey("data", "quantity_sigma", 1.0, "quantity: sigma of the log-normal partition sizes")
            .Min(0),
        IntKey("data", "num_partitions", 1, "Number of partitions; 1 = all the data").Min(1).Max(1000000),
        IntKey("data", "index", 0, "This site's partition, in [0, num_partitions)").Min(0).Max(999999),
        IntKey("data", "seed", 0, "Seed of the split; the same on every site").Min(0),
        StringKey("model", "name", "mlp", "Model architecture").Choices(KnownModelNames()),
        StringKey("model", "onnx", "",
                  "ONNX file of the model for local or gossip training; replaces [model] name. "
                  "In aggregator mode the aggregator sends its model's graph with each task")
            .Path(PathKind::kPath),
        StringKey("model", "expect_sha256", "",
                  "The graph hash (fedmesh-model inspect) of the only model architecture this "
                  "site will train; a task with another one stops the node with an error. "
                  "Empty = any"),
        StringListKey("model", "local", {},
                      "Tensors of a graph model that stay on this site, as globs over their "
                      "names (fedmesh-model inspect lists them), e.g. [\"*bn*\"] for FedBN: "
                      "trained from this site's own values and never sent"),
        IntKey("model", "seed", 0, "Seed of model initialisation, shuffling and dropout").Min(0),
        IntKey("train", "epochs", 1, "Local passes over this site's data").Min(1).Max(1000000),
        StringListKey("train", "external", {},
                      "The site's own training program, as argv (no shell), e.g. [\"python3\", "
                      "\"train.py\"]: the node starts it in this file's directory and hands it "
                      "every task (docs/external-trainer.md); [data] is then not read. Empty = "
                      "fedmesh's trainer"),
        StringKey("train", "launch", "once",
                  "external: once (one process for all tasks, restarted after a fault) or "
                  "per_task (a fresh process for every task)")
            .Choices({"once", "per_task"}),
        StringKey("train", "external_endpoint", "",
                  "ipc://ABSOLUTE_PATH where the node waits for a trainer the site runs "
                  "itself (fedmesh.connect(endpoint)); its directory must have mode 0700. "
                  "Excludes external"),
        FloatKey("train", "external_timeout_s", 0,
                 "Longest wait for the external trainer's answer to one task; 0 = the task's "
                 "deadline (24 h when it has none)")
            .Min(0),
        FloatKey("train", "external_connect_timeout_s", 30,
                 "How long a (re)started external trainer may take to connect")
            .Min(0, true),
        FloatKey("train", "external_restart_backoff_s", 1,
                 "First delay before restarting a failed external trainer; doubles per "
                 "failure in a row, at most 60 s")
            .Min(0),
        IntKey("train", "batch", 32, "Samples per SGD step").Min(1).Max(1000000),
        FloatKey("train", "lr", 0.01, "SGD learning rate").Min(0, true),
        FloatKey("train", "momentum", 0.0, "Heavy-ball momentum").Min(0).Max(1, true),
        FloatKey("train", "weight_decay", 0.0, "L2 penalty coefficient").Min(0),
        FloatKey("train", "prox_mu", 0.0, "FedProx proximal coefficient mu; 0 = plain SGD").Min(0),
        IntKey("train", "threads", 0, "Compute threads; 0 = all cores").Min(0).Max(4096),
        StringKey("train", "device", "cpu", "Where to train: cpu, auto (a GPU when present) or cuda[:N]"),
        StringKey("train", "engine", "auto",
                  "How a built-in model (logreg, mlp, cnn) runs: graph (the graph executor), "
                  "layers (the layer code) or auto (graph on the CPU, layers on a GPU); the "
                  "same parameter vector either way, outputs equal up to rounding (dropout "
                  "masks are drawn differently)")
            .Choices({"auto", "graph", "layers"}),
        StringKey("codec", "chain", "none",
                  "Codec chain for updates unless the aggregator prescribes one, e.g. "
                  "topk:0.01|int8|zstd (docs/codecs.md); none = raw float32"),
        StringKey("codec", "error_feedback", "auto",
                  "Keep what a lossy chain drops and add it to the next update: residual, dgc "
                  "(with momentum correction), off, or auto (residual for biased chains)")
            .Choices({"auto", "off", "residual", "dgc"}),
        FloatKey("codec", "dgc_momentum", 0.9, "dgc: momentum of the accumulated velocity")
            .Min(0)
            .Max(1, true),
        BoolKey("eval", "share_local_model", false,
                "Cross-evaluation (fedmesh-aggregator --cross-eval): send this site's local-only "
                "model (trained for the last evaluation) to the aggregator, which has every site "
                "score it; its weights then leave the site"),
        BoolKey("stats", "allow", true,
                "Answer the aggregator's federated statistics requests (docs/data.md); false = "
                "always withheld"),
        IntKey("stats", "min_count", 10, "Fewest rows from which any statistic is released")
            .Min(1),
        FloatKey("stats", "minmax_noise", 0.05,
                 "Released min/max are pushed outward by |N(0, (minmax_noise x range)^2)|; 0 = exact")
            .Min(0),
        FloatKey("stats", "max_bins_fraction", 0.5,
                 "A histogram with more bins than this fraction of the rows is withheld")
            .Min(0, true)
            .Max(1),
        BoolKey("stats", "quantiles", true,
                "Release t-digest sketches (quantiles); their outermost centroids are single "
                "values"),
    };
    // The loss keys sit after [train] momentum, where the docs list them.
    const auto momentum = std::find_if(s->keys.begin(), s->keys.end(), [](const ConfigKey& k) {
      return k.section == "train" && k.key == "momentum";
    });
    std::vector<ConfigKey> loss = LossConfigKeys(
        "Loss for local and gossip training (in aggregator mode the aggregator's [train] loss wins)");
    s->keys.insert(momentum + 1, loss.begin(), loss.end());
    // The data source keys sit before [data] partition, where the docs list them.
    const auto partition = std::find_if(s->keys.begin(), s->keys.end(), [](const ConfigKey& k) {
      return k.section == "data" && k.key == "partition";
    });
    std::vector<ConfigKey> source = DataSourceConfigKeys("[data] seed", "this site's test data");
    s->keys.insert(partition, source.begin(), source.end());
    const auto privacy = RecordPrivacyKeys();
    s->keys.insert(s->keys.end(), privacy.begin(), privacy.end());
    return s;
  }();
  return *schema;
}

static Status ReadCollectiveConfig(const ConfigValues& v, NodeConfig& c);
static Status ReadSplitConfig(const ConfigValues& v, NodeConfig& c);

Result<NodeConfig> LoadNodeConfig(const std::string& path, const std::vector<std::string>& overrides) {
  FM_ASSIGN_OR_RETURN(ConfigValues v, LoadConfig(NodeConfigSchema(), path, overrides));
  NodeConfig c;
  c.config_path = path;
  c.federation_id = v.GetString("federation", "id");
  c.node_id = v.GetString("node", "id");
  // It is in every log line and message, and must be the name in this site's key file.
  FM_RETURN_IF_ERROR(AttributeToKey(ValidateSiteName(c.node_id), v, {{"", "node", "id"}}));
  c.key_path = v.GetString("node", "key");
  c.db_path = v.GetString("node", "db");
  c.aggregator_endpoint = v.GetString("aggregator", "endpoint");
  FM_RETURN_IF_ERROR(CheckEndpointKey(v, "aggregator", "endpoint", EndpointUse::kConnect));
  c.aggregator_public_key_path = v.GetString("aggregator", "public_key");
  c.upload_chunk_bytes = static_cast<uint64_t>(v.GetInt("aggregator", "upload_chunk_kb")) * 1024;
  c.payload_digest = v.GetString("aggregator", "payload_digest") == "sha256" ? wire::DigestKind::kSha256
                                                                              : wire::DigestKind::kBlake3;

  LocalTrainingOptions& t = c.training;
  t.node_id = c.node_id;
  t.metrics_path = v.GetString("node", "metrics");
  FM_RETURN_IF_ERROR(ReadDataSourceSpec(v, &t.data));
  t.data.split_seed = static_cast<uint64_t>(v.GetInt("data", "seed"));
  t.partition.scheme = v.GetString("data", "partition");
  t.partition.alpha = v.GetFloat("data", "alpha");
  t.partition.shards_per_partition = static_cast<int>(v.GetInt("data", "shards"));
  t.partition.quantity_sigma = v.GetFloat("data", "quantity_sigma");
  t.partition.num_partitions = static_cast<int>(v.GetInt("data", "num_partitions"));
  t.partition.seed = static_cast<uint64_t>(v.GetInt("data", "seed"));
  t.index = static_cast<int>(v.GetInt("data", "index"));
  t.model.name = v.GetString("model", "name");
  if (const std::string onnx = v.GetString("model", "onnx"); !onnx.empty()) t.model.name = onnx;
  c.expect_model_sha256 = v.GetString("model", "expect_sha256");
  c.local_patterns = v.GetStringList("model", "local");
  t.seed = static_cast<uint64_t>(v.GetInt("model", "seed"));
  t.epochs = static_cast<int>(v.GetInt("train", "epochs"));
  t.trainer.batch_size = static_cast<int>(v.GetInt("train", "batch"));
  t.trainer.sgd.lr = static_cast<float>(v.GetFloat("train", "lr"));
  t.trainer.sgd.momentum = static_cast<float>(v.GetFloat("train", "momentum"));
  FM_RETURN_IF_ERROR(ReadLossOptions(v, &t.trainer.loss));
  t.trainer.sgd.weight_decay = static_cast<float>(v.GetFloat("train", "weight_decay"));
  t.trainer.sgd.prox_mu = static_cast<float>(v.GetFloat("train", "prox_mu"));
  t.threads = static_cast<int>(v.GetInt("train", "threads"));
  t.device = v.GetString("train", "device");
  FM_RETURN_IF_ERROR(AttributeToKey(CheckDeviceName(t.device), v, {{"", "train", "device"}}));
  t.engine = ParseBuiltinEngine(v.GetString("train", "engine")).value();  // Choices checked it
  ExternalTrainerOptions& x = c.external;
  x.node_id = c.node_id;
  x.argv = v.GetStringList("train", "external");
  x.per_task = v.GetString("train", "launch") == "per_task";
  x.endpoint = v.GetString("train", "external_endpoint");
  x.timeout_ms = static_cast<int64_t>(v.GetFloat("train", "external_timeout_s") * 1000.0);
  x.connect_timeout_ms = static_cast<int64_t>(v.GetFloat("train", "external_connect_timeout_s") * 1000.0);
  x.restart_backoff_ms = static_cast<int64_t>(v.GetFloat("train", "external_restart_backoff_s") * 1000.0);
  if (!c.config_path.empty()) {
    const std::filesystem::path dir = std::filesystem::path(c.config_path).parent_path();
    x.cwd = dir.empty() ? "." : dir.string();
  }
  if (!x.argv.empty() && !x.endpoint.empty()) {
    return AttributeToKey(Status::InvalidArgument("is set with [train] external: set one of them"), v,
                          {{"", "train", "external_endpoint"}});
  }
  if (!x.argv.empty() && x.argv[0].empty()) {
    return AttributeToKey(Status::InvalidArgument("starts with an empty program name"), v,
                          {{"", "train", "external"}});
  }
  if (!x.endpoint.empty() && (x.endpoint.rfind("ipc:///", 0) != 0 || x.endpoint.size() <= 7)) {
    return AttributeToKey(Status::InvalidArgument("must be ipc:// followed by an absolute path "
                                                  "(the trainer connects to a local socket, never TCP)"),
                          v, {{"", "train", "external_endpoint"}});
  }

  // The messages of ValidateLocalTrainingOptions (and the validators it calls) name these.
  static const std::vector<FieldKey> kFields = {
      {"index", "data", "index"},           {"num-partitions", "data", "num_partitions"},
      {"epochs", "train", "epochs"},        {"threads", "train", "threads"},
      {"model", "model", "name"},           {"batch size", "train", "batch"},
      {"learning rate", "train", "lr"},     {"momentum", "train", "momentum"},
      {"weight decay", "train", "weight_decay"}, {"FedProx mu", "train", "prox_mu"},
  };
  t.privacy = RecordPrivacyFromConfig(v);
  FM_RETURN_IF_ERROR(AttributeToKey(ValidateLocalTrainingOptions(t), v, kFields));
  if (t.privacy.enabled()) {
    std::string why;
    if (!x.argv.empty() || !x.endpoint.empty()) {
      why = "cannot be enforced on an external trainer's steps ([train] external): its own code "
            "trains, so record-level DP is its to apply";
    } else if (!v.GetString("gossip", "listen").empty()) {
      why = "is not wired into gossip training yet ([gossip] listen): use it with an aggregator";
    } else if (v.GetString("train", "mode") != "federated") {
      why = "is not wired into " + v.GetString("train", "mode") +
            " training yet ([train] mode): use it with an aggregator";
    } else if (t.device != "cpu") {
      why = "runs on the CPU backend in this version: set [train] device = \"cpu\"";
    }
    if (!why.empty()) {
      return AttributeToKey(Status::InvalidArgument("\"dp-sgd\" " + why), v, {{"", "privacy", "mode"}});
    }
  }
  FM_RETURN_IF_ERROR(AttributeToKey(CheckOnnxModelFile(v.GetString("model", "onnx")), v,
                                    {{"", "model", "onnx"}}));
  if (!c.expect_model_sha256.empty()) {
    bool hex = c.expect_model_sha256.size() == 64;
    for (char ch : c.expect_model_sha256) hex = hex && std::isxdigit(static_cast<unsigned char>(ch));
    if (!hex)
      return AttributeToKey(Status::InvalidArgument("expect_sha256 must be 64 hex digits, as "
                                                    "fedmesh-model inspect prints the graph hash"),
                            v, {{"", "model", "expect_sha256"}});
    for (char& ch : c.expect_model_sha256) ch = static_cast<char>(std::tolower(ch));
  }

  auto chain = codec::Chain::Parse(v.GetString("codec", "chain"));
  FM_RETURN_IF_ERROR(AttributeToKey(chain.status(), v, {{"", "codec", "chain"}}));
  c.codec_chain = chain->name();
  c.error_feedback.mode = codec::ParseFeedbackMode(v.GetString("codec", "error_feedback")).value();
  c.error_feedback.dgc_momentum = v.GetFloat("codec", "dgc_momentum");

  GossipConfig& g = c.gossip;
  g.listen = v.GetString("gossip", "listen");
  g.advertise = v.GetString("gossip", "advertise");
  g.seeds = v.GetStringList("gossip", "seeds");
  g.allow_dir = v.GetString("gossip", "allow");
  c.secagg_allow_dir = v.GetString("secagg", "allow");
  c.secagg_floors.min_clients = static_cast<size_t>(v.GetInt("secagg", "min_clients"));
  c.secagg_floors.min_threshold = static_cast<uint32_t>(v.GetInt("secagg", "min_threshold"));
  c.secagg_floors.min_noise_stddev = v.GetFloat("secagg", "min_noise_stddev");
  c.share_local_model = v.GetBool("eval", "share_local_model");
  c.metrics_listen = v.GetString("metrics", "listen");
  FM_RETURN_IF_ERROR(CheckHostPortKey(v, "metrics", "listen"));
  c.stats_policy.allow = v.GetBool("stats", "allow");
  c.stats_policy.min_count = static_cast<uint64_t>(v.GetInt("stats", "min_count"));
  c.stats_policy.minmax_noise = v.GetFloat("stats", "minmax_noise");
  c.stats_policy.max_bins_fraction = v.GetFloat("stats", "max_bins_fraction");
  c.stats_policy.quantiles = v.GetBool("stats", "quantiles");
  g.protocol = v.GetString("gossip", "protocol");
  g.topology = v.GetString("gossip", "topology");
  g.period_ms = v.GetInt("gossip", "period_ms");
  g.fanout = v.GetInt("gossip", "fanout");
  g.local_steps = v.GetInt("gossip", "local_steps");
  g.choco_gamma = v.GetFloat("gossip", "choco_gamma");
  g.join_timeout_ms = v.GetInt("gossip", "join_timeout_ms");
  g.probe_interval_ms = v.GetInt("gossip", "probe_interval_ms");
  g.suspicion_timeout_ms = v.GetInt("gossip", "suspicion_timeout_ms");
  g.eval_every = v.GetInt("gossip", "eval_every");
  g.checkpoint_every = v.GetInt("gossip", "checkpoint_every");
  g.max_steps = v.GetInt("gossip", "max_steps");
  g.lr_decay = v.GetString("gossip", "lr_decay");
  g.lr_min_fraction = v.GetFloat("gossip", "lr_min_fraction");
  FM_RETURN_IF_ERROR(ReadCollectiveConfig(v, c));
  FM_RETURN_IF_ERROR(ReadSplitConfig(v, c));
  if (c.collective.enabled || c.split.enabled) {
    // Checked above; allreduce mode has no aggregator to reach.
  } else if (g.enabled()) {
    if (g.lr_decay == "cosine" && g.max_steps == 0) {
      return AttributeToKey(
          Status::InvalidArgument("cosine needs [gossip] max_steps > 0 (the step it decays to)"), v,
          {{"", "gossip", "lr_decay"}});
    }
    for (const std::string& seed : g.seeds) {
      const size_t at = seed.find('@');
      if (at == 0 || at == std::string::npos || at + 1 == seed.size()) {
        return AttributeToKey(
            Status::InvalidArgument("seed \"" + seed +
                                    "\" is not site-id@endpoint, e.g. site-2@tcp://10.0.0.2:7100"),
            v, {{"", "gossip", "seeds"}});
      }
    }
  } else {
    for (const char* key : {"endpoint", "public_key"}) {
      if (v.GetString("aggregator", key).empty()) {
        return AttributeToKey(
            Status::InvalidArgument(std::string("is required: set it, or set [gossip] listen "
                                                "for serverless mode")),
            v, {{"", "aggregator", key}});
      }
    }
  }
  return c;
}

// A list of "site-id@endpoint" naming every member once, this site included.
static Status CheckGroupList(const ConfigValues& v, const std::vector<std::string>& list, const std::string& node_id,
                             const char* section, const char* key, const char* example) {
  auto bad = [&](const std::string& why) { return AttributeToKey(Status::InvalidArgument(why), v, {{"", section, key}}); };
  std::set<std::string> ids;
  bool me = false;
  for (const std::string& m : list) {
    const size_t at = m.find('@');
    if (at == 0 || at == std::string::npos || at + 1 == m.size()) {
      return bad("member \"" + m + "\" is not site-id@endpoint, e.g. " + example);
    }
    if (!ids.insert(m.substr(0, at)).second) return bad("lists " + m.substr(0, at) + " twice");
    me = me || m.substr(0, at) == node_id;
  }
  if (!me) return bad("does not list this site ([node] id " + node_id + ")");
  return Status::OK();
}

static Status ReadSplitConfig(const ConfigValues& v, NodeConfig& c) {
  SplitConfig& k = c.split;
  k.enabled = v.GetString("train", "mode") == "split";
  k.role = v.GetString("split", "role");
  k.listen = v.GetString("split", "listen");
  FM_RETURN_IF_ERROR(CheckEndpointKey(v, "split", "listen", EndpointUse::kBind));
  k.peers = v.GetStringList("split", "peers");
  k.allow_dir = v.GetString("split", "allow");
  k.id_column = v.GetString("split", "id_column");
  k.bottom = v.GetString("split", "bottom");
  k.top = v.GetString("split", "top");
  k.microbatches = v.GetInt("split", "microbatches");
  k.staleness = v.GetInt("split", "staleness");
  k.noise = v.GetFloat("split", "noise");
  k.compression = v.GetString("split", "compression");
  k.combine = v.GetString("split", "combine");
  k.timeout_ms = v.GetInt("split", "timeout_ms");
  k.checkpoint_every = v.GetInt("split", "checkpoint_every");
  k.rejoin_timeout_ms = v.GetInt("split", "rejoin_timeout_ms");
  k.share_part = v.GetBool("split", "share_part");
  k.assemble = v.GetString("split", "assemble");
  k.security = v.GetString("split", "security");
  if (!k.enabled) return Status::OK();
  auto bad = [&](const std::string& why, const char* section, const char* key) {
    return AttributeToKey(Status::InvalidArgument(why), v, {{"", section, key}});
  };
  if (k.role.empty()) return bad("is required in split mode: label or feature", "split", "role");
  if (k.listen.empty()) return bad("is required in split mode: this party's bind endpoint", "split", "listen");
  if (k.peers.size() < 2) return bad("lists every party as site-id@endpoint, this one included: at least two", "split", "peers");
  FM_RETURN_IF_ERROR(CheckGroupList(v, k.peers, c.node_id, "split", "peers", "lab@tcp://10.0.0.2:7300"));
  const bool first = k.peers[0].substr(0, k.peers[0].find('@')) == c.node_id;
  if (first != (k.role == "label")) {
    return bad("lists the label party first (its own columns come first in the top model's input): " +
                   std::string(k.role == "label" ? "put this site first" : "this site is a feature party, not first"),
               "split", "peers");
  }
  if (k.id_column.empty()) return bad("is required in split mode: the column of record ids to align on", "split", "id_column");
  if (k.bottom.empty()) return bad("is required in split mode: this party's part of the model (.onnx)", "split", "bottom");
  FM_RETURN_IF_ERROR(AttributeToKey(CheckOnnxModelFile(k.bottom), v, {{"", "split", "bottom"}}));
  if (k.role == "label") {
    if (k.top.empty()) return bad("is required on the label party: the model over the bottom outputs (.onnx)", "split", "top");
    FM_RETURN_IF_ERROR(AttributeToKey(CheckOnnxModelFile(k.top), v, {{"", "split", "top"}}));
    if (c.training.data.label_column.empty()) return bad("is required on the label party", "data", "label_column");
    if (k.share_part) return bad("is for feature parties: the label party assembles ([split] assemble)", "split", "share_part");
  } else {
    if (!k.assemble.empty()) return bad("is for the label party only", "split", "assemble");
    if (!k.top.empty()) return bad("is for the label party only", "split", "top");
    if (k.staleness != 0) return bad("is for the label party only: it decides when steps begin", "split", "staleness");
    if (k.combine != "concat") return bad("is for the label party only: it joins the bottom outputs", "split", "combine");
    if (!c.training.data.label_column.empty()) {
      return bad("is for the label party only: a feature party holds no label", "data", "label_column");
    }
  }
  if (!c.training.data.train.starts_with("csv:")) {
    return bad("split mode reads a table: set dataset = \"csv:PATH\"", "data", "dataset");
  }
  if (c.training.data.missing == "drop") {
    return bad("\"drop\" would leave rows out after the parties aligned them: use \"error\" or \"impute_mean\"",
               "data", "missing");
  }
  if (std::find(c.training.data.features.begin(), c.training.data.features.end(), k.id_column) !=
      c.training.data.features.end()) {
    return bad("lists the id column " + k.id_column + ": ids are never features", "data", "features");
  }
  if (!c.gossip.listen.empty()) return bad("split mode has no gossip: unset [gossip] listen", "train", "mode");
  if (c.external.enabled()) return bad("split mode trains in process: unset [train] external", "train", "mode");
  if (c.training.device != "cpu") {
    return bad("split mode runs on the CPU backend in this version: set [train] device = \"cpu\"", "train", "mode");
  }
  return Status::OK();
}

static Status ReadCollectiveConfig(const ConfigValues& v, NodeConfig& c) {
  CollectiveConfig& k = c.collective;
  k.enabled = v.GetString("train", "mode") == "allreduce";
  k.listen = v.GetString("collective", "listen");
  FM_RETURN_IF_ERROR(CheckEndpointKey(v, "collective", "listen", EndpointUse::kBind));
  k.group = v.GetStringList("collective", "group");
  k.allow_dir = v.GetString("collective", "allow");
  k.sync_every = v.GetInt("collective", "sync_every");
  k.compression = v.GetString("collective", "compression");
  k.chunk_kb = v.GetInt("collective", "chunk_kb");
  k.security = v.GetString("collective", "security");
  k.timeout_ms = v.GetInt("collective", "timeout_ms");
  k.elastic = v.GetBool("collective", "elastic");
  k.reform_window_ms = v.GetInt("collective", "reform_window_ms");
  k.min_members = v.GetInt("collective", "min_members");
  k.swim = v.GetBool("collective", "swim");
  k.swim_probe_ms = v.GetInt("collective", "swim_probe_ms");
  k.swim_suspicion_ms = v.GetInt("collective", "swim_suspicion_ms");
  if (!k.enabled) return Status::OK();
  auto bad = [&](const std::string& why, const char* section, const char* key) {
    return AttributeToKey(Status::InvalidArgument(why), v, {{"", section, key}});
  };
  if (k.listen.empty()) return bad("is required in allreduce mode: this rank's bind endpoint", "collective", "listen");
  if (k.group.empty()) return bad("is required in allreduce mode: every member as site-id@endpoint", "collective", "group");
  FM_RETURN_IF_ERROR(CheckGroupList(v, k.group, c.node_id, "collective", "group", "site-2@tcp://10.0.0.2:7200"));
  if (k.min_members > static_cast<int64_t>(k.group.size())) {
    return bad("is " + std::to_string(k.min_members) + " but the group has " + std::to_string(k.group.size()) +
                   " members",
               "collective", "min_members");
  }
  if (k.swim) {
    if (!k.elastic) return bad("needs [collective] elastic = true (SWIM tells the elastic ring who died)", "collective", "swim");
    std::set<std::string> ring;
    for (const std::string& e : k.group) ring.insert(e.substr(e.find('@') + 1));
    for (const std::string& endpoint : ring) {
      auto swim = SwimEndpoint(endpoint);
      if (!swim.ok()) {
        return bad("needs tcp://host:port endpoints with a free port above (SWIM listens on port + 1); " +
                       swim.status().message(),
                   "collective", "group");
      }
      if (ring.count(*swim) > 0) {
        return bad("SWIM listens on each member's port + 1, but " + *swim + " is another member's ring endpoint",
                   "collective", "group");
      }
    }
    if (auto l = SwimEndpoint(k.listen); !l.ok()) return bad(l.status().message(), "collective", "listen");
  }
  if (!c.gossip.listen.empty()) return bad("allreduce mode has no gossip: unset [gossip] listen", "train", "mode");
  if (c.external.enabled()) return bad("allreduce mode trains in process: unset [train] external", "train", "mode");
  return Status::OK();
}

}  // namespace fedmesh
