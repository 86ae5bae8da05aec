// fedmesh-sim --set sim.mode=split: split training (docs/vertical.md) of one model cut
// across [split] parties, in virtual time, to see what micro-batching does to the step
// time over given links. The real sans-IO parties (vertical::LabelParty, FeatureParty)
// train on the simulator's data cut by columns (party p: the p-th contiguous block; party
// 0 holds the labels; every party holds every row, as after PSI); their messages are
// encoded as on the wire (fp16/bf16/int8 with [sim] codec) and delivered by a discrete-event
// loop:
//  - a message from party p leaves on p's uplink ([clients] up_mbps, latency_ms of client
//    p), one at a time in the order sent: it arrives after its bytes / up rate + latency;
//  - each party works on one thing at a time, in arrival order; what it costs is counted
//    in floating-point operations of its part: 2 per parameter per row forward, 4 backward,
//    at a rate of client p's samples_per_s x 6 x the parameters of [sim] model (the
//    model the speed is quoted for). A gradient goes back through the activations its
//    forward kept (vertical/split_part.h: no recomputation).
//  - the label party's own bottom backward runs in its idle time (as LabelParty::DoIdleWork
//    does); what idle time did not cover is paid before the next step begins.
// Each round (steps_per_round steps, or a pass over the rows) writes step_s, the mean
// virtual step time, and idle_fraction, the share of it the label party waited.
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <queue>
#include <tuple>
#include <utility>

#include "core/rng.h"
#include "node/fit_task_runner.h"
#include "sim/client_traits.h"
#include "sim/sim_modes.h"
#include "vertical/split_feature_party.h"
#include "vertical/split_label_party.h"
#include "vertical/split_messages.h"
#include "vertical/split_part.h"

namespace fedmesh::sim_internal {
namespace {

using vertical::FeatureParty;
using vertical::LabelParty;
using vertical::SplitMessage;
using vertical::SplitMessageType;
using vertical::SplitPart;

// Columns [from, to) of the training rows then the test rows; labels (and targets) only
// for the label party.
Dataset ColumnBlock(const Dataset& train, const Dataset& test, size_t from, size_t to, bool label) {
  Dataset out;
  out.sample_shape = {static_cast<int>(to - from)};
  out.num_classes = train.num_classes;
  out.target_dim = label ? train.target_dim : 0;
  for (const Dataset* d : {&train, &test}) {
    for (size_t r = 0; r < d->size(); ++r) {
      const float* s = d->sample(r);
      out.features.insert(out.features.end(), s + from, s + to);
      out.labels.push_back(label ? d->labels[r] : 0);
      if (label && d->target_dim > 0) out.targets.insert(out.targets.end(), d->target(r), d->target(r) + d->target_dim);
    }
  }
  return out;
}

Result<std::unique_ptr<SplitPart>> Part(int in, uint32_t hidden, int out, uint64_t seed,
                                        const vertical::SplitPartOptions& o) {
  ModelSpec spec;
  spec.name = hidden > 0 ? "mlp" : "logreg";
  spec.input_shape = {in};
  spec.num_classes = out;
  if (hidden > 0) spec.hidden = {static_cast<int>(hidden)};
  return SplitPart::FromBuiltin(spec, seed, o);
}

Result<vertical::CutWire> WireOf(const std::string& codec) {
  auto w = vertical::CutWireOfCompression(codec);
  if (!w.ok()) {
    return Status::InvalidArgument("split mode sends activations and gradients as none, fp16, bf16 or int8; [sim] codec is \"" +
                                   codec + "\"");
  }
  return *w;
}

// The discrete-event network and the parties' clocks.
class SplitNetwork {
 public:
  struct Party {
    double busy_until = 0;  // when it finishes what it has started
    double link_free = 0;   // when its uplink is free
    double busy_s = 0;      // compute time spent
    double up_bytes_per_s = 1;
    double latency_s = 0;
    double flops_per_s = 1;
  };

  explicit SplitNetwork(std::vector<Party> parties) : parties_(std::move(parties)) {}

  Party& party(int p) { return parties_[static_cast<size_t>(p)]; }
  uint64_t bytes_from_label() const { return bytes_from_label_; }
  uint64_t bytes_from_features() const { return bytes_from_features_; }

