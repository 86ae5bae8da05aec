#include "aggregator/strategy.h"

#include <cctype>
#include <cmath>
#include <string>
#include <utility>

#include "aggregator/dp_aggregation.h"
#include "aggregator/robust_aggregation.h"
#include "aggregator/server_optimizer.h"
#include "aggregator/weighted_average.h"

namespace fedmesh {

Status CheckRoundUpdates(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                         std::span<const float> new_global) {
  if (new_global.size() != global.size()) {
    return Status::InvalidArgument("new global model has " + std::to_string(new_global.size()) +
                                   " elements but the global model has " +
                                   std::to_string(global.size()));
  }
  if (updates.empty()) {
    return Status::InvalidArgument("no client updates to aggregate");
  }
  for (size_t i = 0; i < updates.size(); ++i) {
    const ClientUpdate& u = updates[i];
    const std::string who = "update " + std::to_string(i) + " (node " + u.node_id + ")";
    if (u.params.size() != global.size()) {
      return Status::InvalidArgument(who + " has " + std::to_string(u.params.size()) +
                                     " values but the model has " + std::to_string(global.size()));
    }
    const size_t bad = FirstNonFinite(u.params);
    if (bad != u.params.size()) {
      return Status::InvalidArgument(who + " has a non-finite value (" +
                                     DescribeNonFinite(u.params[bad]) + ") at index " +
                                     std::to_string(bad));
    }
  }
  return Status::OK();
}

Status ExampleWeightedMean(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                           std::span<float> out) {
  FM_RETURN_IF_ERROR(CheckRoundUpdates(global, updates, out));
  std::vector<std::span<const float>> spans;
  std::vector<double> weights;
  spans.reserve(updates.size());
  weights.reserve(updates.size());
  for (const ClientUpdate& u : updates) {
    spans.emplace_back(u.params);
    weights.push_back(static_cast<double>(u.num_examples));
  }
  return WeightedAverage(spans, weights, out);
}

Status FedAvg::Aggregate(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                         std::span<float> new_global) {
  Status s = ExampleWeightedMean(global, updates, new_global);
  if (!s.ok()) return s.WithContext(std::string(name()));
  return Status::OK();
}

std::vector<std::string_view> KnownStrategyNames() {
  return {"fedavg", "fedprox",      "fedavgm", "fedadam",   "fedyogi",
          "fedadagrad", "median", "trimmed_mean", "krum", "multikrum"};
}

namespace {

// The strategy itself, before any privacy wrapper.
Result<std::unique_ptr<Strategy>> MakeBaseStrategy(std::string_view name,
                                                   const StrategyOptions& options) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "fedavg") return std::unique_ptr<Strategy>(std::make_unique<FedAvg>());
  if (lower == "fedprox") {
    if (!std::isfinite(options.prox_mu) || options.prox_mu <= 0) {
      return Status::InvalidArgument("strategy fedprox needs prox_mu > 0 (got " +
                                     std::to_string(options.prox_mu) +
                                     "); use strategy fedavg for mu = 0");
    }
    return std::unique_ptr<Strategy>(std::make_unique<FedProx>(options.prox_mu));
  }
  static const std::pair<std::string_view, ServerOptimizerKind> kOptimizers[] = {
      {"fedavgm", ServerOptimizerKind::kMomentum}, {"fedadam", ServerOptimizerKind::kAdam},
      {"fedyogi", ServerOptimizerKind::kYogi},     {"fedadagrad", ServerOptimizerKind::kAdagrad}};
  for (const auto& [n, kind] : kOptimizers) {
    if (lower != n) continue;
    FM_ASSIGN_OR_RETURN(auto s, ServerOptimizer::Create(kind, options));
    return std::unique_ptr<Strategy>(std::move(s));
  }
  static const std::pair<std::string_view, RobustRule> kRobust[] = {
      {"median", RobustRule::kMedian}, {"trimmed_mean", RobustRule::kTrimmedMean},
      {"krum", RobustRule::kKrum},     {"multikrum", RobustRule::kMultiKrum}};
  for (const auto& [n, rule] : kRobust) {
    if (lower != n) continue;
    FM_ASSIGN_OR_RETURN(auto s, RobustAggregator::Create(rule, options));
    return std::unique_ptr<Strategy>(std::move(s));
  }
  std::string known;
  for (std::string_view k : KnownStrategyNames()) {
    if (!known.empty()) known += ", ";
    known += k;
  }
  return Status::InvalidArgument("unknown strategy \"" + std::string(name) +
                                 "\"; known strategies: " + known);
}

}  // namespace

Result<std::unique_ptr<Strategy>> MakeStrategy(std::string_view name,
                                               const StrategyOptions& options) {
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Strategy> strategy, MakeBaseStrategy(name, options));
  if (!options.dp.central && !options.dp.distributed) return strategy;
  return CentralDpAggregation::Wrap(std::move(strategy), options.dp);
}

}  // namespace fedmesh
