// The two baselines every federated experiment is read against:
//   local    each of the first clients_per_round clients trains alone on its own data,
//            local_epochs per round; the metrics report the mean over the first
//            eval_clients of them. Federated training must beat this.
//   central  all clients' data pooled into one training set, one model, local_epochs
//            passes per round. The upper bound.
// Simulated time advances by the slowest client's compute time (local) or by the pooled
// data at the median compute speed (central). Nothing is sent: bytes are 0.
#include <algorithm>
#include <numeric>

#include "node/fit_task_runner.h"
#include "sim/client_traits.h"
#include "sim/sim_modes.h"

namespace fedmesh::sim_internal {

Result<std::vector<float>> RunLocalMode(SimContext& ctx) {
  const SimOptions& o = ctx.options;
  const size_t k = o.clients_per_round;
  std::vector<std::vector<float>> params(k, ctx.initial), velocity(k);
  double now = 0;
  for (uint64_t round = 1; round <= o.rounds; ++round) {
    FM_RETURN_IF_ERROR(ctx.workers.Run(k, [&](size_t c, Model& model) {
      return TrainClient(ctx, model, c, round, params[c], velocity[c]);
    }));
    ctx.client_updates += k;
    double slowest = 0;
    for (size_t c = 0; c < k; ++c) {
      slowest = std::max(slowest, static_cast<double>(o.local_epochs) *
                                      static_cast<double>(ctx.data.SizeOf(c)) /
                                      TraitsOf(o, c).samples_per_s);
    }
    now += slowest;
    SimRoundMetrics m;
    m.round = round;
    m.sim_time_s = now;
    m.participants = k;
    if (IsEvalRound(ctx, round)) {
      const size_t e = std::min<size_t>(o.eval_clients, k);
      double acc = 0, loss = 0;
      for (size_t c = 0; c < e; ++c) {
        FM_ASSIGN_OR_RETURN(EvalStats s, Evaluate(ctx, params[c]));
        acc += s.accuracy;
        loss += s.loss;
      }
      m.test_accuracy = acc / static_cast<double>(e);
      m.test_loss = loss / static_cast<double>(e);
    }
    FM_RETURN_IF_ERROR(ctx.report(m));
  }
  return params[0];
}

Result<std::vector<float>> RunCentralMode(SimContext& ctx) {
  const SimOptions& o = ctx.options;
  // The union of every shard any client holds (all of them when clients >= shards).
  std::vector<uint32_t> pooled;
  const size_t shards = std::min<uint64_t>(ctx.data.shards.size(), o.clients);
  for (size_t s = 0; s < shards; ++s) {
    pooled.insert(pooled.end(), ctx.data.shards[s].begin(), ctx.data.shards[s].end());
  }
  std::sort(pooled.begin(), pooled.end());
  const Dataset data = ctx.data.train.Subset(pooled);
  // One model on one worker: a single-thread backend, like every client, so the result does
  // not depend on the thread count.
  Model& model = ctx.workers.model(0);
  FM_RETURN_IF_ERROR(model.SetParams(ctx.initial));
  TrainerOptions t = o.trainer;
  SeededEnv env(nullptr, FitSeed(o.seed, "central", 0));
  Trainer trainer(&model, t, &env);
  double now = 0;
  for (uint64_t round = 1; round <= o.rounds; ++round) {
    for (int e = 0; e < o.local_epochs; ++e) FM_RETURN_IF_ERROR(trainer.TrainEpoch(data).status());
    ctx.client_updates += 1;
    now += static_cast<double>(o.local_epochs) * static_cast<double>(data.size()) / o.compute_speed;
    SimRoundMetrics m;
    m.round = round;
    m.sim_time_s = now;
    m.participants = 1;
    if (IsEvalRound(ctx, round)) {
      const std::vector<float> params = model.GetParams();
      FM_ASSIGN_OR_RETURN(EvalStats s, Evaluate(ctx, params));
      FM_RETURN_IF_ERROR(model.SetParams(params));  // Evaluate used the workers' models
      m.test_accuracy = s.accuracy;
      m.test_loss = s.loss;
    }
    FM_RETURN_IF_ERROR(ctx.report(m));
  }
  return model.GetParams();
}

}  // namespace fedmesh::sim_internal
