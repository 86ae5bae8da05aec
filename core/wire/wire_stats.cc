#include "core/wire/wire_stats.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/stats/secure_sums.h"

namespace fedmesh::wire {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

template <typename C>
Status CheckSize(const C& c, size_t limit, const char* field) {
  if (static_cast<size_t>(c.size()) > limit) {
    return Status::OutOfRange(std::string(field) + " has " + std::to_string(c.size()) +
                              " entries; the limit is " + std::to_string(limit));
  }
  return Status::OK();
}

}  // namespace

Status CheckStatsRequest(const StatsRequest& r) {
  if (r.phase != 1 && r.phase != 2) {
    return Status::InvalidArgument("StatsRequest phase is " + std::to_string(r.phase) +
                                   "; it must be 1 or 2");
  }
  if (r.classes > kMaxStatsClasses) {
    return Status::OutOfRange("StatsRequest classes is " + std::to_string(r.classes) +
                              "; the limit is " + std::to_string(kMaxStatsClasses));
  }
  if (r.phase == 1) {
    if (r.bins != 0 || !r.bin_lo.empty() || !r.bin_hi.empty() || r.classes != 0) {
      return Status::InvalidArgument("StatsRequest phase 1 carries histogram bins or ranges");
    }
    return Status::OK();
  }
  if ((r.bins < 1 && !r.secure) || r.bins > kMaxStatsBins) {
    return Status::InvalidArgument("StatsRequest bins is " + std::to_string(r.bins) +
                                   "; it must be in 1.." + std::to_string(kMaxStatsBins));
  }
  FM_RETURN_IF_ERROR(CheckSize(r.bin_lo, kMaxStatsFeatures, "StatsRequest bin_lo"));
  if (r.bin_lo.size() != r.bin_hi.size()) {
    return Status::InvalidArgument("StatsRequest has " + std::to_string(r.bin_lo.size()) +
                                   " bin_lo and " + std::to_string(r.bin_hi.size()) +
                                   " bin_hi; one of each per feature");
  }
  for (size_t i = 0; i < r.bin_lo.size(); ++i) {
    if (!std::isfinite(r.bin_lo[i]) || !std::isfinite(r.bin_hi[i]) || r.bin_lo[i] > r.bin_hi[i]) {
      return Status::InvalidArgument("StatsRequest range " + std::to_string(i) + " is [" +
                                     Num(r.bin_lo[i]) + ", " + Num(r.bin_hi[i]) +
                                     "]; it must be finite with lo <= hi");
    }
  }
  if (r.secure && SecureStatsWords(r) > kMaxSecureStatsWords) {
    return Status::OutOfRange("StatsRequest asks for " + std::to_string(SecureStatsWords(r)) +
                              " secure words; the limit is " + std::to_string(kMaxSecureStatsWords) +
                              " (fewer bins or features)");
  }
  return Status::OK();
}

size_t SecureStatsWords(const StatsRequest& r) {
  return SecureSumLayout{r.bin_lo.size(), r.bins, r.classes}.words();
}

Status CheckSiteStatistics(const SiteStatistics& s) {
  if (s.phase != 1 && s.phase != 2) {
    return Status::InvalidArgument("SiteStatistics phase is " + std::to_string(s.phase) +
                                   "; it must be 1 or 2");
  }
  if (s.withheld.size() > 1024) return Status::OutOfRange("SiteStatistics withheld is over 1024 bytes");
  if (s.num_classes > kMaxStatsClasses) {
    return Status::OutOfRange("SiteStatistics num_classes is over " + std::to_string(kMaxStatsClasses));
  }
  if (!s.released) {
    if (s.rows != 0 || !s.feature_names.empty() || !s.features.empty() || !s.label_counts.empty()) {
      return Status::InvalidArgument("SiteStatistics is not released but carries statistics");
    }
    return Status::OK();
  }
  FM_RETURN_IF_ERROR(CheckSize(s.feature_names, kMaxStatsFeatures, "SiteStatistics feature_names"));
  FM_RETURN_IF_ERROR(CheckSize(s.label_counts, kMaxStatsClasses, "SiteStatistics label_counts"));
  if (s.features.size() != s.feature_names.size()) {
    return Status::InvalidArgument("SiteStatistics has " + std::to_string(s.features.size()) +
                                   " summaries for " + std::to_string(s.feature_names.size()) +
                                   " feature names");
  }
  for (const std::string& name : s.feature_names) {
    if (name.size() > 256) return Status::OutOfRange("SiteStatistics feature name over 256 bytes");
  }
  if (s.secure) {
    // The additive figures travel under secure aggregation: nothing of them here.
    if (!s.label_counts.empty()) {
      return Status::InvalidArgument("SiteStatistics is secure but carries label counts");
    }
    for (const FeatureSummary& f : s.features) {
      if (f.count != 0 || f.sum != 0 || f.sum_sq != 0 || !f.histogram.empty()) {
        return Status::InvalidArgument("SiteStatistics is secure but carries counts, sums or "
                                       "histograms");
      }
    }
  }
  uint64_t labelled = 0;
  for (uint64_t c : s.label_counts) {
    if (c > s.rows) return Status::InvalidArgument("SiteStatistics label count exceeds its rows");
    labelled += c;
  }
  if (!s.label_counts.empty() && labelled != s.rows) {
    return Status::InvalidArgument("SiteStatistics label counts sum to " + std::to_string(labelled) +
                                   ", not to its " + std::to_string(s.rows) + " rows");
  }
  for (size_t i = 0; i < s.features.size(); ++i) {
    const FeatureSummary& f = s.features[i];
    const std::string what = "SiteStatistics feature " + std::to_string(i) + " ";
    if (f.count > s.rows) return Status::InvalidArgument(what + "count exceeds the rows");

    if (!std::isfinite(f.sum) || !std::isfinite(f.sum_sq) || f.sum_sq < 0 ||
        !std::isfinite(f.min) || !std::isfinite(f.max) || (f.count > 0 && f.min > f.max)) {
      return Status::InvalidArgument(what + "has a non-finite or inconsistent sum, sum_sq, min or max");
    }
    FM_RETURN_IF_ERROR(CheckSize(f.centroid_mean, kMaxStatsCentroids, "SiteStatistics centroids"));
    if (f.centroid_mean.size() != f.centroid_weight.size()) {
      return Status::InvalidArgument(what + "has centroid means and weights of different lengths");
    }
    for (size_t c = 0; c < f.centroid_mean.size(); ++c) {
      if (!std::isfinite(f.centroid_mean[c]) || !(f.centroid_weight[c] > 0) ||
          !std::isfinite(f.centroid_weight[c]) || (c > 0 && f.centroid_mean[c] < f.centroid_mean[c - 1])) {
        return Status::InvalidArgument(what + "has a centroid that is not finite, not positive "
                                              "or out of order");
      }
    }
    FM_RETURN_IF_ERROR(CheckSize(f.histogram, kMaxStatsBins, "SiteStatistics histogram"));
    if (!f.histogram.empty()) {
      uint64_t total = 0;
      for (uint64_t c : f.histogram) {
        if (c > f.count) return Status::InvalidArgument(what + "histogram bin exceeds its count");
        total += c;
      }
      if (total != f.count) {
        return Status::InvalidArgument(what + "histogram sums to " + std::to_string(total) +
                                       ", not to its count " + std::to_string(f.count));
      }
    }
  }
  return Status::OK();
}

