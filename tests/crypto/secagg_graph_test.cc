// The SecAgg+ graph: the default degree and threshold rules, k-regularity / symmetry / no
// self-loops for many (n, k), the complete graph when k >= n - 1, the same graph for every
// party (any input order) and a new one per seed, a known-answer graph whose shuffle was
// recomputed independently in Python (ChaCha20 from the cryptography package, Fisher-Yates
// with rejection sampling), a uniform shuffle (chi-square over the 12 distinct 5-cycles),
// and refusals.
#include "crypto/secagg/secagg_graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "crypto/sodium.h"
#include "tests/crypto/secagg_test_util.h"

namespace fedmesh {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Ids(size_t n) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < n; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "site-%04zu", i);
    ids.push_back(buf);
  }
  return ids;
}

std::array<uint8_t, kGraphSeedSize> Seed(uint64_t s) {
  std::array<uint8_t, kGraphSeedSize> seed{};
  for (int i = 0; i < 8; ++i) seed[i] = static_cast<uint8_t>(s >> (8 * i));
  return seed;
}

class SecAggGraphTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

TEST_F(SecAggGraphTest, DefaultRules) {
  EXPECT_EQ(DefaultSecAggNeighbours(1), 0u);
  EXPECT_EQ(DefaultSecAggNeighbours(2), 1u);    // complete
  EXPECT_EQ(DefaultSecAggNeighbours(5), 4u);    // 2 * 3 = 6, capped at n - 1
  EXPECT_EQ(DefaultSecAggNeighbours(50), 12u);  // 2 * ceil(log2 50) = 2 * 6
  EXPECT_EQ(DefaultSecAggNeighbours(64), 12u);
  EXPECT_EQ(DefaultSecAggNeighbours(65), 14u);
  EXPECT_EQ(DefaultSecAggNeighbours(200), 16u);
  EXPECT_EQ(DefaultSecAggNeighbours(1000000), 40u);
  EXPECT_EQ(DefaultSecAggThreshold(1), 1u);
  EXPECT_EQ(DefaultSecAggThreshold(2), 2u);
  EXPECT_EQ(DefaultSecAggThreshold(4), 3u);
  EXPECT_EQ(DefaultSecAggThreshold(12), 7u);
  EXPECT_EQ(DefaultSecAggThreshold(16), 9u);
  EXPECT_EQ(DefaultSecAggThreshold(199), 101u);
  for (uint32_t k = 1; k <= 254; ++k) {
    const uint32_t t = DefaultSecAggThreshold(k);
    EXPECT_GT(2 * t, k) << k;  // more than half: see the header
    EXPECT_LE(t, k) << k;
  }
}

TEST_F(SecAggGraphTest, IsRegularSymmetricAndLoopFree) {
  for (size_t n : {2u, 3u, 5u, 8u, 50u, 200u}) {
    for (uint32_t k : {2u, 4u, 12u, 16u, 254u}) {
      Result<SecAggGraph> g = SecAggGraph::Build(Ids(n), k, Seed(n * 1000 + k));
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      const uint32_t degree = std::min<uint32_t>(k, static_cast<uint32_t>(n - 1));
      ASSERT_EQ(g->degree(), degree);
      for (uint32_t i = 0; i < n; ++i) {
        const auto row = g->Neighbours(i);
        ASSERT_EQ(row.size(), degree);
        ASSERT_TRUE(std::is_sorted(row.begin(), row.end()));
        ASSERT_EQ(std::adjacent_find(row.begin(), row.end()), row.end()) << "repeated neighbour";
        for (uint32_t j : row) {
          ASSERT_NE(j, i) << "self-loop";
          ASSERT_TRUE(g->AreNeighbours(j, i)) << "n=" << n << " k=" << k;
        }
      }
    }
  }
}

