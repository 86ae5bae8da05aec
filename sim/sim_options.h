// SimOptions: one fedmesh-sim experiment, as the simulator (sim/simulation.h) runs it.
// fedmesh-sim fills it from a TOML config (sim/sim_config.h, keys in docs/config.md); tests
// fill it directly. Every default below is the config key's default.
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aggregator/round_engine.h"
#include "aggregator/strategy.h"
#include "core/codec/error_feedback.h"
#include "core/data/data_source.h"
#include "core/model_zoo.h"
#include "core/status.h"
#include "core/trainer.h"
#include "node/record_privacy.h"
#include "gossip/averager.h"

namespace fedmesh {

enum class SimMode { kAggregator, kGossip, kLocal, kCentral, kAllreduce, kSplit };
// "aggregator", "gossip", "local", "central".
Result<SimMode> ParseSimMode(std::string_view name);
std::string_view SimModeName(SimMode mode);

// What a Byzantine client does to its update (local change) before encoding it.
enum class Attack { kSignFlip, kScaled, kNoise };
Result<Attack> ParseAttack(std::string_view name);  // "signflip", "scaled", "noise"

// A scheduled crash: client `client` (its index) goes down as round `round` opens (after
// its selection: a selected client is silent that round) and registers again as round
// `round + rounds_down` opens, selectable from the round after; rounds_down 0 = never.
// When too few clients are connected for any round to open, the next rejoin happens at
// once. A client down from round 1 registers only when it comes back. Gossip mode: the
// client is down in rounds [round, round + rounds_down).
struct CrashEvent {
  uint64_t client = 0;
  uint64_t round = 1;
  uint64_t rounds_down = 0;
};
// "INDEX@ROUND" or "INDEX@ROUND:ROUNDS_DOWN", e.g. "3@5:2". InvalidArgument otherwise.
Result<CrashEvent> ParseCrashEvent(std::string_view text);

// split mode (sim/split_mode.cc): split training of one model cut across `parties`
// parties in virtual time.
struct SplitSimOptions {
  // Parties: the label party and parties - 1 feature parties; party p holds the p-th of
  // `parties` contiguous blocks of the feature columns. 2..16. Default 2.
  uint32_t parties = 2;
  // Micro-batches per step, pipelined (GPipe). 1..1024. Default 1 (none).
  uint32_t microbatches = 1;
  // Each bottom model: an mlp of one hidden layer of `hidden` units (0: a single Gemm) with
  // `cut` outputs; the top model: one Gemm over the parts' concatenated outputs. Defaults
  // 128 and 64.
  uint32_t hidden = 128;
  uint32_t cut = 64;
  // Steps per round (0: one pass over the training rows). Default 0.
  uint64_t steps_per_round = 0;
  // 0: exact steps; 1: the next step begins before this one is done (vertical/split_label_party.h),
  // drained at each round's end. Default 0.
  uint32_t staleness = 0;
};

struct SimOptions {
  SimMode mode = SimMode::kAggregator;
  // Registered virtual clients, 1..10,000,000. Only those training in a round hold a model.
  uint64_t clients = 100;
  // aggregator: selected per round; local: clients simulated (the first ones). >= 1.
  uint32_t clients_per_round = 10;
  uint32_t rounds = 50;  // >= 1
  uint64_t seed = 0;     // model init, selection, partition, client traits, faults
  // Training workers (each with its own model workspace); 0 = all cores.
  int threads = 0;
  // aggregator mode: clients trained at once by one BatchedTrainer (core/batched/) on
  // `device`; 0 = off, each client on a worker's model. Needs a Dense/ReLU/Dropout model
  // (logreg, mlp). Results are those of per-client training on the CPU, to float rounding
  // on a GPU.
  uint32_t batched_clients = 0;
  // Where batched training runs: "cpu", "auto" (a GPU when present), "cuda" or "cuda:N".
  // Per-client training (batched_clients = 0) always runs on the CPU workers.
  std::string device = "cpu";
  std::string metrics_path;  // JSON lines, one per round; empty = none
  // Per-client state between selections (error-feedback residuals, momentum buffers) kept in
  // memory up to this many MiB; beyond it the least recently used go to a scratch SQLite
  // file (sim/client_state_store.h) at state_spill_path (empty = a temporary file).
  uint64_t state_memory_mb = 1024;
  std::string state_spill_path;

