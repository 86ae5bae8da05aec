// Peer sampling (gossip/topology.h) and mixing matrices (gossip/mixing.h): the graphs each
// topology builds, Metropolis-Hastings weights, the spectral gap against closed forms, and
// pure averaging on 64 nodes against the spectral prediction. (The sans-IO gossip protocols
// of issue 5 build on these; this is not yet the protocol.)
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "gossip/consensus.h"
#include "gossip/mixing.h"
#include "gossip/topology.h"

namespace fedmesh {
namespace {

using V = std::vector<uint32_t>;

TEST(Topology, NamesParseAndUnknownIsRefused) {
  for (const std::string& name : KnownTopologyNames()) {
    auto t = ParseTopology(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(TopologyName(*t), name);
  }
  auto bad = ParseTopology("star");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("one_peer_exponential"), std::string::npos);
}

TEST(Topology, StaticGraphs) {
  EXPECT_EQ(OutNeighbors(Topology::kRing, 8, 0, 0), (V{1, 7}));
  EXPECT_EQ(OutNeighbors(Topology::kRing, 8, 5, 99), (V{4, 6}));
  EXPECT_EQ(OutNeighbors(Topology::kRing, 2, 0, 0), (V{1}));
  EXPECT_EQ(OutNeighbors(Topology::kRing, 1, 0, 0), V{});
  EXPECT_EQ(OutNeighbors(Topology::kExponential, 64, 0, 0), (V{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(OutNeighbors(Topology::kExponential, 64, 60, 0), (V{0, 4, 12, 28, 61, 62}));  // wraps
  EXPECT_EQ(OutNeighbors(Topology::kExponential, 10, 3, 0), (V{1, 4, 5, 7}));  // 3+8 = 11 -> 1
  // One peer per step, cycling through the exponential hops.
  for (uint64_t step = 0; step < 12; ++step) {
    EXPECT_EQ(OutNeighbors(Topology::kOnePeerExponential, 64, 10, step),
              (V{static_cast<uint32_t>((10 + (1u << (step % 6))) % 64)}));
  }
}

TEST(Topology, RandomPicksDistinctOthersUniformly) {
  Rng rng(3);
  std::vector<int> hits(10, 0);
  for (int t = 0; t < 9000; ++t) {
    V peers = OutNeighbors(Topology::kRandom, 10, 4, t, 3, &rng);
    ASSERT_EQ(peers.size(), 3u);
    ASSERT_EQ(std::set<uint32_t>(peers.begin(), peers.end()).size(), 3u);
    for (uint32_t p : peers) {
      ASSERT_NE(p, 4u);
      ++hits[p];
    }
  }
  // 27,000 picks over 9 others: 3,000 each (sd ~ 50).
  for (int i = 0; i < 10; ++i) {
    if (i == 4) {
      EXPECT_EQ(hits[i], 0);
    } else {
      EXPECT_NEAR(hits[i], 3000, 250) << i;
    }
  }
  EXPECT_EQ(OutNeighbors(Topology::kRandom, 3, 0, 0, 10, &rng).size(), 2u);  // capped
}

TEST(Topology, SamplePeersMapsRanksOfTheSortedView) {
  const std::vector<std::string> view = {"site-c", "site-a", "site-d", "site-b"};
  Rng rng(1);
  // Sorted: a b c d; site-c is rank 2; ring neighbours are ranks 1 and 3.
  EXPECT_EQ(SamplePeers(Topology::kRing, view, "site-c", 0, 1, &rng),
            (std::vector<std::string>{"site-b", "site-d"}));
  EXPECT_TRUE(SamplePeers(Topology::kRing, view, "site-x", 0, 1, &rng).empty());
}

TEST(Mixing, MetropolisHastingsIsSymmetricDoublyStochastic) {
  const uint32_t n = 24;
  const auto graph = UndirectedGraph(Topology::kExponential, n);
  const std::vector<double> w = MetropolisHastingsWeights(graph);
  for (uint32_t i = 0; i < n; ++i) {
    double row = 0.0, col = 0.0;
    for (uint32_t j = 0; j < n; ++j) {
      EXPECT_GE(w[i * n + j], 0.0);
      EXPECT_DOUBLE_EQ(w[i * n + j], w[j * n + i]);
      row += w[i * n + j];
      col += w[j * n + i];
    }
    EXPECT_NEAR(row, 1.0, 1e-12);
    EXPECT_NEAR(col, 1.0, 1e-12);
    // A node computes its own row from degrees alone.
    std::vector<uint32_t> degrees;
    for (uint32_t j : graph[i]) degrees.push_back(static_cast<uint32_t>(graph[j].size()));
    const std::vector<double> row_i =
        MetropolisHastingsRow(static_cast<uint32_t>(graph[i].size()), degrees);
    EXPECT_DOUBLE_EQ(row_i[0], w[i * n + i]);
    for (size_t k = 0; k < graph[i].size(); ++k) {
      EXPECT_DOUBLE_EQ(row_i[1 + k], w[i * n + graph[i][k]]);
    }
  }
}

TEST(Mixing, SpectralGapMatchesClosedForms) {
  // Ring with MH weights 1/3: eigenvalues 1/3 + 2/3 cos(2 pi k / n).
  for (uint32_t n : {5u, 16u, 64u}) {
    const auto w = MetropolisHastingsWeights(UndirectedGraph(Topology::kRing, n));
    double want = 0.0;
    for (uint32_t k = 1; k < n; ++k) {
      want = std::max(want, std::fabs(1.0 / 3 + 2.0 / 3 * std::cos(2 * std::numbers::pi * k / n)));
    }
    EXPECT_NEAR(SecondLargestEigenvalueModulus(w, n), want, 1e-8) << n;
  }
  // Complete graph: W = 11^T / n, every other eigenvalue 0.
  const uint32_t n = 6;
  std::vector<std::vector<uint32_t>> complete(n);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < n; ++j) {
      if (i != j) complete[i].push_back(j);
    }
  }
  EXPECT_NEAR(SecondLargestEigenvalueModulus(MetropolisHastingsWeights(complete), n), 0.0, 1e-9);
  EXPECT_EQ(PredictedMixingRounds(0.5, 1e4), 7u);  // ln(1e4) / (2 ln 2) = 6.64
  EXPECT_EQ(PredictedMixingRounds(1.0, 1e4), UINT64_MAX);
}

// Pure averaging (no training) of random vectors on 64 nodes, D-PSGD style x <- W x on the
// exponential graph: the consensus distance falls by 1e4 within the rounds the spectral gap
// predicts, and the average is preserved.
TEST(Mixing, SixtyFourNodesOnTheExponentialGraphMixAsPredicted) {
  const uint32_t n = 64, dim = 16;
  const auto w = MetropolisHastingsWeights(UndirectedGraph(Topology::kExponential, n));
  const double slem = SecondLargestEigenvalueModulus(w, n);
  const uint64_t predicted = PredictedMixingRounds(slem, 1e4);
  Rng rng(5);
  std::vector<std::vector<float>> x(n, std::vector<float>(dim));
  for (auto& v : x) {
    for (float& e : v) e = static_cast<float>(rng.Normal());
  }
  auto spans = [&] {
    std::vector<std::span<const float>> s;
    for (const auto& v : x) s.emplace_back(v);
    return s;
  };
  const double start = ConsensusDistance(spans());
  const std::vector<float> mean = Average(spans());
  uint64_t rounds = 0;
  while (ConsensusDistance(spans()) > start / 1e4) {
    ASSERT_LT(rounds, 1000u) << "no convergence";
    std::vector<std::vector<float>> next(n, std::vector<float>(dim, 0.0f));
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        const double wij = w[i * n + j];
        if (wij == 0.0) continue;
        for (uint32_t d = 0; d < dim; ++d) next[i][d] += static_cast<float>(wij * x[j][d]);
      }
    }
    x = std::move(next);
    ++rounds;
  }
  std::cout << "[ info ] 64 nodes, exponential graph (degree 11), MH weights: slem " << slem
            << ", predicted <= " << predicted << " rounds for 1e4, measured " << rounds << "\n";
  EXPECT_LE(rounds, predicted);
  EXPECT_GE(rounds, predicted / 3);  // the bound is not loose by an order of magnitude
  const std::vector<float> after = Average(spans());
  for (uint32_t d = 0; d < dim; ++d) EXPECT_NEAR(after[d], mean[d], 1e-5);
}

// One-peer exponential: x_i <- (x_i + x_{i - 2^k}) / 2 at step k reaches the exact average
// in log2 n steps when n is a power of two.
TEST(Mixing, OnePeerExponentialAveragesExactlyInLog2NSteps) {
  const uint32_t n = 64;
  Rng rng(9);
  std::vector<double> x(n);
  for (double& v : x) v = rng.Normal();
  double mean = 0.0;
  for (double v : x) mean += v / n;
  for (uint64_t step = 0; step < 6; ++step) {
    std::vector<double> next = x;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t to = OutNeighbors(Topology::kOnePeerExponential, n, i, step)[0];
      next[to] = 0.5 * (x[to] + x[i]);  // `to` receives from exactly one sender: i
    }
    x = std::move(next);
  }
  for (double v : x) EXPECT_NEAR(v, mean, 1e-12);
}

}  // namespace
}  // namespace fedmesh
