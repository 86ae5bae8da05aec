#include "collective/elastic_steps.h"

#include <algorithm>
#include <string>

namespace fedmesh::collective {
namespace {

std::string Members(const std::vector<int>& v) {
  std::string s;
  for (int m : v) s += (s.empty() ? "" : ",") + std::to_string(m);
  return "[" + s + "]";
}

}  // namespace

Status ElasticSteps::Start() {
  FM_ASSIGN_OR_RETURN(ViewChange vc, ring_->Join());
  fresh_ = vc.fresh;
  Status s = Resync(vc);
  if (!s.ok() && !resynced_) s = Recover();
  if (resynced_) {  // a member without state took the ring's: at start that is the plan
    resynced_ = false;
    return Status::OK();
  }
  return s;
}

Status ElasticSteps::Step(std::span<float> buffer) {
  std::vector<float> input(buffer.begin(), buffer.end());
  std::vector<float> state = hooks_.save();
  for (;;) {
    const Status s = ring_->comm().Allreduce(buffer, ReduceOp::kAverage);
    if (s.ok()) {
      prev_input_ = std::move(input);
      prev_state_ = std::move(state);
      ++completed_;
      return Status::OK();
    }
    // Inputs the ring refuses (lengths that differ between members, values an fp16 wire
    // cannot hold) are no member's death: re-forming would only meet them again.
    if (s.code() == StatusCode::kInvalidArgument) return s;
    if (hooks_.log) hooks_.log("step " + std::to_string(completed_ + 1) + " failed (" + s.ToString() + "); re-forming the ring");
    FM_RETURN_IF_ERROR(Recover());
    std::copy(input.begin(), input.end(), buffer.begin());
    state = hooks_.save();
  }
}

Status ElasticSteps::Recover() {
  for (int attempt = 1;; ++attempt) {
    FM_ASSIGN_OR_RETURN(ViewChange vc, ring_->Reform(completed_, /*joining=*/!has_state_));
    const Status s = Resync(vc);
    if (s.ok() || resynced_) return s;
    // A state that does not fit (members with different models) never will.
    if (s.code() == StatusCode::kInvalidArgument || attempt >= ring_->options().max_attempts) return s;
    if (hooks_.log) hooks_.log("re-forming again: " + s.ToString());
  }
}

Status ElasticSteps::Resync(const ViewChange& vc) {
  if (hooks_.log) {
    hooks_.log("ring generation " + std::to_string(vc.generation) + ": members " + Members(vc.members) +
               ", going on from step " + std::to_string(vc.step) + (vc.rollback ? ", undoing this member's step " + std::to_string(vc.step + 1) : "") +
               (vc.broadcast ? ", state from member " + std::to_string(vc.members[vc.source]) : ""));
  }
  if (vc.rollback && !redo_) {
    if (prev_state_.empty()) return Status::Internal("a rollback with no step to roll back");
    FM_RETURN_IF_ERROR(hooks_.restore(prev_state_));
    --completed_;
    redo_ = true;
    ++rollbacks_;
  }
  if (vc.broadcast) {
    std::vector<float> state = hooks_.save();
    state.push_back(static_cast<float>(completed_));
    FM_RETURN_IF_ERROR(ring_->comm().Broadcast(std::span<float>(state), vc.source));
    completed_ = static_cast<uint64_t>(state.back());
    state.pop_back();
    FM_RETURN_IF_ERROR(hooks_.restore(state));
    has_state_ = true;
    if (vc.joiner) {
      redo_ = false;
      prev_input_.clear();
      prev_state_.clear();
      resynced_ = true;
      return Status::Unavailable("this member took the ring's state at step " + std::to_string(completed_));
    }
  }
  if (redo_) {
    std::vector<float> average = prev_input_;
    FM_RETURN_IF_ERROR(ring_->comm().Allreduce(std::span<float>(average), ReduceOp::kAverage));
    FM_RETURN_IF_ERROR(hooks_.apply(average));
    ++completed_;
    redo_ = false;
  }
  return Status::OK();
}

}  // namespace fedmesh::collective