  // Data (sim/sim_data.h): the source and how its rows become samples ([data] keys, the
  // same as fedmesh-node's; data.train defaults to fashion-mnist). The central test set is
  // data.test, else the source's own test split, else data.test_fraction of the rows held
  // out per class; client c trains on partition (c mod data_shards) of the rest.
  // data.split_seed is not read: the hold-outs are seeded by `seed`.
  DataSourceSpec data;
  std::string partition = "dirichlet";  // iid | dirichlet | shards | quantity
  double alpha = 0.5;
  uint64_t data_shards = 0;  // 0 = clients (one partition each); must be <= train samples
  // Test samples used for evaluation; 0 = the whole test split.
  uint64_t test_samples = 0;
  uint32_t eval_every = 1;  // rounds between evaluations (and the last round always)
  // gossip and local modes: how many clients' models are evaluated (the first ones); the
  // metrics report their mean. >= 1.
  uint32_t eval_clients = 10;
  // Federated evaluation (aggregator mode; aggregator/federated_eval.h): after the rounds
  // that eval_every picks, and the last, the engine sends every connected client an
  // evaluate_only task and each answers with RunEvalTask on its own held-out rows:
  // client_test_fraction of its shard (per class, seeded by `seed`), taken out of the
  // shard before training, so they are never trained on. Off: clients train on their whole
  // shard. Clients sharing a shard share its held-out rows.
  bool federated_eval = false;
  double client_test_fraction = 0.2;  // in (0, 1) when federated_eval
  int eval_min_sites = 1;             // fewest answers for federated metrics, >= 1
  double eval_timeout_s = 120.0;      // virtual seconds an evaluation waits for answers
  // The metrics file gets one line per answering client when at most this many answered
  // (else only the "*" line); 0 = never.
  uint32_t eval_site_lines = 100;

  SplitSimOptions split;  // split mode only
  // allreduce mode, the elastic ring's costs ([collective] of fedmesh-node): a rank that
  // drops out of a round is taken for dead after timeout_s, and re-forming the ring (also
  // when a rank comes back) takes reform_s. Defaults 60 and 3, as fedmesh-node's.
  double allreduce_timeout_s = 60.0;
  double allreduce_reform_s = 3.0;

  ModelSpec model;  // mlp by default
  // Local training: epochs per round, batch, lr, momentum (in every FitTask).
  int local_epochs = 1;
  TrainerOptions trainer = [] {
    TrainerOptions t;
    t.sgd.lr = 0.05f;
    return t;
  }();

  // [privacy]: every client trains with DP-SGD and keeps its own ledger (node/record_privacy.h),
  // refusing tasks past epsilon_budget, exactly as fedmesh-node; the noise is seeded from
  // (seed, client, round). Aggregator mode, per-client training (batched_clients = 0), Dense
  // models on the CPU. Off by default.
  RecordPrivacyOptions privacy;

  // aggregator mode: the round engine's settings.
  std::string strategy = "fedavg";  // any MakeStrategy name
  StrategyOptions strategy_options;  // [rounds] prox_mu and the [strategy] table
  // Fewest answers a round closes with at its deadline; 0 = ceil(0.5 * clients_per_round).
  uint32_t min_clients = 0;
  double round_timeout_s = 600.0;  // virtual seconds from a round's opening to its deadline
  // kBuffered: FedBuff (aggregator/round_engine.h); buffer_size 0 = min_clients' default.
  RoundMode round_mode = RoundMode::kSynchronous;
  uint32_t buffer_size = 0;
  uint32_t max_staleness = 10;
  std::string codec = "none";      // update chain (aggregator) / payload chain (gossip)
  std::string downlink = "none";   // aggregator: the global model's chain in FitTasks
  // aggregator: RoundEngineOptions::update_prediction (beta; 0 = off), synchronous rounds
  double update_prediction = 0.0;
  codec::ErrorFeedbackOptions error_feedback;

  // gossip mode.
  std::string protocol = "dpsgd";
  std::string topology = "exponential";
  uint32_t fanout = 1;
  double choco_gamma = 0.2;

  // Client heterogeneity: log-normal around each median, drawn per client from the seed.
  double compute_speed = 2000.0;   // samples per second of local training, median
  double compute_sigma = 0.5;
  double stragglers = 0.0;         // fraction of clients that are straggler_slowdown x slower
  double straggler_slowdown = 10.0;
  double up_mbps = 10.0;           // uplink megabits per second, median
  double down_mbps = 50.0;         // downlink, median
  double bandwidth_sigma = 0.5;
  double latency_ms = 50.0;        // one-way access latency, median (log-normal sigma 0.5)
  // Each client is online for `availability` of every `availability_period` rounds (a
  // window at a random phase); a selected client outside its window does not answer.
  double availability = 1.0;
  uint32_t availability_period = 24;

  // Faults.
  double dropout = 0.0;       // per selected client and round: trains but never answers
  double message_loss = 0.0;  // per message
  std::vector<CrashEvent> crashes;
  double byzantine = 0.0;     // fraction of clients that attack
  Attack attack = Attack::kSignFlip;
  double attack_scale = 10.0;
};

// InvalidArgument naming the field and what to change.
Status Validate(const SimOptions& options);

// The gossip averaging settings of `options` (protocol, topology, fanout, codec, choco
// gamma); InvalidArgument for an unknown protocol or topology. Not yet Validate'd.
Result<AveragingOptions> AveragingOptionsFor(const SimOptions& options);
// The aggregator mode's strategy options: strategy_options with [dp]'s expected_clients and
// population (when 0) set to clients_per_round and clients (sampling rate q =
// clients_per_round / clients) and, for reproducible runs, its noise keyed from the seed (a
// real aggregator draws its key from the OS).
StrategyOptions StrategyOptionsFor(const SimOptions& options);

}  // namespace fedmesh
