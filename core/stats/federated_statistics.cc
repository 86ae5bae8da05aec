#include "core/stats/federated_statistics.h"

#include <algorithm>
#include <cmath>

#include "core/stats/tdigest.h"

namespace fedmesh {

namespace {

void SetMoments(FeatureStatistics& g) {
  if (g.count == 0) return;
  const double n = static_cast<double>(g.count);
  g.mean = g.sum / n;
  g.variance = std::max(0.0, (g.sum_sq - g.sum * g.mean) / n);
  g.stddev = std::sqrt(g.variance);
}

}  // namespace

Result<FederationStatistics> MergeSiteStatistics(
    const std::map<std::string, wire::SiteStatistics>& sites,
    std::span<const double> quantile_levels, double compression) {
  FederationStatistics out;
  out.quantile_levels.assign(quantile_levels.begin(), quantile_levels.end());
  std::vector<TDigest> digests;
  std::vector<bool> has_digest;
  for (const auto& [id, s] : sites) {
    if (!s.released) continue;
    if (out.sites.empty()) {
      out.features.resize(s.feature_names.size());
      for (size_t j = 0; j < s.feature_names.size(); ++j) {
        out.features[j].name = s.feature_names[j];
        out.features[j].min = INFINITY;
        out.features[j].max = -INFINITY;
      }
      digests.assign(s.feature_names.size(), TDigest(compression));
      has_digest.assign(s.feature_names.size(), false);
    } else if (s.feature_names.size() != out.features.size() ||
               !std::equal(s.feature_names.begin(), s.feature_names.end(), out.features.begin(),
                           [](const std::string& a, const FeatureStatistics& b) { return a == b.name; })) {
      return Status::InvalidArgument("site " + id + " summarises other features (" +
                                     std::to_string(s.feature_names.size()) + ", first \"" +
                                     (s.feature_names.empty() ? "" : s.feature_names[0]) +
                                     "\") than site " + out.sites.front() + " (" +
                                     std::to_string(out.features.size()) + ")");
    }
    out.sites.push_back(id);
    out.rows += s.rows;
    if (out.label_counts.size() < s.label_counts.size()) out.label_counts.resize(s.label_counts.size());
    for (size_t c = 0; c < s.label_counts.size(); ++c) out.label_counts[c] += s.label_counts[c];
    for (size_t j = 0; j < s.features.size(); ++j) {
      const wire::FeatureSummary& f = s.features[j];
      FeatureStatistics& g = out.features[j];
      g.count += f.count;
      g.sum += f.sum;
      g.sum_sq += f.sum_sq;
      g.min = std::min(g.min, f.min);
      g.max = std::max(g.max, f.max);
      if (!f.centroid_mean.empty()) {
        auto d = TDigest::FromCentroids(f.centroid_mean, f.centroid_weight, f.min, f.max, compression);
        if (!d.ok()) return d.status().WithContext("site " + id + " feature " + g.name);
        digests[j].Merge(*d);
        has_digest[j] = true;
      }
    }
  }
  if (out.sites.empty()) return Status::InvalidArgument("no site released statistics");
  for (size_t j = 0; j < out.features.size(); ++j) {
    FeatureStatistics& g = out.features[j];
    SetMoments(g);
    if (has_digest[j]) {
      for (double q : out.quantile_levels) g.quantiles.push_back(digests[j].Quantile(q));
    }
  }
  return out;
}

wire::StatsRequest HistogramRequest(const FederationStatistics& stats, uint32_t bins) {
  wire::StatsRequest r;
  r.phase = 2;
  r.bins = bins;
  for (const FeatureStatistics& f : stats.features) {
    r.bin_lo.push_back(std::isfinite(f.min) ? f.min : 0.0);
    r.bin_hi.push_back(std::isfinite(f.max) ? std::max(f.max, r.bin_lo.back()) : r.bin_lo.back());
  }
  return r;
}

Status AddHistograms(FederationStatistics& stats, const wire::StatsRequest& request,
                     const std::map<std::string, wire::SiteStatistics>& sites) {
  for (size_t j = 0; j < stats.features.size() && j < request.bin_lo.size(); ++j) {
    stats.features[j].bin_lo = request.bin_lo[j];
    stats.features[j].bin_hi = request.bin_hi[j];
  }
  for (const auto& [id, s] : sites) {
    if (!s.released || s.features.size() != stats.features.size()) continue;
    const bool complete = std::all_of(s.features.begin(), s.features.end(),
                                      [](const wire::FeatureSummary& f) { return !f.histogram.empty(); });
    if (!complete) continue;
    for (size_t j = 0; j < s.features.size(); ++j) {
      const auto& h = s.features[j].histogram;
      if (h.size() != request.bins) {
        return Status::InvalidArgument("site " + id + " sent a histogram of " +
                                       std::to_string(h.size()) + " bins; " +
                                       std::to_string(request.bins) + " were asked for");
      }
      FeatureStatistics& g = stats.features[j];
      if (g.histogram.empty()) g.histogram.assign(request.bins, 0);
      for (size_t b = 0; b < h.size(); ++b) g.histogram[b] += h[b];
      g.histogram_rows += s.features[j].count;
    }
  }
  return Status::OK();
}

}  // namespace fedmesh

namespace fedmesh {

Status ApplySecureSums(FederationStatistics& stats, const wire::StatsRequest& request,
                       const SecureSums& sums) {
  if (sums.count.size() != stats.features.size() || request.bin_lo.size() != stats.features.size()) {
    return Status::InvalidArgument("secure sums for " + std::to_string(sums.count.size()) +
                                   " features; the statistics have " +
                                   std::to_string(stats.features.size()));
  }
  // Whole numbers decode exactly; llround guards against a stray 2^-44.
  auto whole = [](double v) { return static_cast<uint64_t>(std::llround(std::max(0.0, v))); };
  stats.rows = whole(sums.rows);
  stats.label_counts.clear();
  for (double c : sums.label_counts) stats.label_counts.push_back(whole(c));
  for (size_t j = 0; j < stats.features.size(); ++j) {
    FeatureStatistics& g = stats.features[j];
    g.count = whole(sums.count[j]);
    g.sum = sums.sum[j];
    g.sum_sq = sums.sum_sq[j];
    SetMoments(g);
    g.bin_lo = request.bin_lo[j];
    g.bin_hi = request.bin_hi[j];
    g.histogram_rows = whole(sums.histogram_rows[j]);
    g.histogram.clear();
    if (g.histogram_rows > 0) {
      for (double c : sums.histogram[j]) g.histogram.push_back(whole(c));
    }
  }
  return Status::OK();
}

}  // namespace fedmesh
