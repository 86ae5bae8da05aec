// RingCollective (collective/ring_collective.h) with N ranks in one process: a router moves
// chunks between them in a random order that keeps each link first-in first-out (as a TCP
// connection does), and the results are checked against a direct computation.
#include "collective/ring_collective.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <map>
#include <random>

namespace fedmesh::collective {
namespace {

using ::testing::HasSubstr;

struct Ring {
  std::vector<RingCollective> ranks;
  std::map<std::pair<int, int>, std::deque<Chunk>> links;
  std::mt19937_64 rng;
  uint64_t delivered = 0;

  Ring(int n, uint64_t chunk_bytes, WireType wire = WireType::kFloat32, uint64_t seed = 1) : rng(seed) {
    for (int r = 0; r < n; ++r) {
      auto c = RingCollective::Create({n, r, chunk_bytes, wire, 0});
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      ranks.push_back(std::move(c).value());
    }
  }
  void Queue(int from, std::vector<Send> sends) {
    for (Send& s : sends) links[{from, s.to}].push_back(std::move(s.chunk));
  }
  // Delivers one chunk from a random non-empty link; false when none is waiting.
  bool DeliverOne() {
    std::vector<std::pair<int, int>> busy;
    for (auto& [k, q] : links) if (!q.empty()) busy.push_back(k);
    if (busy.empty()) return false;
    const auto key = busy[rng() % busy.size()];
    Chunk c = std::move(links[key].front());
    links[key].pop_front();
    auto out = ranks[key.second].OnChunk(key.first, std::move(c));
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (out.ok()) Queue(key.second, std::move(out).value());
    ++delivered;
    return true;
  }
  void Run() {
    while (DeliverOne()) {}
    for (auto& r : ranks) EXPECT_TRUE(r.done()) << "rank " << r.rank() << " did not finish";
  }
};

std::vector<std::vector<float>> RandomInputs(int n, size_t len, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<std::vector<float>> in(n, std::vector<float>(len));
  for (auto& v : in) for (float& x : v) x = d(rng);
  return in;
}

void ExpectAllreduce(int n, size_t len, uint64_t chunk_bytes, ReduceOp op) {
  SCOPED_TRACE("N=" + std::to_string(n) + " len=" + std::to_string(len) + " chunk=" + std::to_string(chunk_bytes));
  auto bufs = RandomInputs(n, len, 7 * n + len);
  std::vector<double> want(len, 0.0);
  for (const auto& b : bufs) for (size_t i = 0; i < len; ++i) want[i] += b[i];
  if (op == ReduceOp::kAverage) for (double& w : want) w /= n;
  Ring ring(n, chunk_bytes, WireType::kFloat32, len + n);
  for (int r = 0; r < n; ++r) {
    auto s = ring.ranks[r].StartAllreduce(bufs[r], op);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ring.Queue(r, std::move(s).value());
  }
  ring.Run();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(bufs[r], bufs[0]) << "rank " << r << " differs from rank 0: not bit-identical";
    for (size_t i = 0; i < len; ++i) ASSERT_NEAR(bufs[r][i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
  }
  // Each rank sends 2 (N - 1) / N of the buffer, give or take the uneven segments.
  if (n > 1 && len >= static_cast<size_t>(n)) {
    const double per_rank = 2.0 * (n - 1) / n * len * 4;
    for (auto& rk : ring.ranks) EXPECT_NEAR(static_cast<double>(rk.bytes_sent()), per_rank, 2.0 * 4 * n);
  }
}

TEST(RingCollective, AllreduceSumsExactlyAndBitIdenticallyForEverySizeAndLength) {
  for (int n : {1, 2, 3, 5, 8}) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{1000}, size_t{4099}}) {
      ExpectAllreduce(n, len, 64, ReduceOp::kSum);       // 16 values a chunk: many chunks
      ExpectAllreduce(n, len, 1 << 20, ReduceOp::kSum);  // one chunk a segment
    }
  }
}

TEST(RingCollective, AllreduceAverageDividesOnce) {
  for (int n : {2, 3, 8}) ExpectAllreduce(n, 513, 40, ReduceOp::kAverage);
  // A value every rank holds averages to itself exactly.
  Ring ring(3, 64);
  std::vector<std::vector<float>> b(3, std::vector<float>(10, 0.1f));
  for (int r = 0; r < 3; ++r) ring.Queue(r, ring.ranks[r].StartAllreduce(b[r], ReduceOp::kAverage).value());
  ring.Run();
  for (int r = 0; r < 3; ++r) for (float v : b[r]) EXPECT_NEAR(v, 0.1f, 1e-7f);
}

