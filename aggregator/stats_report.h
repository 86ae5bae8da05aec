// The federated statistics report (docs/data.md "Federated statistics"): the merged
// figures per feature (count, mean, std, min, max, quantiles, histogram), the label counts,
// and every site's released summary (or why it withheld it), as JSON; and a PNG of the
// histograms, one panel per feature with a line per site, drawn by gnuplot.
// Thread-safety: pure functions (WriteStatsReport writes files and starts gnuplot).
#pragma once

#include <string>

#include "aggregator/federated_stats.h"
#include "core/status.h"

namespace fedmesh {

// The report as a JSON document. Numbers are written with 17 significant digits, so they
// read back as the doubles they were.
std::string StatsReportJson(const FederatedStatsReport& report);

// Writes StatsReportJson to `json_path` and, when there are histograms, the PNG to the
// same path with ".png" for ".json" (plus the gnuplot data and script beside it). IOError
// naming the file; a PNG that gnuplot cannot draw is FailedPrecondition after the JSON is
// written.
Status WriteStatsReport(const FederatedStatsReport& report, const std::string& json_path);

}  // namespace fedmesh
