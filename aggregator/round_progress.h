// RoundProgress: the aggregator's live progress line (telemetry/terminal_progress.h) from
// its round events: "round 3/10 · 2/5 updates · 4.1 s in round · ETA 32s". The ETA is the
// mean closed round's duration times the rounds left, less the open round's time so far.
// Time comes from the caller (seconds on any monotonic clock), so tests can drive it.
// Thread-safety: none; the service's event loop owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace fedmesh {

class RoundProgress {
 public:
  // `show` receives every new line ("" to erase it); total_rounds > 0.
  RoundProgress(uint64_t total_rounds, std::function<void(const std::string&)> show)
      : total_(total_rounds), show_(std::move(show)) {}

  void Opened(uint64_t round, uint32_t attempt, size_t selected, double now_s);
  void Accepted(double now_s);
  // A round closed after `duration_s` (its RoundMetrics::duration_s).
  void Closed(uint64_t round, double duration_s, double now_s);
  void Finished() { show_(""); }

  // The line as it stands at `now_s`.
  std::string Line(double now_s) const;

 private:
  uint64_t total_;
  std::function<void(const std::string&)> show_;
  uint64_t round_ = 0;
  uint32_t attempt_ = 1;
  size_t selected_ = 0, received_ = 0;
  double opened_s_ = 0;
  bool open_ = false;
  uint64_t closed_ = 0;       // rounds closed while this process ran
  uint64_t last_closed_ = 0;  // the last closed round's number
  double closed_seconds_ = 0;
};

}  // namespace fedmesh
