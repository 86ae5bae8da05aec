// fedmesh-sim --set sim.mode=allreduce: clients_per_round ranks (clients 0 .. k - 1) train one
// model together as [train] mode = "allreduce" does with sync_every = a round's local work:
// every round each rank trains its local epochs from the shared model, then the ranks
// average their models exactly with the ring all-reduce, run by the real RingCollective
// engines over virtual links (collective/virtual_ring.h): rank r's link to r + 1 is its
// uplink ([clients] up_mbps, latency_ms). A round lasts the slowest rank's training plus
// the all-reduce; its metrics line carries allreduce_s and the bandwidth bound beside it.
#include <algorithm>

#include "collective/virtual_ring.h"
#include "sim/client_traits.h"
#include "sim/sim_modes.h"

namespace fedmesh::sim_internal {

Result<std::vector<float>> RunAllreduceMode(SimContext& ctx) {
  const SimOptions& o = ctx.options;
  const size_t k = std::min<uint64_t>(o.clients_per_round, o.clients);
  std::vector<float> params = ctx.initial;
  std::vector<std::vector<float>> local(k), velocity(k);
  std::vector<collective::VirtualLink> links(k);
  collective::VirtualLink slowest{0.0, 1e300};
  for (size_t r = 0; r < k; ++r) {
    const NodeLink l = TraitsOf(o, r).link;
    links[r] = {l.latency_s, std::max(l.up_bytes_per_s, 1.0)};
    if (links[r].bytes_per_s < slowest.bytes_per_s) slowest = links[r];
  }
  double now = 0;
  for (uint64_t round = 1; round <= o.rounds; ++round) {
    for (size_t r = 0; r < k; ++r) local[r] = params;
    FM_RETURN_IF_ERROR(ctx.workers.Run(k, [&](size_t r, Model& model) {
      return TrainClient(ctx, model, r, round, local[r], velocity[r]);
    }));
    ctx.client_updates += k;
    double compute = 0;
    for (size_t r = 0; r < k; ++r) {
      compute = std::max(compute, static_cast<double>(o.local_epochs) * static_cast<double>(ctx.data.SizeOf(r)) /
                                      TraitsOf(o, r).samples_per_s);
    }
    FM_ASSIGN_OR_RETURN(collective::VirtualRingResult ring,
                        collective::VirtualAllreduce(local, links, collective::ReduceOp::kAverage, 1 << 20));
    params = local[0];
    now += compute + ring.seconds;
    SimRoundMetrics m;
    m.round = round;
    m.sim_time_s = now;
    m.participants = k;
    m.bytes_up = ring.bytes_sent;
    m.bytes_down = ring.bytes_sent;
    m.allreduce_s = ring.seconds;
    m.allreduce_bound_s =
        collective::RingAllreduceBoundSeconds(static_cast<int>(k), params.size() * sizeof(float), slowest);
    if (IsEvalRound(ctx, round)) {
      FM_ASSIGN_OR_RETURN(EvalStats s, Evaluate(ctx, params));
      m.test_accuracy = s.accuracy;
      m.test_loss = s.loss;
    }
    FM_RETURN_IF_ERROR(ctx.report(m));
  }
  return params;
}

}  // namespace fedmesh::sim_internal
