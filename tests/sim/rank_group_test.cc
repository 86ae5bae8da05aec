// Issue 24 item 2: the collectives of a sharded simulation (sim/rank_group.h) on ranks that
// are threads of this process, over world sizes x payload sizes, and the byte form of a
// client's answer that the owner broadcasts (sim/client_answer.h).
#include "sim/threads/rank_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <span>
#include <thread>
#include <tuple>

#include "sim/client_answer.h"

namespace fedmesh {
namespace {

// Runs body(group) on one thread per rank.
void OnEveryRank(int ranks, const std::function<void(RankGroup&)>& body) {
  auto groups = ThreadRankGroup::Create(ranks);
  std::vector<std::thread> threads;
  for (auto& g : groups) threads.emplace_back([&body, &g] { body(*g); });
  for (auto& t : threads) t.join();
}

std::vector<uint8_t> Payload(int rank, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(rank * 31 + i * 7);
  return v;
}

class ThreadRankGroupTest : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(ThreadRankGroupTest, BroadcastFromEveryRootThenAllgather) {
  const auto [ranks, bytes] = GetParam();
  std::atomic<int> failures{0};
  OnEveryRank(ranks, [&, ranks = ranks, bytes = bytes](RankGroup& g) {
    EXPECT_EQ(g.size(), ranks);
    for (int round = 0; round < 3; ++round) {
      for (int root = 0; root < ranks; ++root) {
        std::vector<uint8_t> v =
            g.rank() == root ? Payload(root + round, bytes) : std::vector<uint8_t>{};
        if (!g.Broadcast(root, v).ok() || v != Payload(root + round, bytes)) ++failures;
      }
      auto all = g.Allgather(Payload(g.rank(), bytes + static_cast<size_t>(g.rank())));
      if (!all.ok() || all->size() != static_cast<size_t>(ranks)) {
        ++failures;
        continue;
      }
      for (int r = 0; r < ranks; ++r) {
        if ((*all)[static_cast<size_t>(r)] != Payload(r, bytes + static_cast<size_t>(r)))
          ++failures;
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(RanksBySize, ThreadRankGroupTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{4096},
                                                              size_t{1} << 20)));

TEST(ThreadRankGroup, WaitingRankRunsItsIdleWorkUntilTheRootArrives) {
  std::atomic<bool> root_may_go{false};
  int idle_calls = 0;
  OnEveryRank(2, [&](RankGroup& g) {
    std::vector<uint8_t> v = {1, 2, 3};
    if (g.rank() == 1) {
      while (!root_may_go) std::this_thread::yield();
      ASSERT_TRUE(g.Broadcast(1, v).ok());
    } else {
      // Ten units of "own work", then nothing: the root is let go only after them.
      ASSERT_TRUE(g.Broadcast(1, v, [&] {
                     if (idle_calls == 10) {
                       root_may_go = true;
                       return false;
                     }
                     ++idle_calls;
                     return true;
                   }).ok());
      EXPECT_EQ(v, (std::vector<uint8_t>{1, 2, 3}));
    }
  });
  EXPECT_EQ(idle_calls, 10);
}

TEST(ThreadRankGroup, AbortReleasesARankWaitingInACollective) {
  OnEveryRank(2, [](RankGroup& g) {
    if (g.rank() == 1) {
      g.Abort(1);  // failed alone, before the broadcast rank 0 waits in
      return;
    }
    std::vector<uint8_t> v;
    Status s = g.Broadcast(1, v);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  });
}

TEST(ClientAnswer, EveryKindRoundTripsAndDamageIsCorruption) {
  ClientAnswer sent;
  sent.frames = {{1, 2, 3}, {}, std::vector<uint8_t>(70000, 9)};
  ClientAnswer refused;
  refused.refused = "privacy budget spent";
  ClientAnswer failed;
  failed.job_status = Status::FailedPrecondition("c0000003 diverged in round 2");
  ClientAnswer unsent;
  unsent.send_status = Status::InvalidArgument("non-finite update");
  for (const ClientAnswer* a : {&sent, &refused, &failed, &unsent}) {
    const std::vector<uint8_t> bytes = EncodeClientAnswer(*a);
    auto back = DecodeClientAnswer(bytes);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->job_status, a->job_status);
    EXPECT_EQ(back->refused, a->refused);
    EXPECT_EQ(back->send_status, a->send_status);
    EXPECT_EQ(back->frames, a->frames);
    // Every truncation and one extra byte are refused, never misread.
    for (size_t cut = 0; cut < bytes.size(); cut += std::max<size_t>(1, bytes.size() / 50)) {
      EXPECT_EQ(DecodeClientAnswer(std::span(bytes.data(), cut)).status().code(),
                StatusCode::kCorruption)
          << cut;
    }
    std::vector<uint8_t> longer = bytes;
    longer.push_back(0);
    EXPECT_EQ(DecodeClientAnswer(longer).status().code(), StatusCode::kCorruption);
  }
}

}  // namespace
}  // namespace fedmesh
