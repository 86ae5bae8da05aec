#include "telemetry/terminal_progress.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fedmesh {
namespace {

void WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n <= 0) return;  // the stream is gone: nothing useful to do
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// The erase-and-redraw log sink: formats like any spdlog sink, then hands the bytes to
// TerminalProgress::WriteAbove.
class ProgressAwareSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ProgressAwareSink(TerminalProgress* progress) : progress_(progress) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    progress_->WriteAbove(std::string_view(formatted.data(), formatted.size()));
  }
  void flush_() override {}

 private:
  TerminalProgress* progress_;
};

}  // namespace

Result<ProgressMode> ParseProgressMode(std::string_view text) {
  if (text == "auto") return ProgressMode::kAuto;
  if (text == "always") return ProgressMode::kAlways;
  if (text == "never") return ProgressMode::kNever;
  return Status::InvalidArgument("--progress must be auto, always or never, not \"" +
                                 std::string(text) + "\"");
}

TerminalProgress::TerminalProgress(ProgressMode mode, int fd) : fd_(fd) {
  if (mode == ProgressMode::kAlways) {
    enabled_ = true;
  } else if (mode == ProgressMode::kAuto) {
    const char* term = std::getenv("TERM");
    enabled_ = ::isatty(fd) == 1 && !(term != nullptr && std::strcmp(term, "dumb") == 0);
  }
}

TerminalProgress::~TerminalProgress() {
  if (drawn_) WriteAll(fd_, "\r\033[K");
}

void TerminalProgress::Set(std::string line) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  line_ = std::move(line);
  DrawLocked();
}

void TerminalProgress::DrawLocked() {
  // Cut to the width, so the line never wraps (a wrapped line cannot be erased with \r).
  size_t width = 100;
  winsize ws{};
  if (::ioctl(fd_, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1) width = ws.ws_col;
  std::string out = "\r\033[K";
  out += line_.size() < width ? line_ : line_.substr(0, width - 1);
  WriteAll(fd_, out);
  drawn_ = !line_.empty();
}

void TerminalProgress::WriteAbove(std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) {
    WriteAll(fd_, text);
    return;
  }
  if (drawn_) WriteAll(fd_, "\r\033[K");
  WriteAll(fd_, text);
  if (!line_.empty()) DrawLocked();
}

std::shared_ptr<spdlog::logger> TerminalProgress::MakeLogger(const std::string& name,
                                                             const std::string& pattern) {
  auto sink = std::make_shared<ProgressAwareSink>(this);
  auto logger = std::make_shared<spdlog::logger>(name, std::move(sink));
  logger->set_pattern(pattern);
  return logger;
}

std::string FormatEta(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%lds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%ldm %02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ldh %02ldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

}  // namespace fedmesh
