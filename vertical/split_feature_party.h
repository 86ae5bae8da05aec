// FeatureParty: a party of split training that holds columns but no label. It answers the
// label party's messages (vertical/split_messages.h): an align message fixes its rows (the
// PSI intersection, in the job's order); a forward runs its bottom model on the rows named
// and returns the activations (plus Gaussian noise of std `noise` on training forwards, a
// fresh secret draw); a training forward's activations stay in its micro-batch's slot of
// the bottom model (vertical/split_part.h) and its gradients run backward from them as soon
// as they come; the step's SGD update runs once every micro-batch of it has its gradient.
// The next step's training forwards may come before this step's gradients are all in (the
// label party's `staleness` 1): they run on the weights of now, and their backward later on
// those same weights (weight stashing, vertical/split_part.h); at most two steps wait for
// gradients at once, and gradients come for the older one first. Sans-IO: Handle() takes a
// message and gives the replies. Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "core/data/dataset.h"
#include "core/rng.h"
#include "vertical/split_messages.h"
#include "vertical/split_part.h"

namespace fedmesh::vertical {

struct FeaturePartyOptions {
  // Standard deviation of the Gaussian noise added to the activations of training
  // forwards. Default 0 (none).
  double noise = 0.0;
  // How activations travel. Default float32.
  CutWire wire = CutWire::kFloat32;
};

class FeatureParty {
 public:
  // `psi_rows`: this party's features for each row of its PSI result, in that order.
  // InvalidArgument when their width is not the bottom model's input width.
  static Result<std::unique_ptr<FeatureParty>> Create(std::unique_ptr<SplitPart> bottom, Dataset psi_rows,
                                                      const FeaturePartyOptions& options);

  // Corruption for a message out of protocol (a forward before the align, rows past the
  // job's, gradients for a forward never asked or of another shape, a forward for another
  // step while one waits for gradients); Unavailable when the label party reports an error.
  Status Handle(const SplitMessage& m, std::vector<SplitMessage>* out);

  // A party resumed from a checkpoint: `rows` already in the job's order.
  static Result<std::unique_ptr<FeatureParty>> CreateAligned(std::unique_ptr<SplitPart> bottom, Dataset rows,
                                                             const FeaturePartyOptions& options);
  // Back to the state after `step` steps (a resume): parameters and velocity as saved,
  // nothing pending.
  Status Restore(uint64_t step, const std::vector<float>& params, const std::vector<float>& velocity);
  // Steps whose forwards may run before the oldest one's gradients are all in.
  static constexpr size_t kMaxStepsInFlight = 2;

  // Between steps (nothing waits for gradients): where a checkpoint may be taken.
  bool between_steps() const { return pending_.empty(); }
  // The align message's positions (into this party's PSI rows), in the job's order.
  const std::vector<uint32_t>& align_positions() const { return positions_; }

  bool aligned() const { return aligned_; }
  bool done() const { return done_; }
  uint64_t steps_completed() const { return steps_completed_; }
  size_t rows() const { return data_.size(); }
  SplitPart& bottom() { return *bottom_; }

 private:
  FeatureParty() = default;
  Status Gather(const std::vector<uint64_t>& rows, const char* what, uint64_t step);
  static uint64_t Seed(uint64_t step, uint32_t micro) { return SplitMix64(step * 1000003 + micro); }

  std::unique_ptr<SplitPart> bottom_;
  Dataset psi_rows_, data_;
  FeaturePartyOptions options_;
  Rng noise_rng_;
  bool aligned_ = false, done_ = false;
  uint64_t steps_completed_ = 0;
  // A step whose training micro-batches await gradients.
  struct PendingStep {
    uint64_t step = 0;
    std::map<uint32_t, std::vector<uint64_t>> micro;  // micro-batch -> its rows
    bool gradients_started = false;  // its first gradient came: no more forwards for it
  };
  std::deque<PendingStep> pending_;  // oldest first, at most kMaxStepsInFlight
  // A micro-batch's slot in the bottom: steps alternate between two ranges of slots.
  static uint32_t Slot(uint64_t step, uint32_t micro) {
    return micro + static_cast<uint32_t>(step & 1) * SplitPart::kMaxMicroBatches;
  }
  std::vector<float> input_;
  std::vector<uint32_t> positions_;
};

}  // namespace fedmesh::vertical
