#include "aggregator/robust_aggregation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

namespace fedmesh {
namespace {

Status CheckFraction(double v, const char* field) {
  if (!(v >= 0.0 && v < 0.5)) {
    return Status::InvalidArgument(std::string(field) + " must be in [0, 0.5) (got " +
                                   FormatNumber(v) + ")");
  }
  return Status::OK();
}

// Per coordinate: gathers the n values, then `reduce` turns the sorted (or partially
// ordered) column into one value. Columns are independent: parallel over coordinates.
template <typename Reduce>
void ReduceColumns(const std::vector<ClientUpdate>& updates, std::span<float> out, Reduce reduce) {
  const size_t n = updates.size();
  const int64_t d = static_cast<int64_t>(out.size());
#pragma omp parallel if (d * static_cast<int64_t>(n) >= (int64_t{1} << 18))
  {
    std::vector<float> column(n);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < d; ++i) {
      for (size_t k = 0; k < n; ++k) column[k] = updates[k].params[static_cast<size_t>(i)];
      out[static_cast<size_t>(i)] = reduce(column);
    }
  }
}

float Median(std::vector<float>& c) {
  const size_t n = c.size(), mid = n / 2;
  std::nth_element(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(mid), c.end());
  const double hi = c[mid];
  if (n % 2 == 1) return static_cast<float>(hi);
  const double lo = *std::max_element(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(mid));
  return static_cast<float>((lo + hi) / 2);
}

}  // namespace

Result<std::unique_ptr<RobustAggregator>> RobustAggregator::Create(RobustRule rule,
                                                                   const StrategyOptions& o) {
  FM_RETURN_IF_ERROR(CheckFraction(o.trim_fraction, "trim_fraction"));
  FM_RETURN_IF_ERROR(CheckFraction(o.byzantine_fraction, "byzantine_fraction"));
  return std::unique_ptr<RobustAggregator>(new RobustAggregator(rule, o));
}

std::string_view RobustAggregator::name() const {
  switch (rule_) {
    case RobustRule::kMedian: return "median";
    case RobustRule::kTrimmedMean: return "trimmed_mean";
    case RobustRule::kKrum: return "krum";
    case RobustRule::kMultiKrum: return "multikrum";
  }
  return "unknown";
}

uint32_t RobustAggregator::AssumedByzantine(size_t n) const {
  auto f = static_cast<uint32_t>(std::floor(byzantine_ * static_cast<double>(n)));
  while (f > 0 && n < 2 * static_cast<size_t>(f) + 3) --f;
  return f;
}

std::vector<double> RobustAggregator::KrumScores(const std::vector<ClientUpdate>& updates,
                                                 uint32_t f) {
  const size_t n = updates.size();
  std::vector<double> dist(n * n, 0.0);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      const auto& x = updates[a].params;
      const auto& y = updates[b].params;
      double s = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double t = static_cast<double>(x[i]) - y[i];
        s += t * t;
      }
      dist[a * n + b] = dist[b * n + a] = s;
    }
  }
  std::vector<double> scores(n, 0.0);
  if (n < 2) return scores;
  const size_t want = n >= f + 3 ? n - f - 2 : 1;
  const size_t k = std::min(std::max<size_t>(want, 1), n - 1);
  std::vector<double> row;
  for (size_t a = 0; a < n; ++a) {
    row.clear();
    for (size_t b = 0; b < n; ++b) {
      if (b != a) row.push_back(dist[a * n + b]);
    }
    std::partial_sort(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(k), row.end());
    scores[a] = std::accumulate(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(k), 0.0);
  }
  return scores;
}

Status RobustAggregator::Aggregate(std::span<const float> global,
                                   const std::vector<ClientUpdate>& updates,
                                   std::span<float> new_global) {
  FM_RETURN_IF_ERROR(CheckRoundUpdates(global, updates, new_global).WithContext(std::string(name())));
  const size_t n = updates.size();
  // Computed into a buffer of its own: new_global may be the buffer of `global`.
  std::vector<float> out(global.size());
  switch (rule_) {
    case RobustRule::kMedian:
      ReduceColumns(updates, out, Median);
      break;
    case RobustRule::kTrimmedMean: {
      const auto cut = static_cast<size_t>(std::floor(trim_ * static_cast<double>(n)));
      ReduceColumns(updates, out, [cut](std::vector<float>& c) {
        std::sort(c.begin(), c.end());
        double s = 0;
        for (size_t k = cut; k < c.size() - cut; ++k) s += c[k];
        return static_cast<float>(s / static_cast<double>(c.size() - 2 * cut));
      });
      break;
    }
    case RobustRule::kKrum:
    case RobustRule::kMultiKrum: {
      const uint32_t f = AssumedByzantine(n);
      const std::vector<double> scores = KrumScores(updates, f);
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return scores[a] < scores[b]; });
      size_t m = 1;
      if (rule_ == RobustRule::kMultiKrum) m = select_ > 0 ? std::min<size_t>(select_, n) : n - f;
      order.resize(m);
      std::sort(order.begin(), order.end());
      std::vector<double> acc(out.size(), 0.0);
      for (size_t k : order) {
        const auto& p = updates[k].params;
        for (size_t i = 0; i < acc.size(); ++i) acc[i] += p[i];
      }
      for (size_t i = 0; i < acc.size(); ++i) {
        out[i] = static_cast<float>(acc[i] / static_cast<double>(m));
      }
      last_selected_ = std::move(order);
      break;
    }
  }
  std::copy(out.begin(), out.end(), new_global.begin());
  return Status::OK();
}

}  // namespace fedmesh
