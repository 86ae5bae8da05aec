#include "aggregator/federated_stats.h"

#include <algorithm>
#include <utility>

namespace fedmesh {

FederatedStatsCollection::FederatedStatsCollection(const FederatedStatsSettings& settings,
                                                   std::set<std::string> asked, double now,
                                                   bool secure)
    : settings_(settings), secure_(secure), asked_(std::move(asked)), started_s_(now),
      deadline_s_(now + settings.timeout_s) {
  request_.phase = 1;
  request_.secure = secure;
  report_.asked = static_cast<uint32_t>(asked_.size());
  report_.secure = secure;
}

std::string FederatedStatsCollection::Accept(const std::string& site, const wire::SiteStatistics& s) {
  if (!asked_.contains(site)) return "statistics from a site that was not asked in this phase";
  if (answers_.contains(site)) return "statistics for this phase were already received";
  if (secure_phase()) return "phase 2 is secure: answer through secure aggregation";
  if (s.released && s.secure != secure_) {
    return secure_ ? "statistics with sums in the clear; this collection is secure"
                   : "statistics without sums; this collection is not secure";
  }
  if (s.phase != static_cast<uint32_t>(phase_)) {
    return "statistics for phase " + std::to_string(s.phase) + "; phase " +
           std::to_string(phase_) + " is open";
  }
  if (phase_ == 2 && s.released && s.features.size() != request_.bin_lo.size()) {
    return "histograms for " + std::to_string(s.features.size()) + " features; " +
           std::to_string(request_.bin_lo.size()) + " were asked for";
  }
  answers_.emplace(site, s);
  return "";
}

bool FederatedStatsCollection::Advance(double now) {
  if (phase_ == 1) {
    report_.sites = answers_;
    answers_.clear();
    size_t released = 0;
    for (const auto& [id, s] : report_.sites) released += s.released ? 1 : 0;
    if (released < static_cast<size_t>(settings_.min_sites)) {
      report_.error = std::to_string(released) + " of " + std::to_string(report_.asked) +
                      " sites released statistics; min_sites is " +
                      std::to_string(settings_.min_sites);
      return false;
    }
    auto merged = MergeSiteStatistics(report_.sites, settings_.quantiles);
    if (!merged.ok()) {
      report_.error = merged.status().message();
      return false;
    }
    report_.total = std::move(*merged);
    if (settings_.bins == 0 && !secure_) return false;
    phase_ = 2;
    request_ = HistogramRequest(*report_.total, settings_.bins);
    request_.secure = secure_;
    if (secure_) {
      for (const auto& [id, s] : report_.sites) {
        if (s.released) request_.classes = std::max(request_.classes, s.num_classes);
      }
    }
    asked_.clear();
    for (const auto& [id, s] : report_.sites)
      if (s.released) asked_.insert(id);
    deadline_s_ = now + settings_.timeout_s;
    return true;
  }
  // Phase 2: fold the histograms into the total and into each site's summary.
  if (report_.total) {
    if (Status st = AddHistograms(*report_.total, request_, answers_); !st.ok()) {
      report_.error = st.message();
    }
  }
  for (auto& [id, s] : answers_) {
    auto it = report_.sites.find(id);
    if (it == report_.sites.end()) continue;
    if (!s.withheld.empty()) {
      it->second.withheld += (it->second.withheld.empty() ? "" : "; ") + s.withheld;
    }
    for (size_t j = 0; j < s.features.size() && j < it->second.features.size(); ++j) {
      it->second.features[j].histogram = s.features[j].histogram;
    }
  }
  answers_.clear();
  return false;
}

void FederatedStatsCollection::FinishSecure(std::span<const uint32_t> sum,
                                            const std::vector<std::string>& contributors) {
  if (!report_.total) return;
  const SecureSumLayout layout{request_.bin_lo.size(), request_.bins, request_.classes};
  auto sums = DecodeSecureSums(sum, layout);
  Status st = sums.ok() ? ApplySecureSums(*report_.total, request_, *sums) : sums.status();
  if (!st.ok()) {
    Fail("secure sums: " + st.message());
    return;
  }
  // The sums are those of the contributors only: a site that dropped out of the protocol
  // is not in them, whatever it said in phase 1.
  report_.total->sites = contributors;
}

void FederatedStatsCollection::Fail(std::string why) {
  report_.total.reset();
  report_.error = std::move(why);
}

FederatedStatsReport FederatedStatsCollection::Close(double now) {
  report_.duration_s = now - started_s_;
  return std::move(report_);
}

}  // namespace fedmesh
