// VirtualRing (collective/virtual_ring.h): the pipelined ring all-reduce in virtual time stays
// within 2 (N - 1) (latency + one chunk's time) of the bandwidth bound 2 (N - 1) / N x bytes /
// bandwidth, the unpipelined ring pays one latency per step, a slow link paces the whole
// ring, and the buffers are reduced exactly as over a real transport.
#include "collective/virtual_ring.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

namespace fedmesh::collective {
namespace {

TEST(VirtualRing, PipelinedChunksComeWithinAFewPercentOfTheRingBound) {
  for (int n : {2, 4, 8}) {
    const size_t floats = 4 << 20;  // 16 MiB
    std::vector<std::vector<float>> b(n, std::vector<float>(floats, 1.0f));
    const VirtualLink link{0.005, 125e6};  // 1 Gbit/s, 5 ms
    std::vector<VirtualLink> links(n, link);
    auto r = VirtualAllreduce(b, links, ReduceOp::kSum, 256 * 1024);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const double bound = RingAllreduceBoundSeconds(n, floats * 4, link);
    const double slack = 2.0 * (n - 1) * (link.latency_s + 256 * 1024 / link.bytes_per_s);
    EXPECT_GE(r->seconds, bound) << "faster than the bandwidth bound: the model is wrong";
    EXPECT_LE(r->seconds, bound + slack) << "N=" << n << ": " << r->seconds << " s vs bound " << bound;
    std::printf("N=%d, 16 MiB, 1 Gbit/s, 5 ms: %.4f s; bandwidth bound %.4f s (%.2fx)\n", n, r->seconds, bound,
                r->seconds / bound);
    for (const auto& buf : b) EXPECT_EQ(buf[12345], static_cast<float>(n));
    EXPECT_NEAR(static_cast<double>(r->bytes_sent), 2.0 * (n - 1) * floats * 4, 64.0 * n);
  }
  // One chunk a segment: no pipelining, each step waits for the whole segment.
  std::vector<std::vector<float>> b(4, std::vector<float>(1 << 20, 1.0f));
  const VirtualLink link{0.005, 125e6};
  auto whole = VirtualAllreduce(b, std::vector<VirtualLink>(4, link), ReduceOp::kSum, 64 << 20);
  ASSERT_TRUE(whole.ok());
  EXPECT_NEAR(whole->seconds, RingAllreduceBoundSeconds(4, 4 << 20, link) + 2 * 3 * link.latency_s, 1e-6);
}

TEST(VirtualRing, TheSlowestLinkPacesTheRing) {
  const int n = 4;
  std::vector<std::vector<float>> b(n, std::vector<float>(1 << 20, 2.0f));
  std::vector<VirtualLink> links(n, VirtualLink{0.0, 1e9});
  links[2].bytes_per_s = 1e8;  // one 10x slower link
  auto r = VirtualAllreduce(b, links, ReduceOp::kAverage, 64 * 1024);
  ASSERT_TRUE(r.ok());
  const double slow_bound = RingAllreduceBoundSeconds(n, 4 << 20, links[2]);
  EXPECT_GE(r->seconds, slow_bound);
  EXPECT_LE(r->seconds, slow_bound + 2.0 * (n - 1) * 64 * 1024 / links[2].bytes_per_s);
  for (const auto& buf : b) EXPECT_EQ(buf[7], 2.0f);
  EXPECT_FALSE(VirtualAllreduce(b, {links[0]}, ReduceOp::kSum, 1024).ok());
}

}  // namespace
}  // namespace fedmesh::collective
