// Federated statistics, the aggregator's side: merges the sites' summaries
// (core/stats/site_statistics.h) into the federation's figures. Counts, sums and sums of
// squares add exactly, so the mean and (population) variance equal those of the pooled
// rows; min/max are the extremes of the sites' noisy extremes (never inside the true
// range); quantiles come from the union of the sites' t-digests; histograms add.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/stats/secure_sums.h"
#include "core/status.h"
#include "core/wire/messages.h"

namespace fedmesh {

struct FeatureStatistics {
  std::string name;
  uint64_t count = 0;
  double sum = 0.0;
  double sum_sq = 0.0;
  double mean = 0.0;
  double variance = 0.0;  // population variance (divides by count), as numpy's var()
  double stddev = 0.0;
  double min = 0.0;
  double max = 0.0;
  // At FederationStatistics::quantile_levels; empty when no site released a sketch.
  std::vector<double> quantiles;
  // Phase 2: `bins` counts over [bin_lo, bin_hi]; empty when no site sent one.
  double bin_lo = 0.0;
  double bin_hi = 0.0;
  std::vector<uint64_t> histogram;
  uint64_t histogram_rows = 0;  // rows the histogram covers (sites that withheld theirs: none)
};

struct FederationStatistics {
  uint64_t rows = 0;
  std::vector<std::string> sites;  // the sites whose summaries are merged, sorted
  std::vector<double> quantile_levels;
  std::vector<FeatureStatistics> features;
  std::vector<uint64_t> label_counts;  // classification: rows per class over the sites
};

// Merges the released phase-1 summaries of `sites` (site id -> summary; unreleased ones
// are skipped). InvalidArgument naming the site whose feature names differ from the
// others' (the first site in id order sets them), or when none is released.
Result<FederationStatistics> MergeSiteStatistics(
    const std::map<std::string, wire::SiteStatistics>& sites,
    std::span<const double> quantile_levels, double compression = 100.0);

// The phase-2 request over the merged ranges: per feature [min, max] of `stats`.
wire::StatsRequest HistogramRequest(const FederationStatistics& stats, uint32_t bins);

// Adds the phase-2 histograms of `sites` (those with a histogram for every feature and the
// merged feature count) to `stats`; the others are skipped (the feature's histogram_rows
// says how many rows the histogram covers). InvalidArgument for a histogram of another
// size than the request's bins.
Status AddHistograms(FederationStatistics& stats, const wire::StatsRequest& request,
                     const std::map<std::string, wire::SiteStatistics>& sites);

// Secure aggregation: sets the additive figures of `stats` (merged from secure phase-1
// answers, which have none) from the decoded sum of the sites' secure sums for `request`:
// rows, counts, means, variances, histograms over request's ranges and label counts.
// InvalidArgument when the shapes differ.
Status ApplySecureSums(FederationStatistics& stats, const wire::StatsRequest& request,
                       const SecureSums& sums);

}  // namespace fedmesh
