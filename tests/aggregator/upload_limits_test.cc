// Issue 26 item 2: the aggregator's receive limits follow its model, so what a node can make
// it allocate is set by configuration, not by the wire format's 4 GiB default.
#include "aggregator/upload_limits.h"

#include <gtest/gtest.h>

#include <vector>

namespace fedmesh {
namespace {

TEST(UploadLimits, FollowTheModelSizeAndNeverRaiseTheBase) {
  const wire::WireLimits base;
  const wire::WireLimits l = UploadLimits(base, 1000000);  // 1M parameters
  EXPECT_EQ(l.max_payload_bytes, 5000000u + (1u << 20));  // 4 B/param + a quarter + 1 MiB
  EXPECT_EQ(l.max_elements, l.max_payload_bytes / 4);
  EXPECT_EQ(l.max_pending_bytes, 2 * l.max_payload_bytes);
  EXPECT_EQ(l.max_chunk_bytes, base.max_chunk_bytes);
  EXPECT_TRUE(wire::ValidateLimits(l).ok());
  wire::WireLimits tight = base;
  tight.max_payload_bytes = 1000;
  EXPECT_EQ(UploadLimits(tight, 1000000).max_payload_bytes, 1000u);
  EXPECT_EQ(UploadBudget(l, 0, 10), 12 * l.max_payload_bytes);
  EXPECT_EQ(UploadBudget(l, 12345, 10), 12345u);
}

// Before, an update declaring 4 GiB was accepted at its header and memory grew as chunks
// came; now the header of anything bigger than the model allows is refused.
TEST(UploadLimits, AnUpdateBiggerThanTheModelIsRefusedAtItsHeader) {
  const wire::WireLimits limits = UploadLimits(wire::WireLimits{}, 15);  // a 15-parameter model
  wire::FitResult r;
  r.round = 1;
  r.num_examples = 10;
  r.update = wire::FloatPayload(std::vector<float>(600000, 0.5f));  // 2.4 MB
  r.bytes_before_codec = r.bytes_after_codec = r.update.bytes.size();
  auto frames = wire::Encode(wire::Message{{"fed", "site-a", 1, 0, 1}, r});  // default limits
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  wire::Reassembler receiver(limits);
  auto header = receiver.Add((*frames)[0]);
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().code(), StatusCode::kOutOfRange) << header.status().ToString();
  EXPECT_EQ(receiver.pending_messages(), 0u);
  EXPECT_EQ(receiver.allocated_bytes(), 0u);
}

}  // namespace
}  // namespace fedmesh