  // `m` leaves party `from` at `t` (after what its uplink already carries).
  Status Send(int from, int to, const SplitMessage& m, double t) {
    FM_ASSIGN_OR_RETURN(std::string bytes, vertical::EncodeSplitMessage(m));
    // Decoded as the receiver would: fp16/bf16 rounding included.
    FM_ASSIGN_OR_RETURN(SplitMessage got, vertical::DecodeSplitMessage(bytes));
    Party& p = party(from);
    const double start = std::max(t, p.link_free);
    const double tx = static_cast<double>(bytes.size()) / p.up_bytes_per_s;
    p.link_free = start + tx;
    (from == 0 ? bytes_from_label_ : bytes_from_features_) += bytes.size();
    queue_.push(Event{start + tx + p.latency_s, next_seq_++, from, to, std::move(got)});
    return Status::OK();
  }

  struct Event {
    double t = 0;
    uint64_t seq = 0;
    int from = 0, to = 0;
    SplitMessage m;
  };
  bool empty() const { return queue_.empty(); }
  Event Pop() {
    Event e = queue_.top();
    queue_.pop();
    return e;
  }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
  };
  std::vector<Party> parties_;
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  uint64_t next_seq_ = 0;
  uint64_t bytes_from_label_ = 0, bytes_from_features_ = 0;
};

struct SplitRun {
  std::unique_ptr<LabelParty> label;
  std::vector<std::unique_ptr<FeatureParty>> features;  // party p = features[p - 1]
  std::vector<double> bottom_params;                     // per party
  double top_params = 0;
  double own_debt_s = 0;  // the label party's deferred own-bottom backward, not yet run
  // Per (training, step, micro-batch): feature parties' activations in. Kept across passes:
  // with staleness 1 the next step's come while this one runs.
  std::map<std::tuple<bool, uint64_t, uint32_t>, int> arrived;
};

// Feature party ev.to handles ev.m when it is free; its replies leave when it is done.
Status DeliverToFeatureParty(SplitRun& run, SplitNetwork& net, const SplitNetwork::Event& ev) {
  SplitNetwork::Party& f = net.party(ev.to);
  const double start = std::max(ev.t, f.busy_until);
  std::vector<SplitMessage> replies;
  FM_RETURN_IF_ERROR(run.features[static_cast<size_t>(ev.to - 1)]->Handle(ev.m, &replies));
  const double params = run.bottom_params[static_cast<size_t>(ev.to)];
  const double rows = static_cast<double>(ev.m.rows);
  double cost = 0;
  if (ev.m.type == SplitMessageType::kForward) cost = 2 * params * rows / f.flops_per_s;
  if (ev.m.type == SplitMessageType::kGradients) cost = 4 * params * rows / f.flops_per_s;
  f.busy_until = start + cost;
  f.busy_s += cost;
  for (SplitMessage& m : replies) FM_RETURN_IF_ERROR(net.Send(ev.to, 0, m, f.busy_until));
  return Status::OK();
}

// Runs one pass from virtual time `t0` to the label party's end of it; returns that time.
// A training pass may have been begun by the call before (staleness 1); `next`, when not
// empty, is the following step's rows, begun now too.
Result<double> RunPass(SplitRun& run, SplitNetwork& net, std::span<const uint64_t> rows,
                       std::span<const uint64_t> next, uint32_t micro, bool training, double t0) {
  const int feature_parties = static_cast<int>(run.features.size());
  SplitNetwork::Party& label = net.party(0);
  const double begin = std::max(t0, label.busy_until);
  const auto begin_pass = [&](std::span<const uint64_t> r) -> Status {
    FM_ASSIGN_OR_RETURN(std::vector<vertical::Outgoing> out, run.label->Begin(r, micro, training));
    for (auto& [to, m] : out) FM_RETURN_IF_ERROR(net.Send(0, to, m, begin));
    return Status::OK();
  };
  const uint64_t step = run.label->steps_completed();
  if (run.label->passes_in_flight() == 0) FM_RETURN_IF_ERROR(begin_pass(rows));
  if (!next.empty() && run.label->passes_in_flight() == 1) FM_RETURN_IF_ERROR(begin_pass(next));
  const auto done = [&] { return training ? run.label->steps_completed() > step : run.label->pass_done(); };
  while (!done()) {
    if (net.empty()) return Status::Internal("split mode: the parties went quiet before the pass ended");
    SplitNetwork::Event ev = net.Pop();
    const double rows_in = static_cast<double>(ev.m.rows);
    if (ev.to == 0) {
      // Idle time before this arrival runs the deferred own-bottom work.
      if (ev.t > label.busy_until && run.own_debt_s > 0) {
        const double used = std::min(ev.t - label.busy_until, run.own_debt_s);
        run.own_debt_s -= used;
        label.busy_s += used;
        label.busy_until += used;
      }
      const double start = std::max(ev.t, label.busy_until);
      std::vector<vertical::Outgoing> replies;
      FM_RETURN_IF_ERROR(run.label->OnActivations(ev.from, ev.m, &replies));
      double cost = 0;
      const auto key = std::make_tuple(ev.m.training, ev.m.step, ev.m.micro);
      if (++run.arrived[key] == feature_parties) {  // the micro-batch is processed
        run.arrived.erase(key);
        const double top = training ? 6 * run.top_params : 2 * run.top_params;
        cost = (2 * run.bottom_params[0] + top) * rows_in / label.flops_per_s;
        if (training) run.own_debt_s += 4 * run.bottom_params[0] * rows_in / label.flops_per_s;
      }
      label.busy_until = start + cost;
      label.busy_s += cost;
      for (auto& [to, m] : replies) FM_RETURN_IF_ERROR(net.Send(0, to, m, label.busy_until));
    } else {
      FM_RETURN_IF_ERROR(DeliverToFeatureParty(run, net, ev));
    }
  }
  if (training) {  // what idle time did not cover runs before the next step
    label.busy_until += run.own_debt_s;
    label.busy_s += run.own_debt_s;
    run.own_debt_s = 0;
  }
  return label.busy_until;
}

}  // namespace

