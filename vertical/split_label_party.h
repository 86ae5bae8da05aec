// LabelParty: the party of split training that holds the label (and columns of its own).
// It drives the job: each pass over a batch of rows (a training step, or an evaluation)
// asks every feature party for its bottom model's activations of each micro-batch at once,
// and as soon as one micro-batch's activations are all in it runs its own bottom model, the
// top model over [own | peer 1 | peer 2 ...] (columns concatenated in that order, or with
// `combine` sum, own + peer 1 + peer 2 ...), the loss, and backward, sending each feature
// party the gradient of its own columns (with sum: of the whole, the same for all; plus Gaussian
// noise of std `noise`, a fresh secret draw). While it works on micro-batch m the feature
// parties compute m + 1 (GPipe pipelining). Gradients are summed over the step's
// micro-batches (each scaled by its share of the batch, so the step is one batch's mean
// loss) and applied once per step. With `staleness` 1 the next training step may begin
// before this one is done (PipeDream-style pipelining across steps): the feature parties
// then run its forwards on weights one step old (their gradients stay exact for the
// weights used, vertical/split_part.h), which hides the link's round trip; the label
// party's own bottom and top stay exact (it works on one step at a time, in order).
// Sans-IO: Begin() and OnActivations() give the messages. Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/data/dataset.h"
#include "core/loss.h"
#include "core/metrics.h"
#include "core/rng.h"
#include "vertical/cut_combine.h"
#include "vertical/split_messages.h"
#include "vertical/split_part.h"

namespace fedmesh::vertical {

struct LabelPartyOptions {
  LossOptions loss;  // Default softmax cross-entropy.
  // Standard deviation of the Gaussian noise on the gradients sent to feature parties.
  // Default 0 (none).
  double noise = 0.0;
  // How gradients travel. Default float32.
  CutWire wire = CutWire::kFloat32;
  // Training steps that may begin before the oldest one in flight is done: 0 (exact
  // synchronous SGD) or 1 (the feature parties' forwards of step s + 1 run before step s's
  // update). Default 0.
  uint32_t staleness = 0;
  // How the bottom outputs become the top's input (vertical/cut_combine.h). Default concat.
  CutCombine combine = CutCombine::kConcat;
};

// A message and the rank it goes to.
using Outgoing = std::pair<int, SplitMessage>;

class LabelParty {
 public:
  // `data`: the label party's aligned rows (features and labels), `peers`: the feature
  // parties' ranks in column order. InvalidArgument when the own bottom's width is not the
  // data's, the top's output does not fit the loss, or (sum) the top's input is not the own
  // bottom's width.
  static Result<std::unique_ptr<LabelParty>> Create(std::unique_ptr<SplitPart> bottom, std::unique_ptr<SplitPart> top,
                                                    Dataset data, std::vector<int> peers,
                                                    const LabelPartyOptions& options);

  // Starts a pass over `rows` (indices into the data) in `micro` micro-batches: a training
  // step (numbered steps_completed() + the training passes in flight) or an evaluation.
  // FailedPrecondition unless no pass is in flight, or this is a training pass and fewer
  // than 1 + staleness training passes are.
  Result<std::vector<Outgoing>> Begin(std::span<const uint64_t> rows, uint32_t micro, bool training);
  // A feature party's activations. Corruption when they are for no pass in flight, another
  // step or micro-batch, come twice, or have another row count or width than before.
  Status OnActivations(int rank, const SplitMessage& m, std::vector<Outgoing>* out);
  // No pass in flight.
  bool pass_done() const { return passes_.empty(); }
  size_t passes_in_flight() const { return passes_.size(); }
  // Work on the own bottom model that waits for no one, done while the feature parties
  // compute: the backward of micro-batches already answered (from the activations their
  // forward left in the bottom's slot for them), the step after them, and the forwards of the
  // current pass. Returns whether there was any. The critical path (activations in ->
  // top -> gradients out) never waits for it, only for what it needs.
  Result<bool> DoIdleWork();
  // Finishes every deferred piece (before exporting the parts).
  Status Flush();
  // Back to the state after `step` steps (a resume): the parts as saved (bottom, top),
  // the current pass and all deferred work dropped.
  Status Restore(uint64_t step, const std::vector<std::vector<float>>& params,
                 const std::vector<std::vector<float>>& velocity);

  // The last finished pass's mean loss, and (evaluation) its metrics.
  double pass_loss() const { return last_loss_; }
  std::map<std::string, double> pass_metrics() const { return last_metrics_; }
  uint64_t steps_completed() const { return steps_completed_; }
  size_t rows() const { return data_.size(); }
  SplitPart& bottom() { return *bottom_; }
  SplitPart& top() { return *top_; }
  const std::vector<int>& peers() const { return peers_; }

 private:
  // One pass in flight: a training step or an evaluation.
  struct Pass {
    uint64_t id = 0;    // passes begun before it
    uint64_t step = 0;  // training: its step number; evaluation: steps_completed() at Begin
    bool training = false;
    std::vector<std::vector<uint64_t>> micro_rows;
    std::vector<std::vector<std::optional<std::vector<float>>>> got;  // [micro][peer]
    std::vector<size_t> missing;                                      // per micro: peers not in yet
    std::vector<bool> processed;                                      // per micro
    size_t remaining = 0;                                             // micro-batches not processed
    size_t rows = 0;
    double loss_sum = 0.0;
    std::optional<MetricAccumulator> metrics;
    std::vector<std::optional<std::vector<float>>> own_out;  // [micro]: own bottom output
  };

  LabelParty() = default;
  // Micro-batch m of the oldest pass (all its activations in): own bottom, top, loss, backward.
  Status Process(uint32_t m, std::vector<Outgoing>* out);
  // Processes whatever of the oldest pass is ready; a finished pass makes room for the next.
  Status ProcessReady(std::vector<Outgoing>* out);
  // The own bottom's output for micro-batch m of the oldest pass, computed now if idle
  // time has not done it yet.
  Status EnsureOwnForward(uint32_t m);
  // Runs the oldest deferred piece of own-bottom work.
  Status RunDeferred();
  // Runs deferred work of passes before the oldest in flight (their step must precede its forwards).
  Status FlushEarlierPasses();
  Status GatherOwn(const std::vector<uint64_t>& rows);
  static uint64_t Seed(uint64_t step, uint32_t micro) { return SplitMix64(step * 1000003 + micro) ^ 0x5eed; }

  std::unique_ptr<SplitPart> bottom_, top_;
  Dataset data_;
  std::vector<int> peers_;
  std::map<int, size_t> peer_index_;
  LabelPartyOptions options_;
  Rng noise_rng_;
  std::vector<int64_t> peer_cols_;  // learned from the first activations (-1 until then)

  uint64_t steps_completed_ = 0;
  std::deque<Pass> passes_;  // in flight, oldest first
  uint64_t passes_begun_ = 0;
  double last_loss_ = 0.0;
  std::map<std::string, double> last_metrics_;
  std::vector<float> input_, top_input_, dout_;
  // Own-bottom work off the critical path.
  struct Deferred {
    uint64_t pass = 0;
    bool step = false;  // the pass's SGD step (after its backwards), or one backward:
    uint32_t micro = 0;       // of this micro-batch's forward, kept in the bottom's slot
    std::vector<float> dout;  // d loss / d own output, rows x out_cols
  };
  std::deque<Deferred> deferred_;
  std::vector<int32_t> labels_;
  std::vector<float> targets_;
};

}  // namespace fedmesh::vertical