void ToProto(const StatsRequest& in, pb::StatsRequest* out) {
  out->set_phase(in.phase);
  out->set_bins(in.bins);
  for (double v : in.bin_lo) out->add_bin_lo(v);
  for (double v : in.bin_hi) out->add_bin_hi(v);
  out->set_secure(in.secure);
  out->set_classes(in.classes);
}

void ToProto(const SiteStatistics& in, pb::SiteStatistics* out) {
  out->set_phase(in.phase);
  out->set_released(in.released);
  out->set_withheld(in.withheld);
  out->set_rows(in.rows);
  for (const std::string& n : in.feature_names) out->add_feature_names(n);
  for (const FeatureSummary& f : in.features) {
    auto* o = out->add_features();
    o->set_count(f.count);
    o->set_sum(f.sum);
    o->set_sum_sq(f.sum_sq);
    o->set_min(f.min);
    o->set_max(f.max);
    for (double v : f.centroid_mean) o->add_centroid_mean(v);
    for (double v : f.centroid_weight) o->add_centroid_weight(v);
    for (uint64_t v : f.histogram) o->add_histogram(v);
  }
  for (uint64_t c : in.label_counts) out->add_label_counts(c);
  out->set_secure(in.secure);
  out->set_num_classes(in.num_classes);
}

Status FromProto(const pb::StatsRequest& in, StatsRequest* out) {
  FM_RETURN_IF_ERROR(CheckSize(in.bin_lo(), kMaxStatsFeatures, "StatsRequest bin_lo"));
  FM_RETURN_IF_ERROR(CheckSize(in.bin_hi(), kMaxStatsFeatures, "StatsRequest bin_hi"));
  out->phase = in.phase();
  out->bins = in.bins();
  out->bin_lo.assign(in.bin_lo().begin(), in.bin_lo().end());
  out->bin_hi.assign(in.bin_hi().begin(), in.bin_hi().end());
  out->secure = in.secure();
  out->classes = in.classes();
  return Status::OK();
}

Status FromProto(const pb::SiteStatistics& in, SiteStatistics* out) {
  FM_RETURN_IF_ERROR(CheckSize(in.feature_names(), kMaxStatsFeatures, "SiteStatistics feature_names"));
  FM_RETURN_IF_ERROR(CheckSize(in.features(), kMaxStatsFeatures, "SiteStatistics features"));
  FM_RETURN_IF_ERROR(CheckSize(in.label_counts(), kMaxStatsClasses, "SiteStatistics label_counts"));
  out->phase = in.phase();
  out->released = in.released();
  out->withheld = in.withheld();
  out->rows = in.rows();
  out->feature_names.assign(in.feature_names().begin(), in.feature_names().end());
  out->features.clear();
  out->features.reserve(in.features_size());
  for (const auto& f : in.features()) {
    FM_RETURN_IF_ERROR(CheckSize(f.centroid_mean(), kMaxStatsCentroids, "SiteStatistics centroids"));
    FM_RETURN_IF_ERROR(CheckSize(f.centroid_weight(), kMaxStatsCentroids, "SiteStatistics centroids"));
    FM_RETURN_IF_ERROR(CheckSize(f.histogram(), kMaxStatsBins, "SiteStatistics histogram"));
    FeatureSummary s;
    s.count = f.count();
    s.sum = f.sum();
    s.sum_sq = f.sum_sq();
    s.min = f.min();
    s.max = f.max();
    s.centroid_mean.assign(f.centroid_mean().begin(), f.centroid_mean().end());
    s.centroid_weight.assign(f.centroid_weight().begin(), f.centroid_weight().end());
    s.histogram.assign(f.histogram().begin(), f.histogram().end());
    out->features.push_back(std::move(s));
  }
  out->label_counts.assign(in.label_counts().begin(), in.label_counts().end());
  out->secure = in.secure();
  out->num_classes = in.num_classes();
  return Status::OK();
}

}  // namespace fedmesh::wire
