// RoundProgress (aggregator/round_progress.h): the aggregator's live line from round events
// on a clock the test drives: updates in, time in round, and an ETA from the closed rounds'
// mean duration once one has closed; retries are named; Finished erases the line.
#include "aggregator/round_progress.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fedmesh {
namespace {

TEST(RoundProgress, LinesFollowTheRoundsAndTheEtaTheirMeanDuration) {
  std::vector<std::string> shown;
  RoundProgress p(4, [&](const std::string& line) { shown.push_back(line); });
  p.Opened(1, 1, 3, 100.0);
  EXPECT_EQ(shown.back(), "round 1/4 · 0/3 updates · 0.0 s in round · ETA ?");
  p.Accepted(104.0);
  EXPECT_EQ(shown.back(), "round 1/4 · 1/3 updates · 4.0 s in round · ETA ?");
  p.Closed(1, 10.0, 110.0);
  EXPECT_EQ(shown.back(), "round 1/4 closed · ETA 30s");  // 3 rounds of 10 s left
  p.Opened(2, 1, 3, 110.0);
  p.Accepted(115.0);
  EXPECT_EQ(shown.back(), "round 2/4 · 1/3 updates · 5.0 s in round · ETA 25s");
  p.Closed(2, 30.0, 140.0);  // mean 20 s, 2 left
  EXPECT_EQ(shown.back(), "round 2/4 closed · ETA 40s");
  p.Opened(3, 2, 2, 150.0);  // a retry
  EXPECT_EQ(shown.back(), "round 3/4 (attempt 2) · 0/2 updates · 0.0 s in round · ETA 40s");
  p.Opened(3, 2, 2, 150.0);
  EXPECT_EQ(p.Line(300.0), "round 3/4 (attempt 2) · 0/2 updates · 150.0 s in round · ETA 0s");
  p.Finished();
  EXPECT_EQ(shown.back(), "");
}

}  // namespace
}  // namespace fedmesh
