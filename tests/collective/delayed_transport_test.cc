// DelayedTransport (collective/delayed_transport.h): every chunk arrives no sooner than the
// delay after it was sent, in the order sent, and the sender never waits.
#include <gtest/gtest.h>

#include <chrono>

#include "collective/delayed_transport.h"
#include "collective/in_process_hub.h"

namespace fedmesh::collective {
namespace {

TEST(DelayedTransportTest, ChunksArriveAfterTheDelayInOrder) {
  using Clock = std::chrono::steady_clock;
  InProcessHub hub(2);
  // A delay long against the scheduling stalls of a busy CI machine (ctest -j2).
  DelayedTransport a(hub.endpoint(0), std::chrono::milliseconds(500));
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < 5; ++i) {
    Chunk c;
    c.kind = OpKind::kMessage;
    c.op = i;
    ASSERT_TRUE(a.Send(1, std::move(c)).ok());
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(250)) << "the sender waited";
  auto none = hub.endpoint(1)->Receive(10);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value()) << "delivered before the delay";
  for (uint64_t i = 0; i < 5; ++i) {
    auto got = hub.endpoint(1)->Receive(1000);
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(500));
    EXPECT_EQ((*got)->first, 0);
    EXPECT_EQ((*got)->second.op, i);
  }
}

}  // namespace
}  // namespace fedmesh::collective
