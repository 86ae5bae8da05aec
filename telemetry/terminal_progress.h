// TerminalProgress: a live status line for people watching a binary on a terminal (issue
// 23, "progress for people"): the bottom line of the binary's log stream (stderr for
// fedmesh-aggregator, stdout for fedmesh-node), rewritten in place ("\r", erase line) as
// the run goes, with every log line printed above it. Where that stream is not a
// terminal (a systemd service, a pipe, a test) nothing is drawn and the logs stay plain
// lines, so journals and log files never hold control characters.
// Thread-safety: every member is thread-safe (one mutex shared with the log sink).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/status.h"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace fedmesh {

// --progress: "auto" (default: draw when stderr is a terminal and TERM is not "dumb"),
// "always" (draw even into a pipe: tests, `script` recordings), "never".
enum class ProgressMode { kAuto, kAlways, kNever };
Result<ProgressMode> ParseProgressMode(std::string_view text);

class TerminalProgress {
 public:
  // Draws on `fd` (the stream the logs go to); decides once whether to draw (kAuto: `fd`
  // is a terminal and TERM is not "dumb").
  TerminalProgress(ProgressMode mode, int fd);
  ~TerminalProgress();  // erases a line still drawn
  bool enabled() const { return enabled_; }
  // Replaces the line (cut to the terminal's width) and draws it; empty erases it.
  void Set(std::string line);
  // Erases the line (before exit, so the shell prompt starts on a clean line).
  void Clear() { Set(""); }
  // A logger named `name` writing `pattern`-formatted lines to the fd that erases this
  // line before each log line and draws it again after: logs and the line never mix.
  std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, const std::string& pattern);

  // Writes raw bytes to the fd under the line's lock (the log sink's path).
  void WriteAbove(std::string_view text);

 private:
  void DrawLocked();  // REQUIRES: mu_ held

  bool enabled_ = false;
  int fd_ = 2;
  std::mutex mu_;
  std::string line_;
  bool drawn_ = false;  // the line is on the screen now
};

// "1m 05s", "2h 03m", "42s": an ETA for the progress line (negative or NaN: "?").
std::string FormatEta(double seconds);

}  // namespace fedmesh
