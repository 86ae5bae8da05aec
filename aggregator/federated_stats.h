// Federated statistics before training (issue 19, docs/data.md "Federated statistics"):
// when the first round is about to open, the round engine asks every connected site for a
// summary of its training data (phase 1: counts, sums, sums of squares, noisy min/max,
// t-digests, label counts), merges them, then asks the sites that released one for
// histograms over the federation's ranges (phase 2), and reports the lot in StatsClosed.
// Each phase closes when every asked site has answered or at its deadline. The sites apply
// their own privacy policy first (core/stats/site_statistics.h). FederatedStatsCollection
// holds one such collection; the RoundEngine owns it and does the sending.
// Thread-safety: not thread-safe; owned by one RoundEngine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/stats/federated_statistics.h"
#include "core/wire/messages.h"

namespace fedmesh {

struct FederatedStatsSettings {
  // Collect statistics before round 1 (not again after a restart that resumes later
  // rounds). Default: off.
  bool enabled = false;
  // Histogram bins per feature; 0 skips phase 2. <= wire::kMaxStatsBins. Default 10.
  uint32_t bins = 10;
  // Quantiles reported per feature, each in [0, 1]. Default: 1%, 5%, 25%, 50%, 75%, 95%, 99%.
  std::vector<double> quantiles = {0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99};
  // Fewest sites that must release statistics for federation figures (fewer: the report
  // lists the answers without them). >= 1. Default 1.
  int min_sites = 1;
  // Seconds each phase waits for answers. Finite, > 0. Default 120.
  double timeout_s = 120.0;
};

// The outcome of a collection.
struct FederatedStatsReport {
  uint32_t asked = 0;  // sites sent phase 1
  bool secure = false; // the additive figures were summed under secure aggregation
  // Every answer: the phase-1 summary with the phase-2 histograms folded in.
  std::map<std::string, wire::SiteStatistics> sites;
  // The merged figures when at least min_sites released statistics.
  std::optional<FederationStatistics> total;
  std::string error;   // why `total` is empty (too few sites, sites that disagree)
  double duration_s = 0.0;
};

class FederatedStatsCollection {
 public:
  // `secure`: [secagg] is on, so phase 1 asks for everything but the additive figures and
  // phase 2 sums those (and the histograms) under secure aggregation, which the engine runs
  // and hands to FinishSecure.
  FederatedStatsCollection(const FederatedStatsSettings& settings, std::set<std::string> asked,
                           double now, bool secure = false);

  int phase() const { return phase_; }
  // Phase 2 of a secure collection: answers come through secure aggregation, not Accept.
  bool secure_phase() const { return secure_ && phase_ == 2; }
  void set_deadline(double deadline_s) { deadline_s_ = deadline_s; }
  const wire::StatsRequest& request() const { return request_; }
  const std::set<std::string>& asked() const { return asked_; }
  double deadline_s() const { return deadline_s_; }
  bool complete() const { return answers_.size() == asked_.size(); }

  // Records `site`'s answer to the open phase; an empty string, or why it was refused.
  std::string Accept(const std::string& site, const wire::SiteStatistics& s);
  // `site` was revoked: the open phase no longer waits for it (an answer it already gave
  // stays).
  void Forget(const std::string& site) {
    if (!answers_.contains(site)) asked_.erase(site);
  }
  // Closes the open phase at `now`. Returns true when phase 2 opened (send request() to
  // asked()); false when the collection is over (then call Close).
  bool Advance(double now);
  // Secure phase 2: the sum of the sites' encoded figures (core/stats/secure_sums.h) and
  // whose they are; then call Close. An error leaves the report without federation figures.
  void FinishSecure(std::span<const uint32_t> sum, const std::vector<std::string>& contributors);
  // Ends the collection without federation figures, saying why.
  void Fail(std::string why);
  FederatedStatsReport Close(double now);

 private:
  FederatedStatsSettings settings_;
  bool secure_ = false;
  int phase_ = 1;
  std::set<std::string> asked_;
  std::map<std::string, wire::SiteStatistics> answers_;  // of the open phase
  wire::StatsRequest request_;
  double started_s_, deadline_s_;
  FederatedStatsReport report_;
};

}  // namespace fedmesh
