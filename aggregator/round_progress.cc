#include "aggregator/round_progress.h"

#include <algorithm>
#include <cstdio>

#include "telemetry/terminal_progress.h"

namespace fedmesh {

void RoundProgress::Opened(uint64_t round, uint32_t attempt, size_t selected, double now_s) {
  round_ = round;
  attempt_ = attempt;
  selected_ = selected;
  received_ = 0;
  opened_s_ = now_s;
  open_ = true;
  show_(Line(now_s));
}

void RoundProgress::Accepted(double now_s) {
  ++received_;
  show_(Line(now_s));
}

void RoundProgress::Closed(uint64_t round, double duration_s, double now_s) {
  ++closed_;
  last_closed_ = round;
  closed_seconds_ += duration_s;
  open_ = false;
  show_(Line(now_s));
}

std::string RoundProgress::Line(double now_s) const {
  char head[160];
  const uint64_t left = total_ > last_closed_ ? total_ - last_closed_ : 0;
  double eta = -1;
  if (closed_ > 0) {
    const double mean = closed_seconds_ / static_cast<double>(closed_);
    eta = mean * static_cast<double>(left) - (open_ ? std::max(0.0, now_s - opened_s_) : 0.0);
    eta = std::max(0.0, eta);
  }
  if (open_) {
    std::snprintf(head, sizeof(head), "round %llu/%llu%s · %zu/%zu updates · %.1f s in round",
                  static_cast<unsigned long long>(round_), static_cast<unsigned long long>(total_),
                  attempt_ > 1 ? (" (attempt " + std::to_string(attempt_) + ")").c_str() : "",
                  received_, selected_, std::max(0.0, now_s - opened_s_));
  } else {
    std::snprintf(head, sizeof(head), "round %llu/%llu closed",
                  static_cast<unsigned long long>(last_closed_),
                  static_cast<unsigned long long>(total_));
  }
  return std::string(head) + " · ETA " + FormatEta(eta);
}

}  // namespace fedmesh
