#include "sim/sim_config.h"


#include <algorithm>

#include "aggregator/strategy.h"
#include "core/model_zoo.h"
#include "config/config_loader.h"
#include "config/data_source_config.h"
#include "config/loss_config.h"
#include "aggregator/strategy_config.h"

namespace fedmesh {

const ConfigSchema& SimConfigSchema() {
  static const ConfigSchema* schema = [] {
    auto* s = new ConfigSchema;
    s->name = "fedmesh-sim";
    s->description =
        "One simulated experiment: many virtual clients on this machine, in virtual time, "
        "running the same round engine, strategies, codecs and gossip protocols as the "
        "binaries. The [sim] keys say what is run; the other sections tune it.";
    s->keys = {
        StringKey("sim", "mode", "aggregator",
                  "aggregator (round engine + strategy), gossip (no server), local (each "
                  "client alone: the baseline), central (all data pooled: the upper bound) or "
                  "allreduce (clients_per_round ranks average exactly over a ring every round; "
                  "docs/collectives.md) or split (one model cut across [split] parties, "
                  "pipelined micro-batches; docs/vertical.md)")
            .Choices({"aggregator", "gossip", "local", "central", "allreduce", "split"}),
        IntKey("sim", "clients", 100, "Registered virtual clients; only those training hold a model")
            .Min(1)
            .Max(10000000),
        IntKey("sim", "clients_per_round", 10,
               "aggregator: clients selected per round; local: clients simulated")
            .Min(1)
            .Max(10000000),
        IntKey("sim", "rounds", 50, "Rounds (gossip: steps of local training + one gossip step)")
            .Min(1)
            .Max(1000000),
        StringKey("sim", "model", "mlp", "Model architecture").Choices(KnownModelNames()),
        StringKey("sim", "onnx", "",
                  "ONNX file of the model (torch.onnx.export); replaces [sim] model. Trained per "
                  "client (the batched trainer takes built-in models only)")
            .Path(PathKind::kPath),
        StringKey("sim", "partition", "dirichlet", "How the training data is split among clients")
            .Choices({"iid", "dirichlet", "shards", "quantity"}),
        FloatKey("sim", "alpha", 0.5, "dirichlet: label concentration; 0.1 = few classes per client, 100 = near IID")
            .Min(0, true),
        StringKey("sim", "strategy", "fedavg", "aggregator: the aggregation strategy")
            .Choices([] {
              std::vector<std::string> v;
              for (auto n : KnownStrategyNames()) v.emplace_back(n);
              return v;
            }()),
        StringKey("sim", "protocol", "dpsgd", "gossip: pushpull, dpsgd, choco or pushsum")
            .Choices({"pushpull", "dpsgd", "choco", "pushsum"}),
        StringKey("sim", "topology", "exponential",
                  "gossip: random, ring, exponential or one_peer_exponential")
            .Choices({"random", "ring", "exponential", "one_peer_exponential"}),
        StringKey("sim", "codec", "none",
                  "Codec chain of updates (aggregator) or gossiped models (gossip), e.g. "
                  "topk:0.01|int8 (docs/codecs.md)"),
        FloatKey("sim", "dropout", 0.0,
                 "Probability that a selected client trains but never answers, per round")
            .Min(0)
            .Max(1),
        IntKey("sim", "seed", 0, "Seed of everything: model init, split, selection, client traits, faults").Min(0),
        IntKey("sim", "threads", 0, "Training workers (one model workspace each); 0 = all cores")
            .Min(0)
            .Max(4096),
        IntKey("sim", "batched_clients", 0,
               "aggregator mode only: train up to this many clients at once with one batched "
               "trainer on [sim] device (logreg and mlp); 0 = one client per worker thread. "
               "On cpu the results equal those of 0 (docs/simulation.md)")
            .Min(0)
            .Max(100000),
        StringKey("sim", "device", "cpu",
                  "Where batched_clients train: cpu, auto (a CUDA GPU when present, else "
                  "cpu), cuda or cuda:N. Per-client training always runs on the CPU workers"),
        StringKey("sim", "metrics", "", "Per-round metrics as JSON lines; empty = none").Path(),
        IntKey("sim", "state_memory_mb", 1024,
               "Client state between selections (error-feedback residuals, momentum) kept in "
               "memory up to this many MiB; the least recently used beyond it spill to SQLite")
            .Min(0),
        StringKey("sim", "state_spill", "",
                  "SQLite scratch file for spilled client state; empty = a temporary file "
                  "(deleted at the end either way)")
            .Path(),
        IntKey("data", "shards", 0,
               "Partitions of the training data; client c trains on shard c mod shards. "
               "0 = one per client (needs clients <= training samples)")
            .Min(0)
            .Max(10000000),
        IntKey("data", "test_samples", 0,
               "Central test samples evaluated (the first ones); 0 = the whole test set")
            .Min(0),
        FloatKey("data", "client_test_fraction", 0.2,
                 "[eval] federated only: the fraction of each client's shard (per class, seeded "
                 "by [sim] seed) held out as its own test data and never trained on; without "
                 "federated evaluation clients train on their whole shard")
            .Min(0)
            .Max(1, true),
        IntKey("eval", "every", 1,
               "Rounds between evaluations on the central test set and, with federated, on the "
               "clients (the last round always)")
            .Min(1)
            .Max(1000000),
        BoolKey("eval", "federated", false,
                "aggregator mode: after the evaluated rounds every connected client evaluates "
                "the global model on its held-out rows ([data] client_test_fraction) and the "
                "metrics get a \"*\" line with the example-weighted figures "
                "(docs/evaluation.md)"),
        IntKey("eval", "min_sites", 1,
               "Fewest client answers for a federated evaluation to report federated metrics")
            .Min(1),
        FloatKey("eval", "timeout_s", 120.0,
                 "Virtual seconds a federated evaluation waits for the clients' answers")
            .Min(0, true),
        IntKey("eval", "site_lines", 100,
               "Federated evaluation: one metrics line per client when at most this many "
               "answered, else only the \"*\" line; 0 = never")
            .Min(0),
        IntKey("eval", "clients", 10, "gossip and local: clients whose models are evaluated (mean)")
            .Min(1)
            .Max(100000),
        IntKey("train", "epochs", 1, "Local passes over a client's data per round").Min(1).Max(1000),
        IntKey("train", "batch", 32, "Samples per SGD step").Min(1).Max(1000000),
        FloatKey("train", "lr", 0.05, "SGD learning rate").Min(0, true),
        FloatKey("train", "momentum", 0.0, "Heavy-ball momentum, kept per client across rounds")
            .Min(0)
            .Max(1, true),
        FloatKey("rounds", "prox_mu", 0.01, "fedprox: proximal coefficient mu").Min(0, true),
        IntKey("rounds", "min_clients", 0,
               "Fewest answers a round closes with at its deadline; 0 = half of clients_per_round")
            .Min(0),
        FloatKey("rounds", "timeout_s", 600.0, "Virtual seconds from a round's opening to its deadline")
            .Min(0, true),
        StringKey("rounds", "downlink", "none",
                  "Codec chain of the global model sent to clients (none, fp16, bf16, int8, qsgd:N)"),
        FloatKey("rounds", "update_prediction", 0.0,
                 "Update prediction beta: FitTasks also carry beta x the last global change, "
                 "clients send their change minus it (helps sparse codecs; doubles the "
                 "downlink with downlink = none); 0 = off")
            .Min(0)
            .Max(1),
        StringKey("rounds", "error_feedback", "auto",
                  "Error feedback on clients: auto, off, residual or dgc")
            .Choices({"auto", "off", "residual", "dgc"}),
        IntKey("split", "parties", 2,
               "split mode: the label party and parties - 1 feature parties, each holding one "
               "contiguous block of the feature columns (party p: the p-th; the links and "
               "speeds of clients 0 .. parties - 1)")
            .Min(2)
            .Max(16),
        IntKey("split", "microbatches", 1, "split mode: micro-batches per step, pipelined (GPipe)")
            .Min(1)
            .Max(1024),
        IntKey("split", "staleness", 0,
               "split mode: 0 = exact steps; 1 = the next step's forwards start before this step's gradients "
               "are back (weights one step old on the feature parties), drained at each round's end")
            .Min(0)
            .Max(1),
        IntKey("split", "hidden", 128, "split mode: hidden units of each bottom mlp; 0 = one Gemm")
            .Min(0)
            .Max(65536),
        IntKey("split", "cut", 64, "split mode: outputs of each bottom model (the cut layer's width)")
            .Min(1)
            .Max(65536),
        IntKey("split", "steps_per_round", 0,
               "split mode: training steps between metrics lines; 0 = one pass over the rows")
            .Min(0),
        IntKey("collective", "timeout_ms", 60000,
               "allreduce mode: virtual ms until a rank that dropped out is taken for dead (the "
               "elastic ring's detection, as fedmesh-node's key)")
            .Min(1),
        IntKey("collective", "reform_window_ms", 3000,
               "allreduce mode: virtual ms re-forming the ring takes, after a dropout or when a "
               "rank comes back (as fedmesh-node's key)")
            .Min(0),
        IntKey("gossip", "fanout", 1, "Peers per step for random topology and pushsum").Min(1).Max(1024),
        FloatKey("gossip", "choco_gamma", 0.2, "choco: consensus step size").Min(0, true).Max(1),
        FloatKey("clients", "compute_speed", 2000.0, "Median local training speed, samples per second")
            .Min(0, true),
        FloatKey("clients", "compute_sigma", 0.5, "Log-normal sigma of the speeds").Min(0),
        FloatKey("clients", "stragglers", 0.0, "Fraction of clients that are straggler_slowdown times slower")
            .Min(0)
            .Max(1),
        FloatKey("clients", "straggler_slowdown", 10.0, "How much slower a straggler is").Min(1),
        FloatKey("clients", "up_mbps", 10.0, "Median uplink, megabits per second").Min(0, true),
        FloatKey("clients", "down_mbps", 50.0, "Median downlink, megabits per second").Min(0, true),
        FloatKey("clients", "bandwidth_sigma", 0.5, "Log-normal sigma of the link rates").Min(0),
        FloatKey("clients", "latency_ms", 50.0, "Median one-way access latency, milliseconds").Min(0),
        FloatKey("clients", "availability", 1.0,
                 "Fraction of every availability_period rounds a client is online (a window "
                 "at a random phase); a selected client outside it does not answer")
            .Min(0, true)
            .Max(1),
        IntKey("clients", "availability_period", 24, "Rounds in one availability cycle").Min(1).Max(1000000),
        FloatKey("faults", "message_loss", 0.0, "Probability that any one message is lost").Min(0).Max(1),
        StringListKey("faults", "crash", {},
                      "Crash-and-rejoin schedule: \"INDEX@ROUND\" (down from that round on) or "
                      "\"INDEX@ROUND:ROUNDS_DOWN\" (registers again ROUNDS_DOWN rounds later)"),
        FloatKey("faults", "byzantine", 0.0, "Fraction of clients that send corrupted updates")
            .Min(0)
            .Max(1),
        StringKey("faults", "attack", "signflip",
                  "What a Byzantine client sends: signflip (-scale x its update), scaled "
                  "(scale x), noise (Gaussian, scale x its update's RMS)")
            .Choices({"signflip", "scaled", "noise"}),
        FloatKey("faults", "attack_scale", 10.0, "The attack's scale").Min(0),
    };
    // The loss keys sit after [train] momentum, where the docs list them.
    const auto momentum = std::find_if(s->keys.begin(), s->keys.end(), [](const ConfigKey& k) {
      return k.section == "train" && k.key == "momentum";
    });
    std::vector<ConfigKey> loss = LossConfigKeys(
        "Loss clients train with and the model is evaluated with (mse or huber for [data] regression)");
    s->keys.insert(momentum + 1, loss.begin(), loss.end());
    // The data source keys first in [data], as in fedmesh-node's schema.
    const auto shards = std::find_if(s->keys.begin(), s->keys.end(), [](const ConfigKey& k) {
      return k.section == "data" && k.key == "shards";
    });
    std::vector<ConfigKey> source =
        DataSourceConfigKeys("[sim] seed", "the central test set");
    s->keys.insert(shards, source.begin(), source.end());
    for (ConfigKey& k : RoundModeConfigKeys(0, "0 = half of clients_per_round")) {
      s->keys.push_back(std::move(k));
    }
    for (ConfigKey& k : StrategyConfigKeys()) s->keys.push_back(std::move(k));
    for (ConfigKey& k : RecordPrivacyKeys()) s->keys.push_back(std::move(k));
    return s;
  }();
  return *schema;
}

Result<SimOptions> LoadSimConfig(const std::string& path, const std::vector<std::string>& overrides) {
  FM_ASSIGN_OR_RETURN(ConfigValues v, LoadConfig(SimConfigSchema(), path, overrides));
  SimOptions o;
  auto u64 = [&](std::string_view s, std::string_view k) { return static_cast<uint64_t>(v.GetInt(s, k)); };
  o.mode = ParseSimMode(v.GetString("sim", "mode")).value();
  o.clients = u64("sim", "clients");
  o.clients_per_round = static_cast<uint32_t>(v.GetInt("sim", "clients_per_round"));
  o.rounds = static_cast<uint32_t>(v.GetInt("sim", "rounds"));
  o.model.name = v.GetString("sim", "model");
  if (const std::string onnx = v.GetString("sim", "onnx"); !onnx.empty()) o.model.name = onnx;
  o.partition = v.GetString("sim", "partition");
  o.split.parties = static_cast<uint32_t>(v.GetInt("split", "parties"));
  o.split.microbatches = static_cast<uint32_t>(v.GetInt("split", "microbatches"));
  o.split.staleness = static_cast<uint32_t>(v.GetInt("split", "staleness"));
  o.split.hidden = static_cast<uint32_t>(v.GetInt("split", "hidden"));
  o.split.cut = static_cast<uint32_t>(v.GetInt("split", "cut"));
  o.split.steps_per_round = u64("split", "steps_per_round");
  o.allreduce_timeout_s = static_cast<double>(v.GetInt("collective", "timeout_ms")) / 1000.0;
  o.allreduce_reform_s = static_cast<double>(v.GetInt("collective", "reform_window_ms")) / 1000.0;
  o.alpha = v.GetFloat("sim", "alpha");
  o.strategy = v.GetString("sim", "strategy");
  o.protocol = v.GetString("sim", "protocol");
  o.topology = v.GetString("sim", "topology");
  o.codec = v.GetString("sim", "codec");
  o.dropout = v.GetFloat("sim", "dropout");
  o.seed = u64("sim", "seed");
  o.threads = static_cast<int>(v.GetInt("sim", "threads"));
  o.batched_clients = static_cast<uint32_t>(v.GetInt("sim", "batched_clients"));
  o.device = v.GetString("sim", "device");
  o.metrics_path = v.GetString("sim", "metrics");
  o.state_memory_mb = u64("sim", "state_memory_mb");
  o.state_spill_path = v.GetString("sim", "state_spill");
  FM_RETURN_IF_ERROR(ReadDataSourceSpec(v, &o.data));
  o.data_shards = u64("data", "shards");
  o.test_samples = u64("data", "test_samples");
  o.client_test_fraction = v.GetFloat("data", "client_test_fraction");
  o.eval_every = static_cast<uint32_t>(v.GetInt("eval", "every"));
  o.federated_eval = v.GetBool("eval", "federated");
  o.eval_min_sites = static_cast<int>(v.GetInt("eval", "min_sites"));
  o.eval_timeout_s = v.GetFloat("eval", "timeout_s");
  o.eval_site_lines = static_cast<uint32_t>(v.GetInt("eval", "site_lines"));
  o.eval_clients = static_cast<uint32_t>(v.GetInt("eval", "clients"));
  o.local_epochs = static_cast<int>(v.GetInt("train", "epochs"));
  o.trainer.batch_size = static_cast<int>(v.GetInt("train", "batch"));
  o.trainer.sgd.lr = static_cast<float>(v.GetFloat("train", "lr"));
  o.trainer.sgd.momentum = static_cast<float>(v.GetFloat("train", "momentum"));
  FM_RETURN_IF_ERROR(ReadLossOptions(v, &o.trainer.loss));
  o.strategy_options.prox_mu = v.GetFloat("rounds", "prox_mu");
  ReadStrategyOptions(v, static_cast<uint32_t>(v.GetInt("sim", "clients_per_round")),
                      &o.strategy_options);
  o.min_clients = static_cast<uint32_t>(v.GetInt("rounds", "min_clients"));
  o.round_timeout_s = v.GetFloat("rounds", "timeout_s");
  o.round_mode = ReadRoundMode(v);
  o.buffer_size = static_cast<uint32_t>(v.GetInt("rounds", "buffer_size"));
  o.max_staleness = static_cast<uint32_t>(v.GetInt("rounds", "max_staleness"));
  o.downlink = v.GetString("rounds", "downlink");
  o.update_prediction = v.GetFloat("rounds", "update_prediction");
  o.error_feedback.mode = codec::ParseFeedbackMode(v.GetString("rounds", "error_feedback")).value();
  o.fanout = static_cast<uint32_t>(v.GetInt("gossip", "fanout"));
  o.choco_gamma = v.GetFloat("gossip", "choco_gamma");
  o.compute_speed = v.GetFloat("clients", "compute_speed");
  o.compute_sigma = v.GetFloat("clients", "compute_sigma");
  o.stragglers = v.GetFloat("clients", "stragglers");
  o.straggler_slowdown = v.GetFloat("clients", "straggler_slowdown");
  o.up_mbps = v.GetFloat("clients", "up_mbps");
  o.down_mbps = v.GetFloat("clients", "down_mbps");
  o.bandwidth_sigma = v.GetFloat("clients", "bandwidth_sigma");
  o.latency_ms = v.GetFloat("clients", "latency_ms");
  o.availability = v.GetFloat("clients", "availability");
  o.availability_period = static_cast<uint32_t>(v.GetInt("clients", "availability_period"));
  o.message_loss = v.GetFloat("faults", "message_loss");
  for (const std::string& text : v.GetStringList("faults", "crash")) {
    auto e = ParseCrashEvent(text);
    FM_RETURN_IF_ERROR(AttributeToKey(e.status(), v, {{"", "faults", "crash"}}));
    o.crashes.push_back(*e);
  }
  o.byzantine = v.GetFloat("faults", "byzantine");
  o.attack = ParseAttack(v.GetString("faults", "attack")).value();
  o.attack_scale = v.GetFloat("faults", "attack_scale");
  o.privacy = RecordPrivacyFromConfig(v);

  // The messages of Validate name these fields.
  static const std::vector<FieldKey> kFields = {
      {"clients_per_round", "sim", "clients_per_round"},
      {"clients must", "sim", "clients"},
      {"data_shards", "data", "shards"},
      {"data shards", "data", "shards"},
      {"buffer_size", "rounds", "buffer_size"},
      {"dp mode distributed", "dp", "mode"},
      {"central DP accounts synchronous rounds", "rounds", "mode"},
      {"min_clients", "rounds", "min_clients"},
      {"crash of client", "faults", "crash"},
      {"gossip mode", "sim", "clients"},
      {"codec", "sim", "codec"},
      {"downlink", "rounds", "downlink"},
      {"update_prediction", "rounds", "update_prediction"},
      {"choco", "sim", "protocol"},
      {"prox_mu", "rounds", "prox_mu"},
      {"server_lr", "strategy", "server_lr"},
      {"trim_fraction", "strategy", "trim_fraction"},
      {"byzantine_fraction", "strategy", "byzantine_fraction"},
      {"topology", "sim", "topology"},
      {"batched_clients", "sim", "batched_clients"},
      {"device", "sim", "device"},
      {"client_test_fraction", "data", "client_test_fraction"},
      {"test_fraction", "data", "test_fraction"},
      {"federated evaluation", "eval", "federated"},
      {"eval min_sites", "eval", "min_sites"},
      {"eval timeout_s", "eval", "timeout_s"},
      {"class_weights", "train", "class_weights"},
      {"pos_weight", "train", "pos_weight"},
      {"privacy mode", "privacy", "mode"},
      {"clip must", "privacy", "clip"},
      {"noise_multiplier must", "privacy", "noise_multiplier"},
      {"delta must", "privacy", "delta"},
      {"epsilon_budget must", "privacy", "epsilon_budget"},
      {"split parties", "split", "parties"},
      {"split microbatches", "split", "microbatches"},
      {"split staleness", "split", "staleness"},
      {"", "sim", "mode"},
  };
  FM_RETURN_IF_ERROR(AttributeToKey(Validate(o), v, kFields));
  return o;
}

}  // namespace fedmesh
