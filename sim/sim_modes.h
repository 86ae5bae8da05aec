// The simulation modes behind RunSimulation (sim/simulation.h), each in its own file:
// aggregator_mode.cc, gossip_mode.cc, baseline_modes.cc (local and central),
// allreduce_mode.cc, split_mode.cc. They share a
// SimContext and report each round through it. Internal to sim/.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "core/batched/batched_trainer.h"
#include "core/model.h"
#include "core/status.h"
#include "core/trainer.h"
#include "core/rng.h"
#include "sim/client_shards.h"
#include "sim/in_process_network.h"
#include "sim/rank_group.h"
#include "sim/sim_data.h"
#include "sim/simulation.h"
#include "sim/workspaces.h"

namespace fedmesh::sim_internal {

// Header::federation_id of every simulated message.
inline constexpr char kSimFederation[] = "fedmesh-sim";

// The network every mode runs on: the [clients] links come from ClientTraits; the shared
// link adds only the configured message loss.
inline LinkModel SimLinkModel(const SimOptions& o) { return LinkModel{0.0, 0.0, o.message_loss}; }
inline uint64_t SimNetworkSeed(const SimOptions& o) { return SplitMix64(o.seed ^ 0x6e6574ull); }

struct SimContext {
  const SimOptions& options;
  const SimData& data;
  ModelSpec spec;                 // with the data's shapes
  Workspaces& workers;
  std::vector<float> initial;     // the model every mode starts from (seed-initialised)
  // Called once per round, in order; writes the metrics line and the progress line.
  std::function<Status(const SimRoundMetrics&)> report;
  // Called for each federated evaluation as it closes (aggregator mode): writes its
  // metrics lines and a progress line.
  std::function<Status(const SimFederatedEval&)> report_eval = {};
  uint64_t client_updates = 0;    // local trainings run (modes add to it)
  // Batched aggregator mode: wall seconds in BatchedTrainer::Train and in finishing the
  // clients' updates on the workers (where a batched round's time goes).
  double batched_train_seconds = 0.0;
  double batched_finish_seconds = 0.0;
  std::string stopped_early = {}; // why an aggregator run ended before its last round
  // aggregator mode with [sim] batched_clients > 0: trains the pending clients in groups;
  // null otherwise.
  BatchedTrainer* batched = nullptr;
  // The ranks of the run (never null) and which clients this rank owns; a mode other
  // than aggregator runs only with one rank.
  RankGroup* ranks = nullptr;
  ClientShards shards = {};
  bool sharded() const { return ranks->size() > 1; }
};

Result<std::vector<float>> RunAggregatorMode(SimContext& ctx);
Result<std::vector<float>> RunGossipMode(SimContext& ctx);
Result<std::vector<float>> RunLocalMode(SimContext& ctx);
Result<std::vector<float>> RunCentralMode(SimContext& ctx);
Result<std::vector<float>> RunAllreduceMode(SimContext& ctx);
Result<std::vector<float>> RunSplitMode(SimContext& ctx);

// Test-set accuracy and loss of `params`, evaluated on the workers chunk by chunk (sharded:
// each rank evaluates every R-th chunk and the ranks exchange the chunks' figures; a
// collective).
Result<EvalStats> Evaluate(SimContext& ctx, std::span<const float> params);
// Whether `round` (1-based) is evaluated on the central test set: every eval_every rounds
// and the last, when there is a central test set.
bool IsEvalRound(const SimContext& ctx, uint64_t round);
// Local training of one client for one round outside the round engine (gossip, local):
// local_epochs over its data from `params` (updated in place), with the client's momentum
// buffer, batch order from FitSeed(seed, id, round).
Status TrainClient(const SimContext& ctx, Model& model, uint64_t client, uint64_t round,
                   std::vector<float>& params, std::vector<float>& velocity,
                   double* mean_loss = nullptr);

}  // namespace fedmesh::sim_internal
