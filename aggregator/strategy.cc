#include "aggregator/strategy.h"

#include <cctype>
#include <cmath>
#include <string>

#include "aggregator/weighted_average.h"

namespace fedmesh {

Status FedAvg::Aggregate(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                         std::span<float> new_global) {
  if (new_global.size() != global.size()) {
    return Status::InvalidArgument("new global model has " + std::to_string(new_global.size()) +
                                   " elements but the global model has " +
                                   std::to_string(global.size()));
  }
  if (updates.empty()) {
    return Status::InvalidArgument("no client updates to aggregate");
  }
  std::vector<std::span<const float>> spans;
  std::vector<double> weights;
  spans.reserve(updates.size());
  weights.reserve(updates.size());
  for (const ClientUpdate& u : updates) {
    spans.emplace_back(u.params);
    weights.push_back(static_cast<double>(u.num_examples));
  }
  Status s = WeightedAverage(spans, weights, new_global);
  if (!s.ok()) return s.WithContext(std::string(name()));
  return Status::OK();
}

std::vector<std::string_view> KnownStrategyNames() { return {"fedavg", "fedprox"}; }

Result<std::unique_ptr<Strategy>> MakeStrategy(std::string_view name,
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
  std::string known;
  for (std::string_view k : KnownStrategyNames()) {
    if (!known.empty()) known += ", ";
    known += k;
  }
  return Status::InvalidArgument("unknown strategy \"" + std::string(name) +
                                 "\"; known strategies: " + known);
}

}  // namespace fedmesh
