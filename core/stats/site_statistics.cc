#include "core/stats/site_statistics.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/stats/tdigest.h"

namespace fedmesh {

Status Validate(const StatsPrivacyPolicy& p) {
  if (p.min_count < 1) return Status::InvalidArgument("stats.min_count must be >= 1");
  if (!std::isfinite(p.minmax_noise) || p.minmax_noise < 0) {
    return Status::InvalidArgument("stats.minmax_noise must be finite and >= 0");
  }
  if (!(p.max_bins_fraction > 0 && p.max_bins_fraction <= 1)) {
    return Status::InvalidArgument("stats.max_bins_fraction must be in (0, 1]");
  }
  if (!(p.compression >= 10 && p.compression <= 1000)) {
    return Status::InvalidArgument("stats.compression must be in [10, 1000]");
  }
  return Status::OK();
}

uint32_t HistogramBin(double x, double lo, double hi, uint32_t bins) {
  if (!(hi > lo) || bins <= 1) return 0;
  const double t = (x - lo) / (hi - lo) * bins;
  if (!(t > 0)) return 0;
  return static_cast<uint32_t>(std::min<double>(std::floor(t), bins - 1));
}

Result<wire::SiteStatistics> SummarizeSite(const Dataset& data, const wire::StatsRequest& request,
                                           const StatsPrivacyPolicy& policy, Rng& noise) {
  FM_RETURN_IF_ERROR(Validate(policy));
  wire::SiteStatistics out;
  out.phase = request.phase;
  const size_t n = data.size();
  if (!policy.allow) {
    out.withheld = "this site does not release statistics ([stats] allow = false)";
    return out;
  }
  if (n < policy.min_count) {
    out.withheld = "this site has " + std::to_string(n) + " rows, fewer than its min_count " +
                   std::to_string(policy.min_count);
    return out;
  }
  const size_t d = data.sample_size();
  if (d > wire::kMaxStatsFeatures) {
    return Status::InvalidArgument("the data has " + std::to_string(d) +
                                   " features; federated statistics summarise at most " +
                                   std::to_string(wire::kMaxStatsFeatures));
  }
  if (request.phase == 2 && request.bin_lo.size() != d) {
    return Status::InvalidArgument("the statistics request has ranges for " +
                                   std::to_string(request.bin_lo.size()) + " features; this site has " +
                                   std::to_string(d));
  }
  out.released = true;
  out.rows = n;
  out.feature_names = data.feature_names;
  if (out.feature_names.size() != d) {
    out.feature_names.clear();
    for (size_t j = 0; j < d; ++j) out.feature_names.push_back("x" + std::to_string(j));
  }
  out.features.resize(d);
  const bool histograms =
      request.phase == 2 && request.bins <= policy.max_bins_fraction * static_cast<double>(n);
  if (request.phase == 2 && !histograms) {
    out.withheld = "histograms withheld: " + std::to_string(request.bins) + " bins over " +
                   std::to_string(n) + " rows exceed max_bins_fraction " +
                   std::to_string(policy.max_bins_fraction);
  }
  for (size_t j = 0; j < d; ++j) {
    wire::FeatureSummary& f = out.features[j];
    f.count = n;
    if (request.phase == 2) {
      f.count = 0;
      for (size_t i = 0; i < n; ++i) f.count += std::isnan(data.sample(i)[j]) ? 0 : 1;
      if (histograms) {
        f.histogram.assign(request.bins, 0);
        for (size_t i = 0; i < n; ++i) {
          const float x = data.sample(i)[j];
          if (!std::isnan(x)) ++f.histogram[HistogramBin(x, request.bin_lo[j], request.bin_hi[j], request.bins)];
        }
      }
      continue;
    }
    // Neumaier-compensated sums: the federation's variance is sum_sq - sum^2 / n, where
    // rounding in a plain running sum would show.
    double sum = 0, sum_c = 0, sq = 0, sq_c = 0;
    auto add = [](double& s, double& c, double v) {
      const double t = s + v;
      c += std::fabs(s) >= std::fabs(v) ? (s - t) + v : (v - t) + s;
      s = t;
    };
    double lo = INFINITY, hi = -INFINITY;
    TDigest digest(policy.compression);
    uint64_t present = 0;
    for (size_t i = 0; i < n; ++i) {
      const double x = data.sample(i)[j];
      if (std::isnan(x)) continue;  // a missing cell ([data] missing = "impute_mean")
      ++present;
      add(sum, sum_c, x);
      add(sq, sq_c, x * x);
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      if (policy.quantiles) digest.Add(x);
    }
    f.count = present;
    f.sum = sum + sum_c;
    f.sum_sq = sq + sq_c;
    if (present == 0) lo = hi = 0.0;
    const double scale = policy.minmax_noise * (hi > lo ? hi - lo : std::max(1.0, std::fabs(lo)));
    f.min = lo - std::fabs(noise.Normal()) * scale;
    f.max = hi + std::fabs(noise.Normal()) * scale;
    if (policy.quantiles) {
      digest.Compress();
      for (const TDigest::Centroid& c : digest.centroids()) {
        f.centroid_mean.push_back(c.mean);
        f.centroid_weight.push_back(c.weight);
      }
    }
  }
  if (request.phase == 1 && data.target_dim == 0 && data.num_classes > 0) {
    out.label_counts.assign(static_cast<size_t>(data.num_classes), 0);
    for (int32_t y : data.labels) {
      if (y >= 0 && y < data.num_classes) ++out.label_counts[static_cast<size_t>(y)];
    }
  }
  if (request.phase == 1 && !policy.quantiles) out.withheld = "quantile sketches withheld";
  if (request.phase == 1 && request.secure) {
    // The additive figures go through secure aggregation in phase 2 (SiteSecureSums).
    out.secure = true;
    out.num_classes = data.target_dim == 0 ? static_cast<uint32_t>(std::max(0, data.num_classes)) : 0;
    out.label_counts.clear();
    for (wire::FeatureSummary& f : out.features) {
      f.count = 0;
      f.sum = 0;
      f.sum_sq = 0;
    }
  }
  return out;
}

Result<SecureSums> SiteSecureSums(const Dataset& data, const wire::StatsRequest& request,
                                  const StatsPrivacyPolicy& policy) {
  if (request.phase != 2 || !request.secure) {
    return Status::InvalidArgument("secure sums answer a secure phase-2 statistics request");
  }
  const SecureSumLayout layout{request.bin_lo.size(), request.bins, request.classes};
  SecureSums sums = ZeroSums(layout);
  Rng unused(0);  // exact figures only: no min/max goes out here
  StatsPrivacyPolicy exact = policy;
  exact.minmax_noise = 0;
  exact.quantiles = false;
  FM_ASSIGN_OR_RETURN(wire::SiteStatistics moments, SummarizeSite(data, wire::StatsRequest{}, exact, unused));
  if (!moments.released) return sums;  // below min_count or not allowed: zeros
  wire::StatsRequest plain = request;
  plain.secure = false;
  FM_ASSIGN_OR_RETURN(wire::SiteStatistics hist, SummarizeSite(data, plain, exact, unused));
  if (moments.features.size() != layout.features) {
    return Status::InvalidArgument("the statistics request has ranges for " +
                                   std::to_string(layout.features) + " features; this site has " +
                                   std::to_string(moments.features.size()));
  }
  if (moments.label_counts.size() > layout.classes) {
    return Status::InvalidArgument("this site has " + std::to_string(moments.label_counts.size()) +
                                   " classes; the request sums " + std::to_string(layout.classes));
  }
  for (size_t j = 0; j < layout.features; ++j) {
    sums.count[j] = static_cast<double>(moments.features[j].count);
    sums.sum[j] = moments.features[j].sum;
    sums.sum_sq[j] = moments.features[j].sum_sq;
    const auto& h = hist.features[j].histogram;
    if (!h.empty()) {
      sums.histogram_rows[j] = static_cast<double>(hist.features[j].count);
      for (size_t b = 0; b < h.size(); ++b) sums.histogram[j][b] = static_cast<double>(h[b]);
    }
  }
  for (size_t c = 0; c < moments.label_counts.size(); ++c) {
    sums.label_counts[c] = static_cast<double>(moments.label_counts[c]);
  }
  sums.rows = static_cast<double>(moments.rows);
  return sums;
}

}  // namespace fedmesh
