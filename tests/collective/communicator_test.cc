// Communicator (collective/communicator.h): 8 ranks, each on its own thread, over the
// in-process hub: fused all-reduce of many tensors, all-gather of unequal blocks, broadcast,
// barrier, against a direct computation; a dead neighbour is reported, not waited for.
#include "collective/communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <thread>

#include "collective/in_process_hub.h"

namespace fedmesh::collective {
namespace {

using ::testing::HasSubstr;

// Runs body(communicator) on `n` threads, one rank each; returns each rank's Status.
std::vector<Status> RunRanks(int n, CommunicatorOptions base, const std::function<Status(Communicator&)>& body) {
  InProcessHub hub(n);
  std::vector<Status> result(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions o = base;
      o.ring.size = n;
      o.ring.rank = r;
      o.local_rank = r % 2;
      auto c = Communicator::Create(o, hub.endpoint(r));
      result[r] = c.ok() ? body(**c) : c.status();
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

TEST(Communicator, FusedAllreduceOfManyTensorsMatchesTheDirectAverage) {
  const int n = 8;
  // A model's layers: sizes from 1 to 5000, 30 tensors.
  std::vector<size_t> sizes;
  for (int i = 0; i < 30; ++i) sizes.push_back(1 + static_cast<size_t>(i * i * 5) % 5000);
  auto value = [](int rank, size_t t, size_t i) { return std::sin(0.1f * rank + 0.01f * t + 0.001f * i); };
  std::vector<std::vector<std::vector<float>>> out(n);
  CommunicatorOptions o;
  o.ring.chunk_bytes = 4096;
  o.fusion_bytes = 16 * 1024;  // 4096 values: several fusion buffers, and some tensors alone
  std::vector<uint64_t> fused(n);
  auto status = RunRanks(n, o, [&](Communicator& c) {
    std::vector<std::vector<float>>& tensors = out[c.rank()];
    for (size_t t = 0; t < sizes.size(); ++t) {
      tensors.emplace_back(sizes[t]);
      for (size_t i = 0; i < sizes[t]; ++i) tensors.back()[i] = value(c.rank(), t, i);
    }
    std::vector<std::span<float>> spans(tensors.begin(), tensors.end());
    Status s = c.Allreduce(spans, ReduceOp::kAverage);
    fused[c.rank()] = c.fused_buffers();
    return s;
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(status[r].ok()) << r << ": " << status[r].ToString();
  for (size_t t = 0; t < sizes.size(); ++t) {
    for (size_t i = 0; i < sizes[t]; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += value(r, t, i);
      want /= n;
      ASSERT_NEAR(out[0][t][i], want, 1e-6) << "tensor " << t << " value " << i;
    }
    for (int r = 1; r < n; ++r) ASSERT_EQ(out[r][t], out[0][t]) << "rank " << r << " tensor " << t;
  }
  EXPECT_GT(fused[0], 1u);
  EXPECT_LT(fused[0], sizes.size()) << "small tensors were not fused";
}

TEST(Communicator, AllgatherBroadcastBarrierAndTheHorovodVocabulary) {
  const int n = 5;
  std::vector<std::vector<float>> gathered(n), cast(n);
  auto status = RunRanks(n, {}, [&](Communicator& c) {
    if (c.size() != n || c.local_rank() != c.rank() % 2) return Status::Internal("vocabulary");
    std::vector<float> mine(static_cast<size_t>(c.rank()), static_cast<float>(c.rank()));  // rank r: r copies of r
    FM_ASSIGN_OR_RETURN(gathered[c.rank()], c.Allgather(mine));
    cast[c.rank()].assign(7, c.rank() == 3 ? 2.5f : 0.0f);
    FM_RETURN_IF_ERROR(c.Broadcast(cast[c.rank()], 3));
    return c.Barrier();
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(status[r].ok()) << status[r].ToString();
  const std::vector<float> want = {1, 2, 2, 3, 3, 3, 4, 4, 4, 4};
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(gathered[r], want) << r;
    EXPECT_EQ(cast[r], std::vector<float>(7, 2.5f)) << r;
  }
}

TEST(Communicator, ADeadNeighbourIsReportedAfterTheTimeout) {
  const int n = 3;
  InProcessHub hub(n);
  hub.Disconnect(2);
  CommunicatorOptions o;
  o.timeout_ms = 300;
  std::vector<Status> result(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions c = o;
      c.ring.size = n;
      c.ring.rank = r;
      auto comm = Communicator::Create(c, hub.endpoint(r));
      std::vector<float> x(10, 1.0f);
      result[r] = comm.ok() ? (*comm)->Allreduce(x) : comm.status();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(result[r].code(), StatusCode::kDeadlineExceeded) << result[r].ToString();
    EXPECT_THAT(result[r].message(), HasSubstr("heard nothing for 300 ms"));
  }
}

}  // namespace
}  // namespace fedmesh::collective
