// TerminalProgress (telemetry/terminal_progress.h) on a pipe: "always" draws the line with
// carriage return + erase, erases it before each log line and draws it again after, cuts it
// to the width; "auto" on a pipe (not a terminal) and "never" draw nothing and pass log
// lines through unchanged; bad --progress values are refused; FormatEta's forms.
#include "telemetry/terminal_progress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <string>

namespace fedmesh {
namespace {

// Everything written to a pipe's write end, read back after the writer is done.
class Pipe {
 public:
  Pipe() {
    EXPECT_EQ(::pipe(fds_), 0);
    ::fcntl(fds_[0], F_SETFL, O_NONBLOCK);
  }
  ~Pipe() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  int writer() const { return fds_[1]; }
  std::string Drain() {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds_[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
    return out;
  }

 private:
  int fds_[2] = {-1, -1};
};

TEST(TerminalProgress, AlwaysDrawsUnderLogLinesAndErasesAtTheEnd) {
  Pipe pipe;
  {
    TerminalProgress p(ProgressMode::kAlways, pipe.writer());
    ASSERT_TRUE(p.enabled());
    p.Set("round 1/3 · 0/2 updates");
    auto logger = p.MakeLogger("progress-test", "%v");
    logger->info("a log line");
    p.Set("round 1/3 · 1/2 updates");
    p.Clear();
    logger->info("after clear");
  }
  EXPECT_EQ(pipe.Drain(),
            "\r\x1b[Kround 1/3 · 0/2 updates"
            "\r\x1b[Ka log line\n\r\x1b[Kround 1/3 · 0/2 updates"
            "\r\x1b[Kround 1/3 · 1/2 updates"
            "\r\x1b[K"
            "after clear\n");
}

TEST(TerminalProgress, CutsTheLineToOneRowAndErasesALineLeftDrawn) {
  Pipe pipe;
  {
    TerminalProgress p(ProgressMode::kAlways, pipe.writer());
    p.Set(std::string(300, 'x'));  // a pipe has no width: 100 columns
  }
  EXPECT_EQ(pipe.Drain(), "\r\x1b[K" + std::string(99, 'x') + "\r\x1b[K");
}

TEST(TerminalProgress, AutoOnAPipeAndNeverDrawNothing) {
  for (ProgressMode mode : {ProgressMode::kAuto, ProgressMode::kNever}) {
    Pipe pipe;
    {
      TerminalProgress p(mode, pipe.writer());
      EXPECT_FALSE(p.enabled());
      p.Set("round 1/3");
      p.MakeLogger("progress-test-plain", "%v")->info("plain line");
    }
    EXPECT_EQ(pipe.Drain(), "plain line\n");
  }
}

TEST(TerminalProgress, ModesParseAndBadOnesAreRefused) {
  EXPECT_EQ(*ParseProgressMode("auto"), ProgressMode::kAuto);
  EXPECT_EQ(*ParseProgressMode("always"), ProgressMode::kAlways);
  EXPECT_EQ(*ParseProgressMode("never"), ProgressMode::kNever);
  const auto bad = ParseProgressMode("sometimes");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--progress must be auto, always or never, not \"sometimes\"");
}

TEST(TerminalProgress, EtaForms) {
  EXPECT_EQ(FormatEta(42.4), "42s");
  EXPECT_EQ(FormatEta(65), "1m 05s");
  EXPECT_EQ(FormatEta(2 * 3600 + 3 * 60 + 9), "2h 03m");
  EXPECT_EQ(FormatEta(-1), "?");
  EXPECT_EQ(FormatEta(std::nan("")), "?");
}

}  // namespace
}  // namespace fedmesh
