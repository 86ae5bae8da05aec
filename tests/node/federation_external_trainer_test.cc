// Issue 20 acceptance: fedmesh-node processes hand training to the sites' own PyTorch
// script (examples/pytorch/train.py through [train] external) in a real federation:
// CurveZMQ, secure aggregation, the aggregator scoring the global model on the
// Fashion-MNIST test set with fedmesh's own graph engine (so the names and layout the
// trainers send are checked end to end). One trainer is SIGKILLed mid-round: its node
// reports the failed task with the reason, the round closes with the other two at once
// (not at a deadline), and the node's restarted trainer serves the next rounds.
#include <csignal>
#include <regex>

#include "tests/node/federation_fixture.h"

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture and its helpers

bool HaveTorch() {
  static const bool have =
      std::system("/usr/bin/python3 -c 'import torch, onnx, numpy' >/dev/null 2>&1") == 0;
  return have;
}

std::vector<std::string> ExternalSets(int index, int sites) {
  const std::string train_py = (fs::path(FEDMESH_SOURCE_DIR) / "examples" / "pytorch" / "train.py").string();
  return {"train.external=/usr/bin/python3," + train_py + ",--model,fmnist_cnn,--sites," +
              std::to_string(sites) + ",--index," + std::to_string(index),
          "train.external_restart_backoff_s=0.5", "secagg.allow=keys/allow", "secagg.min_clients=2"};
}

TEST_F(FederationTest, ExternalPyTorchTrainersLearnUnderSecureAggregationAndSurviveAKill) {
  if (!HaveTorch()) GTEST_SKIP() << "needs Debian's python3-torch, python3-onnx and python3-numpy";
  auto rc = fedmesh::testing::RunToCompletion(
      {"/usr/bin/python3", (fs::path(FEDMESH_SOURCE_DIR) / "examples" / "pytorch" / "models.py").string(),
       "--out", "run", "--models", "fmnist_cnn"},
      dir_, dir_ / "export.log", seconds(120));
  ASSERT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "export.log");
  const std::string ep = StartAggregator(
      {"model.onnx=run/fmnist_cnn.onnx", "rounds.total=5", "rounds.clients_per_round=3",
       "rounds.min_clients=2", "rounds.min_available_clients=3", "train.lr=0.1",
       "secagg.enabled=true", "secagg.clip=100", "secagg.bits=24", "secagg.stage_timeout_s=120"});
  ASSERT_FALSE(ep.empty());
  std::vector<ChildProcess*> nodes;
  for (int i = 1; i <= 3; ++i) {
    nodes.push_back(StartNode(i, ep, ExternalSets(i - 1, 3)));
    ASSERT_NE(nodes.back(), nullptr);
  }
  ChildProcess* victim = nodes[2];
  // Mid-round 2: the task has reached the trainers (they train for seconds) and no site
  // has advertised its keys yet.
  ASSERT_TRUE(WaitForLog(aggregator_, "round 2 attempt 1 opened", seconds(300))) << "round 2 never opened";
  static const std::regex kPid(R"(started the trainer \(pid ([0-9]+)\))");
  std::smatch match;
  const std::string victim_log = victim->Log();
  ASSERT_TRUE(std::regex_search(victim_log, match, kPid)) << victim_log;
  const pid_t trainer_pid = std::stoi(match[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(::kill(trainer_pid, SIGKILL), 0);

  ASSERT_TRUE(WaitForLog(victim, "refused the FitTask for round 2: the site's trainer failed: the trainer was killed by signal 9",
                         seconds(30)));
  ASSERT_TRUE(WaitForLog(aggregator_, "site-3 failed its training task of round 2", seconds(30)));
  const auto exit_rc = aggregator_->WaitExit(seconds(600));
  ASSERT_TRUE(exit_rc.has_value()) << "aggregator still running after 600 s";
  ASSERT_EQ(*exit_rc, 0);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 5);
  if (HasFatalFailure()) return;
  for (size_t i = 0; i < lines.size(); ++i) {
    // Round 2 closed with the two others; every other round had all three.
    EXPECT_EQ(JsonNumber(lines[i], "received").value_or(-1), i == 1 ? 2 : 3) << lines[i];
  }
  // Closed when the survivors' keys came, not at the 120 s stage deadline.
  EXPECT_LT(JsonNumber(lines[1], "wall_s").value_or(1e9), 100.0) << lines[1];
  const double accuracy = JsonNumber(lines.back(), "test_accuracy").value_or(-1);
  EXPECT_GE(accuracy, 0.85) << lines.back();
  // The node restarted its trainer and served the later rounds with it.
  const std::string log = victim->Log();
  EXPECT_GE(std::distance(std::sregex_iterator(log.begin(), log.end(), kPid), std::sregex_iterator()), 2) << log;
  EXPECT_NE(log.find("round 5: trained"), std::string::npos) << log;
  std::cout << "[ info ] 5 rounds with PyTorch trainers under SecAgg+ in " << ElapsedS()
            << " s; final test accuracy (fedmesh's engine) " << accuracy << "\n";
}

}  // namespace
}  // namespace fedmesh
