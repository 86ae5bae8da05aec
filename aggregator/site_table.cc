#include "aggregator/site_table.h"

#include <cstdio>

namespace fedmesh {
namespace {

std::string Cell(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", it->second);
  return buf;
}

// The task's headline metric among what the sites reported.
std::string Headline(const FederatedEvalReport& r) {
  for (const char* candidate : {"auc", "accuracy", "r2"}) {
    for (const auto& [site, e] : r.sites) {
      if (e.metrics.contains(candidate)) return candidate;
    }
  }
  return "";
}

}  // namespace

std::string SiteComparisonTable(const FederatedEvalReport& r) {
  bool any = false;
  const std::string metric = Headline(r);
  for (const auto& [site, e] : r.sites) {
    for (const auto& [name, v] : e.metrics) {
      if (name.rfind("finetuned_", 0) == 0 || name.rfind("local_only_", 0) == 0) any = true;
    }
  }
  if (!any || metric.empty()) return "";
  std::string out = "| site | held-out examples | global " + metric + " | local-only " + metric +
                    " | fine-tuned " + metric + " |\n|---|---|---|---|---|\n";
  auto row = [&](const std::string& name, uint64_t n, const std::map<std::string, double>& m) {
    out += "| " + name + " | " + std::to_string(n) + " | " + Cell(m, metric) + " | " +
           Cell(m, "local_only_" + metric) + " | " + Cell(m, "finetuned_" + metric) + " |\n";
  };
  for (const auto& [site, e] : r.sites) row(site, e.num_examples, e.metrics);
  if (r.total) row("all (example-weighted)", r.total->num_examples, r.total->metrics);
  return out;
}

}  // namespace fedmesh

namespace fedmesh {

std::string CrossEvalTable(const std::vector<FederatedEvalReport>& reports) {
  if (reports.empty()) return "";
  const std::string metric = Headline(reports.front());
  if (metric.empty()) return "";
  std::set<std::string> sites;
  for (const FederatedEvalReport& r : reports)
    for (const auto& [site, e] : r.sites) sites.insert(site);
  std::string out = "| " + metric + ": model \\ scored at |";
  std::string rule = "|---|";
  for (const std::string& s : sites) {
    out += " " + s + " |";
    rule += "---|";
  }
  out += " all (example-weighted) |\n" + rule + "---|\n";
  for (const FederatedEvalReport& r : reports) {
    out += "| " + (r.candidate.empty() ? std::string("global") : r.candidate + " (local)") + " |";
    for (const std::string& s : sites) {
      auto it = r.sites.find(s);
      out += " " + (it == r.sites.end() ? std::string("-") : Cell(it->second.metrics, metric)) + " |";
    }
    out += " " + (r.total ? Cell(r.total->metrics, metric) : std::string("-")) + " |\n";
  }
  return out;
}

}  // namespace fedmesh
