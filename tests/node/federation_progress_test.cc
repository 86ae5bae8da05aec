// Issue 23, "progress for people": with --progress=always the aggregator draws its live
// line (round, updates in, ETA) and a node its own (training, rounds trained) under the
// log lines, erasing it before each log line and at the end; by default (auto) a binary
// whose log stream is not a terminal (here a file) draws nothing, so logs stay plain.
#include "tests/node/federation_fixture.h"

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture and its helpers

TEST_F(FederationTest, ProgressLinesOnRequestAndPlainLogsOtherwise) {
  const std::string ep = StartAggregator({"--progress=always", "rounds.total=2",
                                          "rounds.clients_per_round=2", "rounds.min_clients=2",
                                          "rounds.min_available_clients=2"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* site1 = StartNode(1, ep, {"--progress=always"});
  ChildProcess* site2 = StartNode(2, ep);
  ASSERT_NE(site1, nullptr);
  ASSERT_NE(site2, nullptr);
  const auto rc = aggregator_->WaitExit(seconds(300));
  ASSERT_TRUE(rc.has_value() && *rc == 0) << aggregator_->Log();
  const std::string erase = "\r\x1b[K";
  const std::string agg = aggregator_->Log();
  EXPECT_NE(agg.find(erase + "round 1/2 · 0/2 updates · "), std::string::npos) << agg;
  EXPECT_NE(agg.find(erase + "round 2/2 · 2/2 updates · "), std::string::npos) << agg;
  // After round 1 closed the ETA is known: one more round of about round 1's length.
  EXPECT_NE(agg.find(erase + "round 1/2 closed · ETA "), std::string::npos) << agg;
  EXPECT_EQ(agg.find("round 1/2 closed · ETA ?"), std::string::npos) << agg;
  // Log lines are whole: each starts after an erase, never in the middle of the line.
  EXPECT_NE(agg.find(erase + "["), std::string::npos) << agg;
  EXPECT_NE(agg.find("] federation finished: 2 rounds\n"), std::string::npos) << agg;
  // The line is erased at the end: after the last erase come only whole log lines.
  EXPECT_NE(agg.find(erase + "round 2/2 closed · ETA 0s"), std::string::npos) << agg;
  const std::string tail = agg.substr(agg.rfind(erase) + erase.size());
  EXPECT_EQ(tail.find("· ETA"), std::string::npos) << tail;
  ASSERT_FALSE(agg.empty());
  EXPECT_EQ(agg.back(), '\n') << tail;

  site1->Kill();
  site2->Kill();
  const std::string s1 = site1->Log();
  EXPECT_NE(s1.find(erase + "registered with the aggregator · waiting for a task"), std::string::npos) << s1;
  EXPECT_NE(s1.find(erase + "round 1: training on "), std::string::npos) << s1;
  EXPECT_NE(s1.find(erase + "round 2: update sent · 2 round(s) trained · waiting for the next task"),
            std::string::npos) << s1;
  const std::string s2 = site2->Log();
  EXPECT_NE(s2.find("round 2: trained"), std::string::npos) << s2;
  EXPECT_EQ(s2.find('\x1b'), std::string::npos) << s2;
  EXPECT_EQ(s2.find('\r'), std::string::npos) << s2;
}

TEST_F(FederationTest, BadProgressModeStopsTheAggregatorWithExitTwo) {
  ChildProcess* agg = Spawn("aggregator", {kBin + "fedmesh-aggregator", "--config", "aggregator.toml",
                                           "--progress", "sometimes"});
  ASSERT_NE(agg, nullptr);
  const auto rc = agg->WaitExit(seconds(60));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 2);
  EXPECT_NE(agg->Log().find("--progress must be auto, always or never, not \"sometimes\""),
            std::string::npos) << agg->Log();
}

}  // namespace
}  // namespace fedmesh
