// GossipOutbox (node/gossip_outbox.h): membership before models, a newer D-PSGD push
// replaces a queued one that has not started, other models are never replaced and are
// bounded, and the byte count follows what waits.
#include <gtest/gtest.h>

#include "node/gossip_outbox.h"

namespace fedmesh {
namespace {

std::vector<wire::Frame> Frames(uint8_t tag, size_t n, size_t bytes = 10) {
  std::vector<wire::Frame> f;
  for (size_t i = 0; i < n; ++i) f.push_back(wire::Frame(bytes, static_cast<uint8_t>(tag + i)));
  return f;
}

// Drains the outbox; the first byte of each frame, in the order sent.
std::vector<uint8_t> Drain(GossipOutbox& o) {
  std::vector<uint8_t> order;
  while (const wire::Frame* f = o.Front()) {
    order.push_back((*f)[0]);
    o.PopFront();
  }
  return order;
}

TEST(GossipOutbox, MembershipJumpsAheadOfModelFrames) {
  GossipOutbox o;
  o.PushModel(Frames(10, 3), true);
  ASSERT_EQ((*o.Front())[0], 10);
  o.PopFront();  // the model is under way
  o.PushControl(Frames(1, 1));
  o.PushControl(Frames(2, 1));
  EXPECT_EQ(Drain(o), (std::vector<uint8_t>{1, 2, 11, 12}));
  EXPECT_TRUE(o.empty());
  EXPECT_EQ(o.queued_bytes(), 0u);
}

TEST(GossipOutbox, ANewerPushReplacesAQueuedOneThatHasNotStarted) {
  GossipOutbox o;
  o.PushModel(Frames(10, 2), true);
  o.PopFront();                      // model 10 started
  o.PushModel(Frames(20, 2), true);  // queued behind it
  o.PushModel(Frames(30, 2), true);  // replaces 20
  o.PushModel(Frames(40, 2), true);  // replaces 30
  EXPECT_EQ(o.models_replaced(), 2u);
  EXPECT_EQ(o.queued_bytes(), 30u);  // 11, 40, 41
  EXPECT_EQ(Drain(o), (std::vector<uint8_t>{11, 40, 41}));
}

TEST(GossipOutbox, OtherModelsAreNeverReplacedAndAreBounded) {
  GossipOutboxOptions opt;
  opt.max_models = 3;
  opt.max_control_frames = 2;
  GossipOutbox o(opt);
  for (uint8_t t : {10, 20, 30, 40}) o.PushModel(Frames(t, 1), false);
  EXPECT_EQ(o.models_replaced(), 0u);
  EXPECT_EQ(o.models_dropped(), 1u);  // 40: three were waiting
  for (uint8_t t : {1, 2, 3}) o.PushControl(Frames(t, 1));
  EXPECT_EQ(o.control_dropped(), 1u);  // the oldest, 1
  EXPECT_EQ(Drain(o), (std::vector<uint8_t>{2, 3, 10, 20, 30}));
}

}  // namespace
}  // namespace fedmesh