TEST(RingCollective, HalfPrecisionWiresStayWithinTheirBoundAndBitIdentical) {
  for (WireType wire : {WireType::kFloat16, WireType::kBFloat16}) {
    const int n = 5;
    const size_t len = 3001;
    auto bufs = RandomInputs(n, len, 99);
    std::vector<double> want(len, 0.0), abs_sum(len, 0.0);
    for (const auto& b : bufs) {
      for (size_t i = 0; i < len; ++i) want[i] += b[i], abs_sum[i] += std::abs(b[i]);
    }
    Ring ring(n, 256, wire);
    for (int r = 0; r < n; ++r) ring.Queue(r, ring.ranks[r].StartAllreduce(bufs[r]).value());
    ring.Run();
    // docs/collectives.md: each of the N - 1 partial sums and the final value is rounded
    // once to the wire format, a relative error of at most u = 2^-11 (fp16) or 2^-8 (bf16)
    // of the values summed so far: |error| <= N u sum_i |x_i|.
    const double u = wire == WireType::kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    double worst = 0;
    for (size_t i = 0; i < len; ++i) {
      const double err = std::abs(bufs[0][i] - want[i]);
      EXPECT_LE(err, n * u * abs_sum[i] + 1e-7) << WireTypeName(wire) << " element " << i;
      worst = std::max(worst, err / (abs_sum[i] + 1e-12));
    }
    EXPECT_GT(worst, 0.0) << "the wire format rounded nothing: is it really " << WireTypeName(wire) << "?";
    for (int r = 1; r < n; ++r) EXPECT_EQ(bufs[r], bufs[0]) << WireTypeName(wire) << " rank " << r;
    // Half the bytes of float32.
    EXPECT_NEAR(static_cast<double>(ring.ranks[0].bytes_sent()), 2.0 * (n - 1) / n * len * 2, 2.0 * 2 * n);
  }
  // A value fp16 cannot hold fails the call before anything is sent.
  Ring ring(2, 64, WireType::kFloat16);
  std::vector<float> big = {1.0f, 1e6f};
  auto s = ring.ranks[0].StartAllreduce(big);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ring.ranks[0].done());
}

TEST(RingCollective, AllgatherConcatenatesBlocksOfAnyLength) {
  for (int n : {1, 2, 3, 5, 8}) {
    std::vector<uint64_t> counts;
    for (int r = 0; r < n; ++r) counts.push_back(static_cast<uint64_t>((r * 37) % 11));  // zeros too
    uint64_t total = 0;
    for (uint64_t c : counts) total += c;
    std::vector<std::vector<float>> mine(n), out(n, std::vector<float>(total, -1.0f));
    std::vector<float> want;
    for (int r = 0; r < n; ++r) {
      for (uint64_t i = 0; i < counts[r]; ++i) mine[r].push_back(100.0f * r + i);
      want.insert(want.end(), mine[r].begin(), mine[r].end());
    }
    Ring ring(n, 12);  // 3 values a chunk
    for (int r = 0; r < n; ++r) {
      auto s = ring.ranks[r].StartAllgather(mine[r], counts, out[r]);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ring.Queue(r, std::move(s).value());
    }
    ring.Run();
    for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], want) << "N=" << n << " rank " << r;
  }
}

TEST(RingCollective, BroadcastFromEveryRootAndBarrier) {
  for (int n : {1, 2, 3, 5, 8}) {
    for (int root = 0; root < n; ++root) {
      std::vector<std::vector<float>> b(n, std::vector<float>(101, 0.0f));
      for (size_t i = 0; i < b[root].size(); ++i) b[root][i] = static_cast<float>(i) * 0.5f + root;
      Ring ring(n, 32);
      for (int r = 0; r < n; ++r) ring.Queue(r, ring.ranks[r].StartBroadcast(b[r], root).value());
      ring.Run();
      for (int r = 0; r < n; ++r) EXPECT_EQ(b[r], b[root]) << "N=" << n << " root " << root << " rank " << r;
    }
    Ring ring(n, 32);
    // A barrier completes only when every rank has entered it.
    for (int r = 0; r + 1 < n; ++r) ring.Queue(r, ring.ranks[r].StartBarrier().value());
    while (ring.DeliverOne()) {}
    if (n > 1) {
      for (auto& rk : ring.ranks) EXPECT_FALSE(rk.done() && rk.rank() != n - 1) << "left before the last came";
    }
    ring.Queue(n - 1, ring.ranks[n - 1].StartBarrier().value());
    ring.Run();
  }
}

