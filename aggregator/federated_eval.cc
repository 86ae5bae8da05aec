#include "aggregator/federated_eval.h"

#include <utility>

namespace fedmesh {

FederatedEvaluation::FederatedEvaluation(uint64_t round, uint64_t model_version,
                                         std::set<std::string> asked, double started_s,
                                         double deadline_s, int min_sites)
    : round_(round),
      model_version_(model_version),
      asked_(std::move(asked)),
      started_s_(started_s),
      deadline_s_(deadline_s),
      min_sites_(min_sites) {}

std::string FederatedEvaluation::Accept(const std::string& site, const wire::FitResult& r) {
  if (!asked_.contains(site)) return "this site was not asked to evaluate round " + std::to_string(round_);
  if (sites_.contains(site)) return "this site's evaluation of round " + std::to_string(round_) + " was accepted already";
  if (r.num_examples == 0) return "an evaluation needs num_examples > 0";
  sites_[site] = SiteEval{r.num_examples, r.train_loss, r.metrics};
  return {};
}

FederatedEvalReport FederatedEvaluation::Close(double now) const {
  FederatedEvalReport report;
  report.duration_s = now - started_s_;
  report.round = round_;
  report.candidate = candidate_;
  report.model_version = model_version_;
  report.asked = static_cast<uint32_t>(asked_.size());
  report.sites = sites_;
  if (sites_.empty() || sites_.size() < static_cast<size_t>(min_sites_)) return report;
  SiteEval total;
  std::map<std::string, double> weight;  // examples behind each metric (sites may differ)
  double loss = 0.0;
  for (const auto& [site, e] : sites_) {
    const double n = static_cast<double>(e.num_examples);
    total.num_examples += e.num_examples;
    loss += n * e.loss;
    for (const auto& [name, v] : e.metrics) {
      total.metrics[name] += n * v;
      weight[name] += n;
    }
  }
  total.loss = loss / static_cast<double>(total.num_examples);
  for (auto& [name, v] : total.metrics) v /= weight[name];
  report.total = std::move(total);
  return report;
}

}  // namespace fedmesh
