// fedmesh-sim --set sim.mode=allreduce: clients_per_round ranks (clients 0 .. k - 1) train one
// model together as [train] mode = "allreduce" does with sync_every = a round's local work:
// every round each rank trains its local epochs from the shared model, then the ranks
// average their models exactly with the ring all-reduce, run by the real RingCollective
// engines over virtual links (collective/virtual_ring.h): rank r's link to r + 1 is its
// uplink ([clients] up_mbps, latency_ms). A round lasts the slowest rank's training plus
// the all-reduce; its metrics line carries allreduce_s and the bandwidth bound beside it.
//
// Failures follow the elastic ring (collective/elastic_steps.h): a rank down in a round
// ([faults] crash, [clients] availability) does not train; one that drops out ([sim]
// dropout) trains and never answers. Either way, when a member of the last round's ring is
// gone, the others wait [collective] timeout_ms for it, re-form the ring ([collective]
// reform_window_ms) and average without it; a rank that comes back re-forms the ring and
// takes the model (a broadcast along the ring). The round's allreduce_s includes that time.
// Only the missing ranks' work is lost.
#include <algorithm>

#include "collective/virtual_ring.h"
#include "sim/client_traits.h"
#include "sim/sim_modes.h"

namespace fedmesh::sim_internal {
namespace {

bool IsDown(const SimOptions& o, uint64_t r, uint64_t round) {
  for (const CrashEvent& e : o.crashes) {
    if (e.client == r && round >= e.round && (e.rounds_down == 0 || round < e.round + e.rounds_down)) return true;
  }
  return !IsAvailable(o, TraitsOf(o, r), round);
}

}  // namespace

Result<std::vector<float>> RunAllreduceMode(SimContext& ctx) {
  const SimOptions& o = ctx.options;
  const size_t k = std::min<uint64_t>(o.clients_per_round, o.clients);
  std::vector<float> params = ctx.initial;
  std::vector<std::vector<float>> local(k), velocity(k);
  std::vector<collective::VirtualLink> links(k);
  for (size_t r = 0; r < k; ++r) {
    const NodeLink l = TraitsOf(o, r).link;
    links[r] = {l.latency_s, std::max(l.up_bytes_per_s, 1.0)};
  }
  const uint64_t model_bytes = params.size() * sizeof(float);
  std::vector<bool> was_member(k, true);  // the ring starts with every rank
  double now = 0;
  for (uint64_t round = 1; round <= o.rounds; ++round) {
    // Who trains (up), who of them drops out mid-round, who averages (members).
    std::vector<size_t> up, members;
    for (size_t r = 0; r < k; ++r) {
      if (IsDown(o, r, round)) continue;
      up.push_back(r);
      if (!DropsOut(o, r, round)) members.push_back(r);
    }
    std::vector<collective::VirtualLink> ring_links;
    collective::VirtualLink slowest{0.0, 1e300};
    for (size_t r : members) {
      ring_links.push_back(links[r]);
      if (links[r].bytes_per_s < slowest.bytes_per_s) slowest = links[r];
    }
    // A rank that was not in the ring takes the model when it joins: the ring re-forms and
    // broadcasts (pipelined along the ring: one model's time on the slowest link, plus a
    // latency per hop).
    double reform_s = 0;
    bool joined = false, lost = false;
    for (size_t r : members) joined = joined || !was_member[r];
    for (size_t r = 0; r < k; ++r) lost = lost || (was_member[r] && !std::count(members.begin(), members.end(), r));
    if (joined && members.size() > 1) {
      double hops = 0;
      for (size_t r : members) hops = std::max(hops, links[r].latency_s);
      reform_s += o.allreduce_reform_s + static_cast<double>(model_bytes) / slowest.bytes_per_s +
                  static_cast<double>(members.size() - 1) * hops;
    }
    for (size_t r : up) local[r] = params;
    FM_RETURN_IF_ERROR(ctx.workers.Run(up.size(), [&](size_t i, Model& model) {
      return TrainClient(ctx, model, up[i], round, local[up[i]], velocity[up[i]]);
    }));
    ctx.client_updates += up.size();
    double compute = 0;
    for (size_t r : up) {
      compute = std::max(compute, static_cast<double>(o.local_epochs) * static_cast<double>(ctx.data.SizeOf(r)) /
                                      TraitsOf(o, r).samples_per_s);
    }
    // A member of the last ring that is gone (crashed, or dropped out mid-round) is waited
    // for, then the ring re-forms without it.
    if (lost) reform_s += o.allreduce_timeout_s + o.allreduce_reform_s;
    SimRoundMetrics m;
    m.round = round;
    m.participants = members.size();
    m.dropped = k - members.size();
    if (!members.empty()) {
      std::vector<std::vector<float>> buffers;
      for (size_t r : members) buffers.push_back(std::move(local[r]));
      FM_ASSIGN_OR_RETURN(collective::VirtualRingResult ring,
                          collective::VirtualAllreduce(buffers, ring_links, collective::ReduceOp::kAverage, 1 << 20));
      params = std::move(buffers[0]);
      m.bytes_up = ring.bytes_sent;
      m.bytes_down = ring.bytes_sent;
      m.allreduce_s = ring.seconds + reform_s;
      m.allreduce_bound_s =
          collective::RingAllreduceBoundSeconds(static_cast<int>(members.size()), model_bytes, slowest);
      now += compute + ring.seconds + reform_s;
    } else {
      m.allreduce_s = reform_s;  // nobody left to average with: the model stays
      now += compute + reform_s;
    }
    for (size_t r = 0; r < k; ++r) was_member[r] = false;
    for (size_t r : members) was_member[r] = true;
    m.sim_time_s = now;
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