TEST_F(SecAggGraphTest, EveryPartyBuildsTheSameGraphAndSeedsMatter) {
  std::vector<std::string> ids = Ids(50);
  SecAggGraph a = *SecAggGraph::Build(ids, 12, Seed(1));
  std::reverse(ids.begin(), ids.end());
  SecAggGraph b = *SecAggGraph::Build(ids, 12, Seed(1));
  SecAggGraph c = *SecAggGraph::Build(ids, 12, Seed(2));
  bool differs = false;
  for (uint32_t i = 0; i < 50; ++i) {
    EXPECT_EQ(std::vector<uint32_t>(a.Neighbours(i).begin(), a.Neighbours(i).end()),
              std::vector<uint32_t>(b.Neighbours(i).begin(), b.Neighbours(i).end()));
    differs |= !std::equal(a.Neighbours(i).begin(), a.Neighbours(i).end(), c.Neighbours(i).begin());
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(a.participants(), Ids(50));
  EXPECT_EQ(a.IndexOf("site-0007"), 7u);
  EXPECT_EQ(a.IndexOf("site-9999"), std::nullopt);
}

// n = 8, k = 4, seed 00 01 .. 1f. In Python (cryptography's ChaCha20 takes the 4-byte
// little-endian counter followed by the 12-byte nonce):
//   stream = Cipher(algorithms.ChaCha20(seed, bytes(16)), None).encryptor().update(bytes(4096))
//   words = iter(struct.unpack('<1024I', stream))
//   def uniform(b):
//       limit = 2**32 - 2**32 % b
//       while (w := next(words)) >= limit: pass
//       return w % b
//   ring = list(range(8))
//   for i in range(7, 0, -1): j = uniform(i + 1); ring[i], ring[j] = ring[j], ring[i]
// gives ring = [4, 3, 0, 2, 7, 5, 6, 1]; each node joins the 2 ring positions either side.
TEST_F(SecAggGraphTest, KnownAnswerGraph) {
  std::array<uint8_t, kGraphSeedSize> seed{};
  for (size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<uint8_t>(i);
  SecAggGraph g = *SecAggGraph::Build(Ids(8), 4, seed);
  auto row = [&](uint32_t i) {
    return std::vector<uint32_t>(g.Neighbours(i).begin(), g.Neighbours(i).end());
  };
  EXPECT_THAT(row(0), ElementsAre(2, 3, 4, 7));
  EXPECT_THAT(row(1), ElementsAre(3, 4, 5, 6));
  EXPECT_THAT(row(2), ElementsAre(0, 3, 5, 7));
  EXPECT_THAT(row(3), ElementsAre(0, 1, 2, 4));
  EXPECT_THAT(row(4), ElementsAre(0, 1, 3, 6));
  EXPECT_THAT(row(5), ElementsAre(1, 2, 6, 7));
  EXPECT_THAT(row(6), ElementsAre(1, 4, 5, 7));
  EXPECT_THAT(row(7), ElementsAre(0, 2, 5, 6));
  EXPECT_EQ(g.NeighbourRank(0, 4), 2u);
  EXPECT_EQ(g.NeighbourRank(0, 5), std::nullopt);
}

TEST_F(SecAggGraphTest, CompleteWhenDegreeReachesNMinusOne) {
  for (uint32_t k : {4u, 5u, 6u, 100u}) {
    SecAggGraph g = *SecAggGraph::Build(Ids(5), k, Seed(k));
    EXPECT_EQ(g.degree(), 4u);
    for (uint32_t i = 0; i < 5; ++i) {
      for (uint32_t j = 0; j < 5; ++j) EXPECT_EQ(g.AreNeighbours(i, j), i != j);
    }
  }
}

// With n = 5 and k = 2 the graph is a 5-cycle; there are 4!/2 = 12 of them and a uniform
// shuffle makes each equally likely. 12,000 seeds, chi-square with 11 dof (p = 0.001
// critical value 31.26).
TEST_F(SecAggGraphTest, ShuffleIsUniform) {
  std::map<std::vector<uint32_t>, uint64_t> cycles;
  for (uint64_t s = 0; s < 12000; ++s) {
    SecAggGraph g = *SecAggGraph::Build(Ids(5), 2, Seed(s + 1));
    std::vector<uint32_t> key;
    for (uint32_t i = 0; i < 5; ++i)
      key.insert(key.end(), g.Neighbours(i).begin(), g.Neighbours(i).end());
    ++cycles[key];
  }
  ASSERT_EQ(cycles.size(), 12u);
  std::vector<uint64_t> counts;
  for (const auto& [key, count] : cycles) counts.push_back(count);
  EXPECT_LT(secagg_test::ChiSquareUniform(counts), secagg_test::kChiSquare11Dof999);
}

TEST_F(SecAggGraphTest, BuildRefusesBadInput) {
  EXPECT_THAT(SecAggGraph::Build(Ids(1), 2, Seed(1)).status().message(),
              HasSubstr("at least 2 participants; got 1"));
  std::vector<std::string> dup = Ids(5);
  dup[3] = dup[1];
  const Status d = SecAggGraph::Build(dup, 2, Seed(1)).status();
  EXPECT_EQ(d.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d.message(), "participant 'site-0001' appears twice in the graph");
  const Status odd = SecAggGraph::Build(Ids(10), 3, Seed(1)).status();
  EXPECT_EQ(odd.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(odd.message(), HasSubstr("degree 3 is odd"));
  EXPECT_EQ(SecAggGraph::Build(Ids(10), 0, Seed(1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SecAggGraph::Build(Ids(300), 256, Seed(1)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(SecAggGraph::Build(Ids(4), 3, Seed(1)).ok());  // odd is fine when complete
}

}  // namespace
}  // namespace fedmesh
