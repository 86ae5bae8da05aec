#include "node/gossip_outbox.h"

#include <utility>

namespace fedmesh {

void GossipOutbox::PushControl(std::vector<wire::Frame> frames) {
  for (wire::Frame& f : frames) {
    queued_bytes_ += f.size();
    control_.push_back(std::move(f));
  }
  while (control_.size() > options_.max_control_frames) {
    queued_bytes_ -= control_.front().size();
    control_.pop_front();
    ++control_dropped_;
  }
}

void GossipOutbox::PushModel(std::vector<wire::Frame> frames, bool replace) {
  if (frames.empty()) return;
  if (replace && !models_.empty() && !models_.back().started) {
    for (const wire::Frame& f : models_.back().frames) queued_bytes_ -= f.size();
    models_.pop_back();
    ++models_replaced_;
  }
  if (models_.size() >= options_.max_models) {
    ++models_dropped_;
    return;
  }
  Model m;
  for (wire::Frame& f : frames) {
    queued_bytes_ += f.size();
    m.frames.push_back(std::move(f));
  }
  models_.push_back(std::move(m));
}

const wire::Frame* GossipOutbox::Front() const {
  if (!control_.empty()) return &control_.front();
  if (!models_.empty()) return &models_.front().frames.front();
  return nullptr;
}

void GossipOutbox::PopFront() {
  if (!control_.empty()) {
    queued_bytes_ -= control_.front().size();
    control_.pop_front();
    return;
  }
  if (models_.empty()) return;
  Model& m = models_.front();
  queued_bytes_ -= m.frames.front().size();
  m.frames.pop_front();
  m.started = true;
  if (m.frames.empty()) models_.pop_front();
}

}  // namespace fedmesh