// Ranks run their next operation as soon as they finish one, so a neighbour's chunks for an
// operation not yet started arrive early and wait.
TEST(RingCollective, BackToBackOperationsWithRanksAtDifferentPaces) {
  const int n = 4;
  const int ops = 6;
  auto bufs = RandomInputs(n, 250, 5);
  std::vector<std::vector<float>> want_each(ops);
  std::vector<std::vector<std::vector<float>>> data(ops, bufs);
  std::vector<int> next_op(n, 0);
  Ring ring(n, 64, WireType::kFloat32, 77);
  auto start_next = [&](int r) {
    if (next_op[r] >= ops) return;
    const int k = next_op[r]++;
    auto s = ring.ranks[r].StartAllreduce(data[k][r]);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ring.Queue(r, std::move(s).value());
  };
  for (int r = 0; r < n; ++r) start_next(r);
  for (;;) {
    bool moved = ring.DeliverOne();
    for (int r = 0; r < n; ++r) if (ring.ranks[r].done()) start_next(r);
    bool all_done = true;
    for (int r = 0; r < n; ++r) all_done &= next_op[r] == ops && ring.ranks[r].done();
    if (all_done) break;
    ASSERT_TRUE(moved) << "stuck";
  }
  for (int k = 0; k < ops; ++k) for (int r = 1; r < n; ++r) EXPECT_EQ(data[k][r], data[k][0]) << "op " << k;
  EXPECT_EQ(ring.ranks[0].ops_completed(), static_cast<uint64_t>(ops));
}

TEST(RingCollective, ChunksThatDoNotFitAreRefusedAndChangeNothing) {
  const int n = 3;
  Ring ring(n, 16);
  auto bufs = RandomInputs(n, 30, 3);
  auto copy = bufs;
  std::vector<std::vector<Send>> first(n);
  for (int r = 0; r < n; ++r) first[r] = ring.ranks[r].StartAllreduce(bufs[r]).value();
  // Rank 1 hears from rank 0 (its predecessor). Each bad variant of a real chunk is refused.
  const Chunk good = first[0][0].chunk;
  auto refuse = [&](int from, Chunk c, const std::string& why) {
    auto s = ring.ranks[1].OnChunk(from, std::move(c));
    ASSERT_FALSE(s.ok()) << why;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(why));
  };
  refuse(2, good, "only rank 0 (the ring predecessor)");
  Chunk c = good; c.bytes = std::string(good.bytes.view().substr(1)); refuse(0, c, "bytes where");
  c = good; c.generation = 9; refuse(0, c, "generation 9");
  c = good; c.op = 5; refuse(0, c, "two operations ahead");
  c = good; c.block = 2; refuse(0, c, "carries block 0 to this rank, not 2");
  c = good; c.step = 7; refuse(0, c, "does not fit");
  c = good; c.kind = OpKind::kBroadcast; refuse(0, c, "another kind");
  c = good; c.wire = WireType::kFloat16; refuse(0, c, "does not fit");
  EXPECT_EQ(bufs[1], copy[1]) << "a refused chunk changed the buffer";
  // The real chunks still complete the operation, and a replay of one is refused.
  for (int r = 0; r < n; ++r) ring.Queue(r, first[r]);
  ASSERT_TRUE(ring.DeliverOne() || true);
  Chunk replay = good;
  ring.Run();
  auto late = ring.ranks[1].OnChunk(0, replay);
  ASSERT_TRUE(late.ok());  // of a finished operation: dropped and counted
  EXPECT_EQ(ring.ranks[1].stale_chunks(), 1u);
  for (int r = 1; r < n; ++r) EXPECT_EQ(bufs[r], bufs[0]);
  // While an operation runs, another cannot start.
  std::vector<float> x(9, 1.0f), y(9, 1.0f);
  ASSERT_TRUE(ring.ranks[0].StartAllreduce(x).ok());
  auto twice = ring.ranks[0].StartAllreduce(y);
  EXPECT_EQ(twice.status().code(), StatusCode::kFailedPrecondition);
}

TEST(RingCollective, OptionsAreChecked) {
  EXPECT_FALSE(RingCollective::Create({0, 0}).ok());
  EXPECT_FALSE(RingCollective::Create({3, 3}).ok());
  EXPECT_FALSE(RingCollective::Create({3, -1}).ok());
  EXPECT_FALSE(RingCollective::Create({3, 0, 2}).ok());
}

}  // namespace
}  // namespace fedmesh::collective
