// The status page's HTML (aggregator/status_page.h): one self-contained document with
// inline CSS and an inline SVG chart, no script and nothing fetched from elsewhere, so it
// works offline and under a Content-Security-Policy of default-src 'none'. It reloads
// itself every refresh_s seconds. Thread-safety: pure function.
#pragma once

#include <string>

#include "aggregator/federation_status.h"

namespace fedmesh {

struct StatusHtmlOptions {
  // Appended to every link ("?token=..."), so a token-protected page's links work.
  std::string link_query;
  // Seconds between reloads. Default: 5.
  int refresh_s = 5;
  // Model versions listed with a download link, newest first. Default: 10.
  size_t models_listed = 10;
};

std::string StatusHtml(const FederationStatus& status, const StatusHtmlOptions& options = {});

// The accuracy (left axis, [0, 1]) and loss (right axis) of every closed round as an SVG
// line chart; test figures when the rounds have them, else the train loss. "" with no round.
std::string RoundChartSvg(const std::vector<RoundRow>& rounds);

// &, <, >, " and ' as entities.
std::string HtmlEscape(const std::string& text);

}  // namespace fedmesh
