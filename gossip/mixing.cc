#include "gossip/mixing.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/rng.h"

namespace fedmesh {

std::vector<double> MetropolisHastingsWeights(const std::vector<std::vector<uint32_t>>& graph) {
  const size_t n = graph.size();
  std::vector<double> w(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double off = 0.0;
    for (uint32_t j : graph[i]) {
      FM_CHECK_LT(j, n);
      FM_CHECK_NE(j, i);
      const double wij = 1.0 / (1.0 + static_cast<double>(std::max(graph[i].size(), graph[j].size())));
      w[i * n + j] = wij;
      off += wij;
    }
    w[i * n + i] = 1.0 - off;
  }
  return w;
}

std::vector<double> MetropolisHastingsRow(uint32_t degree, std::span<const uint32_t> neighbor_degrees) {
  std::vector<double> row(1 + neighbor_degrees.size());
  double off = 0.0;
  for (size_t k = 0; k < neighbor_degrees.size(); ++k) {
    row[1 + k] = 1.0 / (1.0 + static_cast<double>(std::max(degree, neighbor_degrees[k])));
    off += row[1 + k];
  }
  row[0] = 1.0 - off;
  return row;
}

namespace {

// y = (W - 11^T / n) x.
void ApplyCentered(std::span<const double> w, uint32_t n, const std::vector<double>& x,
                   std::vector<double>& y) {
  double mean = 0.0;
  for (double v : x) mean += v;
  mean /= n;
  for (uint32_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (uint32_t j = 0; j < n; ++j) s += w[size_t{i} * n + j] * x[j];
    y[i] = s - mean;
  }
}

double Norm(const std::vector<double>& x) {
  double s = 0.0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

}  // namespace

double SecondLargestEigenvalueModulus(std::span<const double> w, uint32_t n) {
  FM_CHECK_EQ(w.size(), size_t{n} * n);
  if (n < 2) return 0.0;
  std::vector<double> x(n), y(n), z(n);
  Rng rng(12345);
  for (double& v : x) v = rng.Normal();
  double estimate = 0.0;
  for (int it = 0; it < 20000; ++it) {
    const double nx = Norm(x);
    if (nx == 0.0) return 0.0;
    for (double& v : x) v /= nx;
    ApplyCentered(w, n, x, y);
    ApplyCentered(w, n, y, z);  // (W - J)^2 x: eigenvalues lambda^2 >= 0, no sign flipping
    const double next = std::sqrt(Norm(z));
    x.swap(z);
    if (std::fabs(next - estimate) < 1e-13) return next;
    estimate = next;
  }
  return estimate;
}

uint64_t PredictedMixingRounds(double slem, double factor) {
  if (slem <= 0.0) return 0;
  if (slem >= 1.0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(std::ceil(std::log(factor) / (2.0 * std::log(1.0 / slem))));
}

}  // namespace fedmesh
