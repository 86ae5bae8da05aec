#include "aggregator/status_html.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace fedmesh {
namespace {

std::string Fmt(const char* format, double v) {
  const int n = std::snprintf(nullptr, 0, format, v);
  std::string out(static_cast<size_t>(std::max(n, 0)), '\0');
  std::snprintf(out.data(), out.size() + 1, format, v);
  return out;
}

std::string Ago(double unix_s, double now) {
  if (unix_s <= 0) return "&ndash;";
  const double s = std::max(0.0, now - unix_s);
  if (s < 120) return Fmt("%.0f s ago", s);
  if (s < 7200) return Fmt("%.0f min ago", s / 60);
  return Fmt("%.1f h ago", s / 3600);
}

const char* kStyle = R"css(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d2330;background:#f6f7f9}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.sub{color:#5b6475;margin-bottom:16px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:16px;margin-bottom:16px}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;font-size:13px;font-weight:600}
.s-round-open{background:#d8f3e3;color:#136c3a}.s-waiting-for-sites{background:#fff1cc;color:#7a5a00}
.s-paused{background:#e4e7ff;color:#2b3aa8}.s-finished{background:#e6e8ec;color:#30384a}
.s-aborted,.s-failed{background:#ffe0e0;color:#9b1c1c}
.bar{height:14px;background:#e6e8ec;border-radius:7px;overflow:hidden;margin:8px 0}
.bar>div{height:100%;background:#2f7de1}
table{border-collapse:collapse;width:100%;font-size:14px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #eceef2}
th{color:#5b6475;font-weight:600}
.on{color:#136c3a;font-weight:600}.off{color:#9b1c1c;font-weight:600}.dim{color:#8a92a3}
a{color:#2f7de1}
)css";

}  // namespace

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string RoundChartSvg(const std::vector<RoundRow>& rounds) {
  if (rounds.empty()) return "";
  const bool test = std::any_of(rounds.begin(), rounds.end(), [](const RoundRow& r) {
    return std::isfinite(r.metrics.test_accuracy) || std::isfinite(r.metrics.test_loss);
  });
  const double W = 760, H = 280, left = 48, right = 56, top = 16, bottom = 36;
  const double pw = W - left - right, ph = H - top - bottom;
  const double first = static_cast<double>(rounds.front().metrics.round);
  const double last = static_cast<double>(rounds.back().metrics.round);
  const double span = std::max(1.0, last - first);
  double max_loss = 0;
  for (const RoundRow& r : rounds) {
    const double l = test ? r.metrics.test_loss : r.train_loss;
    if (std::isfinite(l)) max_loss = std::max(max_loss, l);
  }
  if (max_loss <= 0) max_loss = 1;
  auto x = [&](double round) { return left + pw * (round - first) / span; };
  auto y = [&](double frac) { return top + ph * (1.0 - frac); };
  std::string svg = Fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %.0f", W) +
                    Fmt(" %.0f\" style=\"width:100%%;max-width:900px\" role=\"img\" "
                        "aria-label=\"accuracy and loss per round\" id=\"round-chart\">", H);
  for (int i = 0; i <= 4; ++i) {  // grid and both axes' labels
    const double f = i / 4.0;
    svg += Fmt("<line x1=\"%.1f\"", left) + Fmt(" x2=\"%.1f\"", left + pw) + Fmt(" y1=\"%.1f\"", y(f)) +
           Fmt(" y2=\"%.1f\" stroke=\"#eceef2\"/>", y(f));
    svg += Fmt("<text x=\"%.1f\"", left - 6) + Fmt(" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" "
                                                   "fill=\"#2f7de1\">", y(f) + 4) +
           Fmt("%.2f</text>", f);
    svg += Fmt("<text x=\"%.1f\"", left + pw + 6) + Fmt(" y=\"%.1f\" font-size=\"11\" fill=\"#e07a1f\">", y(f) + 4) +
           Fmt("%.3g</text>", f * max_loss);
  }
  const size_t ticks = std::min<size_t>(rounds.size(), 10);
  for (size_t i = 0; i < ticks; ++i) {
    const size_t idx = ticks == 1 ? 0 : i * (rounds.size() - 1) / (ticks - 1);
    const double r = static_cast<double>(rounds[idx].metrics.round);
    svg += Fmt("<text x=\"%.1f\"", x(r)) + Fmt(" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
                                               "fill=\"#5b6475\">", top + ph + 16) +
           Fmt("%.0f</text>", r);
  }
  svg += Fmt("<text x=\"%.1f\"", left + pw / 2) + Fmt(" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
                                                      "fill=\"#5b6475\">round</text>", H - 4);
  auto line = [&](auto value, double scale, const char* color, const char* cls) {
    std::string points;
    std::string dots;
    for (const RoundRow& r : rounds) {
      const double v = value(r);
      if (!std::isfinite(v)) continue;
      const double px = x(static_cast<double>(r.metrics.round)), py = y(v / scale);
      points += Fmt("%.1f,", px) + Fmt("%.1f ", py);
      if (rounds.size() <= 60) dots += Fmt("<circle cx=\"%.1f\"", px) + Fmt(" cy=\"%.1f\" r=\"3\" fill=\"", py) + color + "\"/>";
    }
    if (points.empty()) return std::string();
    return std::string("<polyline class=\"") + cls + "\" fill=\"none\" stroke=\"" + color +
           "\" stroke-width=\"2\" points=\"" + points + "\"/>" + dots;
  };
  if (test) {
    svg += line([](const RoundRow& r) { return r.metrics.test_accuracy; }, 1.0, "#2f7de1", "accuracy");
    svg += line([](const RoundRow& r) { return r.metrics.test_loss; }, max_loss, "#e07a1f", "loss");
  } else {
    svg += line([](const RoundRow& r) { return r.train_loss; }, max_loss, "#e07a1f", "loss");
  }
  const std::string loss_name = test ? "test loss (right)" : "train loss (right)";
  svg += Fmt("<g font-size=\"12\"><rect x=\"%.1f\" y=\"2\" width=\"10\" height=\"10\" fill=\"#2f7de1\"/>", left + 8) +
         Fmt("<text x=\"%.1f\" y=\"11\">test accuracy (left)</text>", left + 22) +
         Fmt("<rect x=\"%.1f\" y=\"2\" width=\"10\" height=\"10\" fill=\"#e07a1f\"/>", left + 170) +
         Fmt("<text x=\"%.1f\" y=\"11\">", left + 184) + loss_name + "</text></g>";
  svg += "</svg>";
  return svg;
}

std::string StatusHtml(const FederationStatus& s, const StatusHtmlOptions& options) {
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  std::string state_class = s.state;
  std::replace(state_class.begin(), state_class.end(), ' ', '-');
  std::string h = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">";
  h += "<meta http-equiv=\"refresh\" content=\"" + std::to_string(options.refresh_s) + "\">";
  h += "<title>fedmesh: " + HtmlEscape(s.federation_id) + "</title><style>" + kStyle + "</style></head><body>";
  h += "<h1>Federation " + HtmlEscape(s.federation_id) + "</h1>";
  h += "<div class=\"sub\">aggregator " + HtmlEscape(s.aggregator_id) + " &middot; <span class=\"badge s-" +
       HtmlEscape(state_class) + "\" id=\"state\">" + HtmlEscape(s.state) + "</span>";
  if (!s.message.empty()) h += " &middot; " + HtmlEscape(s.message);
  h += "</div>";

  // The current round and its progress.
  h += "<div class=\"card\" id=\"round\"><b>Round " + std::to_string(s.round) + " of " +
       std::to_string(s.total_rounds) + "</b> &middot; " + std::to_string(s.rounds_completed) +
       " completed &middot; model version " + std::to_string(s.model_version);
  const double frac = s.selected > 0 ? static_cast<double>(s.answered) / static_cast<double>(s.selected) : 0.0;
  if (s.state == "round open") {
    h += "<div class=\"bar\"><div style=\"width:" + Fmt("%.1f", 100.0 * frac) + "%\"></div></div>";
    h += std::to_string(s.answered) + " of " + std::to_string(s.selected) + " updates in";
    if (s.attempt > 1) h += " (attempt " + std::to_string(s.attempt) + ")";
    h += Fmt(" &middot; deadline in %.0f s", std::max(0.0, s.deadline_in_s));
  } else {
    const double done = s.total_rounds > 0 ? static_cast<double>(s.rounds_completed) /
                                                 static_cast<double>(s.total_rounds) : 0.0;
    h += "<div class=\"bar\"><div style=\"width:" + Fmt("%.1f", 100.0 * done) + "%\"></div></div>";
    h += std::to_string(s.rounds_completed) + " of " + std::to_string(s.total_rounds) + " rounds done";
  }
  h += "</div>";

  h += "<div class=\"card\"><h2>Accuracy and loss per round</h2>";
  const std::string chart = RoundChartSvg(s.rounds);
  h += chart.empty() ? "<p class=\"dim\">No round has closed yet.</p>" : chart;
  h += "</div>";

  h += "<div class=\"card\"><h2>Sites</h2><table id=\"sites\"><tr><th>site</th><th>status</th>"
       "<th>this round</th><th>last seen</th><th>last contribution</th><th>updates</th></tr>";
  for (const SiteStatus& site : s.sites) {
    std::string status = !site.enrolled ? "<span class=\"off\">revoked</span>"
                         : site.connected ? "<span class=\"on\">online</span>"
                                          : "<span class=\"off\">offline</span>";
    std::string in_round = site.answered ? "answered" : site.selected ? "training" : "&ndash;";
    std::string contribution = site.last_round == 0 ? "&ndash;"
                                                    : "round " + std::to_string(site.last_round) + " (" +
                                                          std::to_string(site.last_examples) + " examples)";
    h += "<tr><td>" + HtmlEscape(site.name) + "</td><td>" + status + "</td><td>" + in_round +
         "</td><td>" + Ago(site.last_seen_unix, now) + "</td><td>" + contribution + "</td><td>" +
         std::to_string(site.updates) + "</td></tr>";
  }
  h += "</table></div>";

  h += "<div class=\"card\"><h2>Model versions</h2><table id=\"models\"><tr><th>round</th>"
       "<th>version</th><th>test accuracy</th><th>updates</th><th>download</th></tr>";
  size_t listed = 0;
  for (auto it = s.rounds.rbegin(); it != s.rounds.rend() && listed < options.models_listed; ++it, ++listed) {
    const RoundMetrics& m = it->metrics;
    const std::string v = std::to_string(m.model_version);
    h += "<tr><td>" + std::to_string(m.round) + "</td><td>" + v + "</td><td>" +
         (std::isfinite(m.test_accuracy) ? Fmt("%.4f", m.test_accuracy) : "&ndash;") + "</td><td>" +
         std::to_string(m.received) + "/" + std::to_string(m.selected) + "</td><td><a href=\"/model/" + v +
         ".onnx" + options.link_query + "\">model-v" + v + ".onnx</a></td></tr>";
  }
  if (listed == 0) h += "<tr><td colspan=\"5\" class=\"dim\">No model yet.</td></tr>";
  h += "</table><p><a href=\"/api/status" + options.link_query + "\">status as JSON</a></p></div>";
  h += "<div class=\"dim\">fedmesh &middot; refreshed every " + std::to_string(options.refresh_s) +
       " s</div></body></html>";
  return h;
}

}  // namespace fedmesh
