#include "aggregator/eval_lines.h"

namespace fedmesh {

std::vector<JsonLine> FederatedEvalLines(const FederatedEvalReport& r, size_t max_site_lines,
                                         const std::function<void(JsonLine&)>& add_totals) {
  auto head = [&r](const std::string& site) {
    JsonLine j;
    if (!r.candidate.empty()) j.Add("candidate", r.candidate);
    j.Add("round", static_cast<int64_t>(r.round))
        .Add("model_version", static_cast<int64_t>(r.model_version))
        .Add("federated_eval", true)
        .Add("site", site);
    return j;
  };
  auto figures = [](JsonLine& j, const SiteEval& e) {
    j.Add("num_examples", static_cast<int64_t>(e.num_examples)).Add("loss", e.loss);
    for (const auto& [name, value] : e.metrics) j.Add(name, value);
  };
  std::vector<JsonLine> lines;
  JsonLine total = head("*");
  total.Add("sites_asked", static_cast<int64_t>(r.asked))
      .Add("sites_answered", static_cast<int64_t>(r.sites.size()));
  if (add_totals) add_totals(total);
  if (r.total) figures(total, *r.total);
  lines.push_back(std::move(total));
  if (r.sites.size() > max_site_lines) return lines;
  for (const auto& [site, e] : r.sites) {
    JsonLine line = head(site);
    figures(line, e);
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace fedmesh
