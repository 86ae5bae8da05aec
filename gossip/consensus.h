// Consensus distance: how far a set of models is from agreeing, the first-class metric of
// gossip training. For models x_1..x_n with average x̄ it is (1/n) Σ_i ||x_i − x̄||², the
// quantity decentralised-SGD analyses bound (it must shrink for gossip to converge to the
// result of centralised averaging). The simulator reports it per round; tests use it to
// check that a gossip protocol actually mixes. Thread-safety: pure functions of their
// inputs; safe to call concurrently.
#pragma once

#include <span>
#include <vector>

namespace fedmesh {

// The element-wise mean of the models, accumulated in double and rounded once to float.
// REQUIRES: !models.empty() and every model has the same size.
std::vector<float> Average(const std::vector<std::span<const float>>& models);

// (1/n) Σ_i ||x_i − x̄||², accumulated in double. 0 for no models.
// REQUIRES: every model has the same size.
double ConsensusDistance(const std::vector<std::span<const float>>& models);

}  // namespace fedmesh
