#include "aggregator/stats_report.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/gnuplot.h"
#include "core/json_line.h"

namespace fedmesh {
namespace {

std::string Num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

template <typename T, typename F>
std::string Array(const std::vector<T>& values, F format) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + format(values[i]);
  return out + "]";
}

std::string Str(std::string_view s) {
  std::string out;
  AppendJsonString(out, s);
  return out;
}

std::string U64(uint64_t v) { return std::to_string(v); }

std::string FeatureJson(const FeatureStatistics& f) {
  std::string o = "{\"name\":" + Str(f.name) + ",\"count\":" + U64(f.count) +
                  ",\"sum\":" + Num(f.sum) + ",\"sum_sq\":" + Num(f.sum_sq) +
                  ",\"mean\":" + Num(f.mean) + ",\"variance\":" + Num(f.variance) +
                  ",\"std\":" + Num(f.stddev) + ",\"min\":" + Num(f.min) + ",\"max\":" + Num(f.max) +
                  ",\"quantiles\":" + Array(f.quantiles, Num);
  if (!f.histogram.empty()) {
    o += ",\"histogram\":{\"lo\":" + Num(f.bin_lo) + ",\"hi\":" + Num(f.bin_hi) +
         ",\"rows\":" + U64(f.histogram_rows) + ",\"counts\":" + Array(f.histogram, U64) + "}";
  }
  return o + "}";
}

std::string SiteJson(const wire::SiteStatistics& s) {
  std::string o = "{\"released\":" + std::string(s.released ? "true" : "false");
  if (s.secure) o += ",\"secure\":true";
  if (!s.withheld.empty()) o += ",\"withheld\":" + Str(s.withheld);
  if (s.released) {
    o += ",\"rows\":" + U64(s.rows) + ",\"label_counts\":" + Array(s.label_counts, U64) +
         ",\"features\":[";
    for (size_t j = 0; j < s.features.size(); ++j) {
      const wire::FeatureSummary& f = s.features[j];
      o += std::string(j ? "," : "") + "{\"name\":" + Str(s.feature_names[j]) +
           ",\"count\":" + U64(f.count) + ",\"sum\":" + Num(f.sum) + ",\"sum_sq\":" + Num(f.sum_sq) +
           ",\"min\":" + Num(f.min) + ",\"max\":" + Num(f.max) +
           ",\"centroids\":" + U64(f.centroid_mean.size()) +
           ",\"histogram\":" + Array(f.histogram, U64) + "}";
    }
    o += "]";
  }
  return o + "}";
}

// One panel per feature (at most kMaxPanels), a step line per site that sent histograms.
constexpr size_t kMaxPanels = 36;

Status WritePng(const FederatedStatsReport& r, const std::string& json_path) {
  namespace fs = std::filesystem;
  const FederationStatistics& t = *r.total;
  // A line per site that sent its histograms; under secure aggregation no site's are
  // known, and the one line is the federation's.
  std::vector<std::string> sites;
  for (const auto& [id, s] : r.sites) {
    if (s.released && !s.features.empty() && !s.features[0].histogram.empty()) sites.push_back(id);
  }
  const bool federation_only = sites.empty();
  if (federation_only) {
    if (t.features.empty() || t.features[0].histogram.empty()) return Status::OK();
    sites.push_back("federation");
  }
  auto counts = [&](const std::string& id, size_t j) -> const std::vector<uint64_t>& {
    return federation_only ? t.features[j].histogram : r.sites.at(id).features[j].histogram;
  };
  const fs::path base = fs::path(json_path).replace_extension("");
  const std::string data = base.string() + "_histograms.dat";
  const std::string script = base.string() + "_histograms.gp";
  const std::string png = base.string() + ".png";
  const size_t panels = std::min(t.features.size(), kMaxPanels);
  {
    std::ofstream f(data);
    if (!f) return Status::IOError("cannot write '" + data + "'");
    for (size_t j = 0; j < panels; ++j) {
      const FeatureStatistics& g = t.features[j];
      const size_t bins = g.histogram.size();
      f << "# " << g.name << "\n";
      for (size_t b = 0; b < bins; ++b) {
        const double width = (g.bin_hi - g.bin_lo) / static_cast<double>(bins);
        f << Num(g.bin_lo + width * (static_cast<double>(b) + 0.5));  // bin centre
        for (const std::string& id : sites) {
          const auto& h = counts(id, j);
          f << ' ' << (b < h.size() ? h[b] : 0);
        }
        f << '\n';
      }
      f << "\n\n";
    }
    if (!f.flush()) return Status::IOError("cannot write '" + data + "'");
  }
  {
    std::ofstream f(script);
    if (!f) return Status::IOError("cannot write '" + script + "'");
    const size_t cols = panels <= 4 ? panels : panels <= 16 ? 4 : 6;
    const size_t rows = (panels + cols - 1) / cols;
    f << "set terminal png size " << 320 * cols << "," << 240 * rows << " font ',8'\n"
      << "set output " << GnuplotQuote(png) << "\nset key top right font ',7'\n"
      << "set multiplot layout " << rows << "," << cols << " title "
      << GnuplotQuote(federation_only ? "federated statistics: rows per histogram bin (secure sums)"
                                      : "federated statistics: rows per histogram bin, per site")
      << "\n";
    for (size_t j = 0; j < panels; ++j) {
      f << "set title " << GnuplotQuote(t.features[j].name) << "\nplot ";
      for (size_t s = 0; s < sites.size(); ++s) {
        f << (s ? ", " : "") << GnuplotQuote(data) << " index " << j << " using 1:" << s + 2
          << " with histeps lw 1.5 title " << GnuplotQuote(j == 0 ? sites[s] : "");
      }
      f << "\n";
    }
    f << "unset multiplot\n";
    if (!f.flush()) return Status::IOError("cannot write '" + script + "'");
  }
  return RunGnuplot(script);
}

}  // namespace

std::string StatsReportJson(const FederatedStatsReport& r) {
  std::string o = "{\"asked\":" + U64(r.asked) + ",\"secure\":" + (r.secure ? "true" : "false") +
                  ",\"duration_s\":" + Num(r.duration_s);
  if (!r.error.empty()) o += ",\"error\":" + Str(r.error);
  if (r.total) {
    const FederationStatistics& t = *r.total;
    o += ",\"federation\":{\"rows\":" + U64(t.rows) + ",\"sites\":" + Array(t.sites, Str) +
         ",\"label_counts\":" + Array(t.label_counts, U64) +
         ",\"quantile_levels\":" + Array(t.quantile_levels, Num) + ",\"features\":[";
    for (size_t j = 0; j < t.features.size(); ++j) o += (j ? "," : "") + FeatureJson(t.features[j]);
    o += "]}";
  }
  o += ",\"sites\":{";
  bool first = true;
  for (const auto& [id, s] : r.sites) {
    o += (first ? "" : ",") + Str(id) + ":" + SiteJson(s);
    first = false;
  }
  return o + "}}\n";
}

Status WriteStatsReport(const FederatedStatsReport& report, const std::string& json_path) {
  {
    std::ofstream f(json_path);
    if (!f) return Status::IOError("cannot write the statistics report '" + json_path + "'");
    f << StatsReportJson(report);
    if (!f.flush()) return Status::IOError("cannot write the statistics report '" + json_path + "'");
  }
  if (!report.total) return Status::OK();
  return WritePng(report, json_path);
}

}  // namespace fedmesh
