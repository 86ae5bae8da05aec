// GossipOutbox: what this gossip node still has to send one peer, in the order that keeps
// membership alive on a slow link. SWIM's probes and acks (control) go before model frames
// (data), so a Ping is never stuck behind megabytes of models; and at most one model waits
// behind the one being sent when the protocol only wants each neighbour's latest model
// (D-PSGD): a newer model replaces a queued one that has not started, so a peer whose link
// is slower than the gossip rate gets the freshest model it can carry and the queue stays
// bounded. Other protocols' messages (push-sum shares, CHOCO deltas, exchanges) are never
// replaced; past max_models waiting, a new one is dropped, as a full socket queue would.
// The driver hands frames to a socket whose own queue is kept short (a few frames), so
// "in the outbox" is where messages wait. Sans-IO. Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/wire/wire_codec.h"

namespace fedmesh {

struct GossipOutboxOptions {
  // Control frames kept at most; beyond it the oldest is dropped (SWIM sends again).
  // Default: 256.
  size_t max_control_frames = 256;
  // Models (messages with a payload) waiting, the one under way included; beyond it a new
  // one is dropped. Default: 8.
  size_t max_models = 8;
};

class GossipOutbox {
 public:
  explicit GossipOutbox(GossipOutboxOptions options = {}) : options_(options) {}

  // A membership message's frames (sent before any model frame).
  void PushControl(std::vector<wire::Frame> frames);
  // A model's frames. With `replace`, it takes the place of a queued model none of whose
  // frames has left (that one is counted in models_replaced).
  void PushModel(std::vector<wire::Frame> frames, bool replace);

  // The next frame to send: control first, then the oldest model's next frame. null when
  // empty.
  const wire::Frame* Front() const;
  // The frame Front returned has left.
  void PopFront();
  bool empty() const { return control_.empty() && models_.empty(); }
  // Frame bytes waiting.
  uint64_t queued_bytes() const { return queued_bytes_; }
  // Models replaced before they started, models dropped as overflow, and control frames
  // dropped as overflow.
  uint64_t models_replaced() const { return models_replaced_; }
  uint64_t models_dropped() const { return models_dropped_; }
  uint64_t control_dropped() const { return control_dropped_; }

 private:
  struct Model {
    std::deque<wire::Frame> frames;
    bool started = false;
  };
  GossipOutboxOptions options_;
  std::deque<wire::Frame> control_;
  std::deque<Model> models_;  // the one under way first
  uint64_t queued_bytes_ = 0;
  uint64_t models_replaced_ = 0;
  uint64_t models_dropped_ = 0;
  uint64_t control_dropped_ = 0;
};

}  // namespace fedmesh
