// RunSimulation: one fedmesh-sim experiment in virtual time, on one machine, with the real
// protocol code (DESIGN.md, "Simulation"):
//   aggregator  the RoundEngine and Strategy of fedmesh-aggregator, the RunFitTask of
//               fedmesh-node for every selected client, messages encoded with the real wire
//               codec and carried by the InProcessNetwork (per-client links)
//   gossip      every client an Averager (gossip/averager.h) stepping after each round of
//               local training; messages through the same network
//   local       each of the first clients_per_round clients trains alone (the baseline)
//   central     all clients' data pooled, one model (the upper bound)
// Virtual time advances by each client's compute time (samples / its speed) and the
// transfer time of the actual encoded bytes over its link. Training of the clients busy at
// the same time runs on `threads` workers, one model workspace each, or (aggregator mode,
// batched_clients > 0) in groups through one BatchedTrainer on `device`; results depend
// only on (seed, client, round), so a run is identical line for line whatever the thread
// count, and on the CPU whether batched or not.
// Sharded (aggregator mode, a RankGroup of R > 1 ranks, e.g. under mpirun): every rank runs
// the same engine and network from the same seed; client c's data, state and training live
// on rank c mod R, whose answers every rank receives in event order, so rank 0 writes the
// metrics file of the one-process run byte for byte (docs/simulation.md, "Over MPI").
// Thread-safety: RunSimulation blocks; it uses its own workers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/federated_eval.h"
#include "core/json_line.h"
#include "core/status.h"
#include "sim/rank_group.h"
#include "sim/sim_options.h"

namespace fedmesh {

// One line of the metrics file.
struct SimRoundMetrics {
  uint64_t round = 0;
  double sim_time_s = 0.0;                 // virtual seconds since the start
  std::optional<double> test_accuracy;     // empty in rounds not evaluated
  std::optional<double> test_loss;
  uint64_t participants = 0;               // updates aggregated / clients that trained
  uint64_t dropped = 0;                    // selected clients that did not contribute
  uint64_t bytes_up = 0;                   // encoded bytes clients sent this round
  uint64_t bytes_down = 0;                 // encoded bytes clients received this round
  std::optional<double> consensus_distance;  // gossip: mean ||x_i - mean x||^2
  std::optional<double> epsilon;           // [dp] central: privacy spent after this round
  std::optional<double> clip_norm;         // [dp] central: the clip bound of the next round
  // [privacy] dp-sgd: the largest epsilon any client has spent so far (each has its own).
  std::optional<double> dp_sgd_epsilon_max;
  // allreduce: the round's ring all-reduce in virtual seconds, and its bandwidth bound
  // 2 (N - 1) / N x bytes / (the slowest rank's uplink) (collective/virtual_ring.h).
  std::optional<double> allreduce_s;
  std::optional<double> allreduce_bound_s;
  // split: the mean virtual time of a training step this round, and the share of it the
  // label party spent waiting (for activations, or for feature parties to catch up).
  std::optional<double> step_s;
  std::optional<double> idle_fraction;
  JsonLine ToJson() const;                 // one line, fixed field order
};

// A federated evaluation (aggregator mode, [eval] federated): the round engine's report,
// as fedmesh-aggregator gets it, with the virtual time it closed at and the bytes it took.
struct SimFederatedEval {
  FederatedEvalReport report;
  double sim_time_s = 0.0;  // virtual seconds since the start, at the close
  uint64_t bytes_down = 0;  // encoded bytes of its evaluation tasks
  uint64_t bytes_up = 0;    // encoded bytes of the clients' answers
  // The metrics lines, as fedmesh-aggregator writes them ("federated_eval": true): one with
  // "site": "*" (sites_asked, sites_answered, times, bytes and, with at least min_sites
  // answers, num_examples, loss and every metric, example-weighted), then one per
  // answering client with its own figures when at most `site_lines` answered.
  std::vector<JsonLine> ToJson(uint32_t site_lines) const;
  // For people: "round 3 federated evaluation: 20/20 client(s), 2400 examples, loss 0.4321,
  // accuracy 0.8123".
  std::string Summary() const;
};

struct SimReport {
  std::vector<SimRoundMetrics> rounds;
  std::vector<SimFederatedEval> federated_evals;  // in the order they closed
  std::vector<float> final_model;  // aggregator / central: the global model; gossip: the
                                   // average of the live clients'; local: client 0's;
                                   // split: the parts (label bottom, top, feature bottoms)
  double wall_seconds = 0.0;
  // Of wall_seconds, the mode's run alone: the rounds, without loading the data and building
  // the workers (what a training-loop baseline times).
  double rounds_wall_seconds = 0.0;
  uint64_t client_updates = 0;     // local trainings run (on all ranks)
  // Of rounds_wall_seconds, with batched clients: BatchedTrainer::Train, and finishing the
  // updates (delta, codecs) on the workers; zero otherwise. This rank's.
  double batched_train_seconds = 0.0;
  double batched_finish_seconds = 0.0;
  // How clients trained: "per client on N CPU workers" or "batched, up to B clients at
  // once on <ops name>".
  std::string training;
  uint64_t peak_rss_bytes = 0;     // of this process at the end (VmHWM)
  // Sharded runs: every rank's peak RSS, by rank; empty in a one-process run.
  std::vector<uint64_t> rank_peak_rss_bytes;
  // Why the run ended before options.rounds (a [dp] epsilon_budget); empty otherwise.
  std::string stopped_early;
};

// Runs `options` (Validate first). `progress` gets one human-readable line per round and
// per federated evaluation (may be empty). Writes options.metrics_path when set. Errors:
// InvalidArgument for bad options, NotFound / DataLoss from the dataset, Internal when a
// protocol core fails.
// With `ranks` of size R > 1, every rank calls it with the same options (CheckShardable:
// aggregator mode, R <= clients); only rank 0 writes the metrics file and calls
// `progress`. A rank that fails returns its error while the others may wait for it: the
// caller then calls ranks->Abort. Null `ranks`: one process.
Result<SimReport> RunSimulation(const SimOptions& options,
                                const std::function<void(const std::string&)>& progress = {},
                                RankGroup* ranks = nullptr);

// The id of client `index` in messages and metrics: "c" and 7 digits ("c0000042"), so ids
// sort like indices (the round engine aggregates in id order).
std::string SimClientId(uint64_t index);

}  // namespace fedmesh