Result<std::vector<float>> RunSplitMode(SimContext& ctx) {
  const SimOptions& o = ctx.options;
  const SplitSimOptions& sp = o.split;
  const Dataset& train = ctx.data.train;
  const Dataset& test = ctx.data.test;
  const size_t width = train.sample_size();
  const int parties = static_cast<int>(sp.parties);
  if (width < static_cast<size_t>(parties)) {
    return Status::InvalidArgument("split mode: " + std::to_string(width) + " feature columns cannot be cut into " +
                                   std::to_string(parties) + " parties ([split] parties)");
  }
  if (train.size() < 2) return Status::InvalidArgument("split mode needs at least 2 training rows");
  FM_ASSIGN_OR_RETURN(vertical::CutWire wire, WireOf(o.codec));
  const int classes = train.target_dim > 0 ? train.target_dim : train.num_classes;

  // Parts: a bottom per party over its columns, the top over their concatenated outputs.
  vertical::SplitPartOptions po;
  po.lr = o.trainer.sgd.lr;
  po.momentum = o.trainer.sgd.momentum;
  SplitRun run;
  std::unique_ptr<SplitPart> own_bottom;
  Dataset label_block;
  std::vector<SplitNetwork::Party> links(static_cast<size_t>(parties));
  const double full_params = static_cast<double>(ctx.initial.size());
  for (int p = 0; p < parties; ++p) {
    const size_t from = width * static_cast<size_t>(p) / static_cast<size_t>(parties);
    const size_t to = width * static_cast<size_t>(p + 1) / static_cast<size_t>(parties);
    FM_ASSIGN_OR_RETURN(std::unique_ptr<SplitPart> bottom,
                        Part(static_cast<int>(to - from), sp.hidden, static_cast<int>(sp.cut),
                             SplitMix64(o.seed ^ (0xb0770ull + static_cast<uint64_t>(p))), po));
    run.bottom_params.push_back(static_cast<double>(bottom->model().num_flat()));
    Dataset block = ColumnBlock(train, test, from, to, p == 0);
    if (p == 0) {  // the label party: created below, once the top exists
      own_bottom = std::move(bottom);
      label_block = std::move(block);
    } else {
      vertical::FeaturePartyOptions fo;
      fo.wire = wire;
      FM_ASSIGN_OR_RETURN(auto party, FeatureParty::CreateAligned(std::move(bottom), std::move(block), fo));
      run.features.push_back(std::move(party));
    }
    const ClientTraits traits = TraitsOf(o, static_cast<uint64_t>(p));
    links[static_cast<size_t>(p)].up_bytes_per_s = std::max(traits.link.up_bytes_per_s, 1.0);
    links[static_cast<size_t>(p)].latency_s = traits.link.latency_s;
    links[static_cast<size_t>(p)].flops_per_s = traits.samples_per_s * 6 * full_params;
  }
  vertical::SplitPartOptions top_o = po;
  top_o.input_gradients = true;
  FM_ASSIGN_OR_RETURN(std::unique_ptr<SplitPart> top,
                      Part(static_cast<int>(sp.cut) * parties, 0, classes, SplitMix64(o.seed ^ 0x70bull), top_o));
  run.top_params = static_cast<double>(top->model().num_flat());
  std::vector<int> peers(static_cast<size_t>(parties - 1));
  std::iota(peers.begin(), peers.end(), 1);
  vertical::LabelPartyOptions lo;
  lo.loss = o.trainer.loss;
  lo.staleness = sp.staleness;
  lo.wire = wire;
  FM_ASSIGN_OR_RETURN(run.label, LabelParty::Create(std::move(own_bottom), std::move(top),
                                                    std::move(label_block), peers, lo));
  SplitNetwork net(std::move(links));

  // Rows: the training rows 0 .. n-1, shuffled every pass; the test rows after them.
  const uint64_t n = train.size();
  std::vector<uint64_t> test_rows(test.size());
  std::iota(test_rows.begin(), test_rows.end(), n);
  const uint64_t batch = static_cast<uint64_t>(o.trainer.batch_size);
  std::vector<uint64_t> order(n);
  uint64_t cursor = n, epoch = 0;
  auto next_batch = [&]() {
    if (cursor >= n) {  // a new pass over the rows, in a seeded order
      std::iota(order.begin(), order.end(), 0);
      Rng rng(FitSeed(o.seed, "split", epoch++));
      for (uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.UniformInt(i)]);
      cursor = 0;
    }
    uint64_t take = std::min(batch, n - cursor);
    // A remainder too small for every micro-batch (or for batch statistics) joins this one.
    if (n - cursor - take < std::max<uint64_t>(sp.microbatches, 2)) take = n - cursor;
    std::vector<uint64_t> rows(order.begin() + static_cast<ptrdiff_t>(cursor),
                               order.begin() + static_cast<ptrdiff_t>(cursor + take));
    cursor += take;
    return rows;
  };
  const uint64_t per_pass = std::max<uint64_t>(1, n / batch);
  const uint64_t steps = sp.steps_per_round > 0 ? sp.steps_per_round : per_pass;

  double now = 0;
  for (uint64_t round = 1; round <= o.rounds; ++round) {
    const double t_start = std::max(now, net.party(0).busy_until);
    const double busy_before = net.party(0).busy_s;
    const uint64_t up_before = net.bytes_from_features(), down_before = net.bytes_from_label();
    double t = t_start;
    std::vector<uint64_t> rows = next_batch(), ahead;
    for (uint64_t s = 0; s < steps; ++s) {
      // Staleness 1: the next step's rows too (the label party begins it now), but not past
      // the round's end, where the parties drain.
      ahead = sp.staleness > 0 && s + 1 < steps ? next_batch() : std::vector<uint64_t>();
      FM_ASSIGN_OR_RETURN(t, RunPass(run, net, rows, ahead, sp.microbatches, true, t));
      rows = s + 1 < steps && ahead.empty() ? next_batch() : std::move(ahead);
    }
    ctx.client_updates += steps;
    SimRoundMetrics m;
    m.round = round;
    m.participants = static_cast<uint64_t>(parties);
    m.step_s = (t - t_start) / static_cast<double>(steps);
    m.idle_fraction = std::clamp(1.0 - (net.party(0).busy_s - busy_before) / std::max(t - t_start, 1e-12), 0.0, 1.0);
    if (IsEvalRound(ctx, round) && !test_rows.empty()) {
      FM_ASSIGN_OR_RETURN(t, RunPass(run, net, test_rows, {}, sp.microbatches, false, t));
      const auto metrics = run.label->pass_metrics();
      if (auto it = metrics.find("accuracy"); it != metrics.end()) m.test_accuracy = it->second;
      m.test_loss = run.label->pass_loss();
    }
    m.bytes_up = net.bytes_from_features() - up_before;
    m.bytes_down = net.bytes_from_label() - down_before;
    now = t;
    m.sim_time_s = now;
    FM_RETURN_IF_ERROR(ctx.report(m));
  }
  // The last step's gradients still in flight reach the feature parties.
  while (!net.empty()) {
    SplitNetwork::Event ev = net.Pop();
    if (ev.to == 0) return Status::Internal("split mode: activations after the last pass");
    FM_RETURN_IF_ERROR(DeliverToFeatureParty(run, net, ev));
  }
  // The parts, in order: the label party's bottom and top, then each feature party's bottom.
  FM_RETURN_IF_ERROR(run.label->Flush());
  std::vector<float> parts;
  auto append = [&](SplitPart& part) {
    parts.insert(parts.end(), part.model().params(), part.model().params() + part.model().num_flat());
  };
  append(run.label->bottom());
  append(run.label->top());
  for (auto& f : run.features) append(f->bottom());
  return parts;
}

}  // namespace fedmesh::sim_internal
