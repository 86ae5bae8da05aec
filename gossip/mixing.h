// Mixing matrices for decentralised averaging, and what their spectrum predicts. D-PSGD
// (Lian et al. 2017) averages with neighbours through a symmetric, doubly stochastic W;
// Metropolis-Hastings weights build one from any undirected graph using only the degrees
// of a node and its neighbours (each node can compute its own row from its view). Repeated
// x <- W x shrinks the consensus distance at least as fast as slem(W)^(2t), where slem is
// the second largest eigenvalue modulus; 1 - slem is the spectral gap.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fedmesh {

// Row-major n x n Metropolis-Hastings matrix of an undirected graph (adjacency lists, no
// self loops, symmetric): w_ij = 1 / (1 + max(deg i, deg j)) for each edge,
// w_ii = 1 - sum_j w_ij. Symmetric, doubly stochastic, non-negative.
std::vector<double> MetropolisHastingsWeights(const std::vector<std::vector<uint32_t>>& graph);

// The weights node i gives itself and its neighbours: row i of the matrix above, from the
// degrees alone (what a D-PSGD node computes from its view). `neighbor_degrees[k]` is the
// degree of the k-th neighbour. Returns {self weight, neighbour weights in order}.
std::vector<double> MetropolisHastingsRow(uint32_t degree, std::span<const uint32_t> neighbor_degrees);

// Second largest eigenvalue modulus of a symmetric, doubly stochastic n x n matrix, by power
// iteration on (W - 11^T/n)^2 from a seeded start. Accurate to ~1e-9 for the gaps of the
// graphs used here (thousands of iterations are cheap at n <= a few hundred).
double SecondLargestEigenvalueModulus(std::span<const double> w, uint32_t n);

// Rounds of x <- W x after which the consensus distance is at most 1/factor of its start,
// by the bound slem^(2t): ceil(ln(factor) / (2 ln(1 / slem))). 0 when slem == 0; UINT64_MAX
// when slem >= 1 (no guarantee: a disconnected graph).
uint64_t PredictedMixingRounds(double slem, double factor);

}  // namespace fedmesh
