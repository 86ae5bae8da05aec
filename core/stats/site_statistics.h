// Federated statistics, the site's side (issue 19, docs/data.md "Federated statistics"):
// SummarizeSite answers the aggregator's StatsRequest from the site's training data, after
// the site's own privacy policy. Phase 1 gives per feature the count, sum and sum of
// squares (exact to merge: the federation's mean and variance follow from the sums), min
// and max pushed outward by noise, a t-digest for quantiles, and the rows per class; phase
// 2 a histogram per feature over the federation's range. Nothing is released from fewer
// than min_count rows, and no histogram has more bins than max_bins_fraction x rows.
// Thread-safety: pure function (the Rng is the caller's).
#pragma once

#include <cstdint>

#include "core/data/dataset.h"
#include "core/rng.h"
#include "core/stats/secure_sums.h"
#include "core/status.h"
#include "core/wire/messages.h"

namespace fedmesh {

// What a site lets leave it (config [stats] of fedmesh-node).
struct StatsPrivacyPolicy {
  // false: the site answers every statistics request with "withheld". Default true.
  bool allow = true;
  // Fewest rows from which anything is released; a site with fewer answers "withheld".
  // >= 1. Default 10.
  uint64_t min_count = 10;
  // min and max are pushed outward by |N(0, s^2)| with s = minmax_noise x (max - min) (x
  // max(1, |value|) when max == min), so the released extremes are not a patient's exact
  // value. >= 0; 0 releases them exactly. Default 0.05.
  double minmax_noise = 0.05;
  // A histogram of more than max_bins_fraction x rows bins is withheld (the other figures
  // are still released): fine bins over few rows single out individuals. In (0, 1].
  // Default 0.5.
  double max_bins_fraction = 0.5;
  // Whether t-digest centroids (quantiles) are released. Their outermost centroids hold
  // single values, so a site that must not release any one row's value turns this off.
  // Default true.
  bool quantiles = true;
  // t-digest compression (TDigest): about this many centroids per feature. [10, 1000].
  // Default 100.
  double compression = 100.0;
};

// InvalidArgument naming the field.
Status Validate(const StatsPrivacyPolicy& policy);

// The site's answer to `request` over `data` (every row; features in data.feature_names'
// order, "x0", "x1", ... when it has none). Released = false with the reason when the policy
// forbids it. `noise` draws the min/max noise: seed it from a secure source in production.
// InvalidArgument for a request that does not fit the data (phase 2 ranges not one per
// feature) or data with more than kMaxStatsFeatures features.
Result<wire::SiteStatistics> SummarizeSite(const Dataset& data, const wire::StatsRequest& request,
                                           const StatsPrivacyPolicy& policy, Rng& noise);

// A site's answer to a secure phase-2 request (StatsRequest::secure): its counts, sums,
// sums of squares, histograms (zeros when the policy withholds them) and label counts in
// the request's layout, to be encoded (EncodeSecureSums) and masked. Zeros when the policy
// releases nothing, so that the site can still take part in the protocol.
// InvalidArgument for a request that is not a secure phase 2 or does not fit the data.
Result<SecureSums> SiteSecureSums(const Dataset& data, const wire::StatsRequest& request,
                                  const StatsPrivacyPolicy& policy);

// The histogram bin of `x` among `bins` equal bins over [lo, hi]; values outside the range
// go to the first or last bin; lo == hi puts everything in bin 0. Shared by the sites and
// by reference computations.
uint32_t HistogramBin(double x, double lo, double hi, uint32_t bins);

}  // namespace fedmesh
