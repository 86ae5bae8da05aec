// ElasticSteps: synchronous data-parallel steps over an ElasticRing that survive members
// dying and coming back (docs/collectives.md, "Elastic membership"). Each step averages one
// buffer over the ring (a step's gradients, or the model every k local steps); the caller
// applies the average. The guarantee: every member of a view ends every step with the same
// state, or the run fails; never a silent mismatch.
//
// When an average fails (a member silent for the communicator's timeout, or one re-forming)
// the ring re-forms (collective/elastic_ring.h) and agrees on the step to go on from:
//   - a member that was waiting for step s + 1 (the usual case) averages its step s + 1
//     input again among the new view;
//   - a member that had already finished step s + 1 (its average completed just before a
//     neighbour's failed) rolls back: it restores its state from before step s + 1,
//     averages its step s + 1 input again with the others and applies it, then averages the
//     input it was on (computed before the rollback: one step stale);
//   - when a member joins (restarted, or left behind), every member takes the state of the
//     first member that has one (a broadcast); a joiner's Step fails with TakeResynced()
//     true: its training loop goes on from steps_completed().
// Lost: the failed step's work of the dead member, and with k > 1 a rolled-back member's
// local steps since its last average.
// Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "collective/elastic_ring.h"
#include "core/status.h"

namespace fedmesh::collective {

struct ElasticHooks {
  // The member's training state (model, optimizer), before the current step's average is
  // applied; Broadcast and rollbacks restore it. Steps count at most 2^24 (sent as float).
  std::function<std::vector<float>()> save;
  std::function<Status(std::span<const float> state)> restore;
  // Applies a step's average (the gradient-descent step, or the averaged model).
  std::function<Status(std::span<const float> average)> apply;
  // One line per view change, for the log.
  std::function<void(const std::string&)> log;
};

class ElasticSteps {
 public:
  // REQUIRES: `ring` outlives this; the hooks are set.
  ElasticSteps(ElasticRing* ring, ElasticHooks hooks) : ring_(ring), hooks_(std::move(hooks)) {}

  // Forms the first view (or joins a running ring) and takes the state of the first member
  // that has one. A member that joins a running ring starts at steps_completed().
  Status Start();
  // Averages `buffer` (in place) as step steps_completed() + 1, re-forming as above. When
  // it fails and TakeResynced() is true, this member took another's state: its loop goes
  // on from steps_completed().
  Status Step(std::span<float> buffer);
  // Whether the last failed Step resynced this member (and clears it).
  bool TakeResynced() { return std::exchange(resynced_, false); }

  uint64_t steps_completed() const { return completed_; }
  // Whether Start formed a new ring (no member had state), rather than joined a running one.
  bool fresh_start() const { return fresh_; }
  uint64_t rollbacks() const { return rollbacks_; }
  ElasticRing& ring() { return *ring_; }

 private:
  // Re-forms, rolls back, broadcasts and redoes until the view is consistent again.
  Status Recover();
  Status Resync(const ViewChange& vc);

  ElasticRing* ring_;
  ElasticHooks hooks_;
  uint64_t completed_ = 0;
  uint64_t rollbacks_ = 0;
  bool resynced_ = false;
  // This member holds the ring's state (it formed the ring, or took the state); until then
  // it re-forms as a joiner, so it never goes on with a state of its own.
  bool has_state_ = false;
  bool fresh_ = false;
  bool redo_ = false;                 // after a rollback: step completed_ + 1 is to average again
  std::vector<float> prev_input_;     // the last completed step's input
  std::vector<float> prev_state_;     // the state before that step's average was applied
};

}  // namespace fedmesh::collective
