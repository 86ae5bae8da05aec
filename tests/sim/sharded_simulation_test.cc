// Issue 24 item 2: a simulation sharded over R ranks (here threads of this process over
// ThreadRankGroup, the same code path as mpirun's ranks) writes the one-process metrics file
// byte for byte, ends with the same model and counts every client update once; a rank that
// trains differently changes rank 0's file (the exchange carries real training); the
// configurations that cannot be sharded are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "sim/simulation.h"
#include "sim/threads/rank_group.h"
#include "tests/sim/sim_test_util.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return (fs::path(::testing::TempDir()) / ("sharded_" + name + "_" + std::to_string(getpid())))
      .string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// One RunSimulation per rank, each on its own thread; options_of(rank) gives its options.
std::vector<Result<SimReport>> RunOnRanks(int ranks,
                                          const std::function<SimOptions(int)>& options_of) {
  auto groups = ThreadRankGroup::Create(ranks);
  std::vector<Result<SimReport>> reports(static_cast<size_t>(ranks), Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      RankGroup& g = *groups[static_cast<size_t>(r)];
      reports[static_cast<size_t>(r)] = RunSimulation(options_of(r), {}, &g);
      if (!reports[static_cast<size_t>(r)].ok()) g.Abort(1);  // as fedmesh-sim does
    });
  }
  for (auto& t : threads) t.join();
  return reports;
}

// Carried state (error feedback residuals, momentum), dropout and federated evaluation
// all in play; one worker per rank.
SimOptions Busy() {
  SimOptions o = SmallSim(4);
  o.clients = 12;
  o.clients_per_round = 6;
  o.codec = "topk:0.05|int8";
  o.trainer.sgd.momentum = 0.5f;
  o.dropout = 0.2;
  o.federated_eval = true;
  o.eval_every = 2;
  o.threads = 1;
  return o;
}

class ShardedSimulationTest : public ::testing::TestWithParam<int> {};

TEST_P(ShardedSimulationTest, RanksWriteTheOneProcessMetricsFileByteForByte) {
  REQUIRE_DATA();
  const int ranks = GetParam();
  SimOptions one = Busy();
  one.metrics_path = TempPath("one.jsonl");
  auto single = RunSimulation(one);
  ASSERT_TRUE(single.ok()) << single.status().ToString();

  const std::string sharded_path = TempPath("r" + std::to_string(ranks) + ".jsonl");
  fs::remove(sharded_path);
  auto reports = RunOnRanks(ranks, [&](int) {
    SimOptions o = Busy();
    o.metrics_path = sharded_path;
    return o;
  });
  for (auto& r : reports) ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string expected = ReadFile(one.metrics_path);
  ASSERT_NE(expected.find("\"site\""), std::string::npos);  // federated evaluations ran
  EXPECT_EQ(ReadFile(sharded_path), expected);
  for (auto& r : reports) {
    EXPECT_EQ(r->final_model, single->final_model);
    EXPECT_EQ(r->client_updates, single->client_updates);  // each update trained once
    EXPECT_EQ(r->rank_peak_rss_bytes.size(), static_cast<size_t>(ranks));
  }
  fs::remove(one.metrics_path);
  fs::remove(sharded_path);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShardedSimulationTest, ::testing::Values(2, 3));

TEST(ShardedSimulation, BatchedTrainingShardsToo) {
  REQUIRE_DATA();
  SimOptions one = Busy();
  one.federated_eval = false;
  one.batched_clients = 4;
  auto single = RunSimulation(one);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  auto reports = RunOnRanks(2, [&](int) { return one; });
  for (auto& r : reports) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->rounds.size(), single->rounds.size());
    for (size_t i = 0; i < r->rounds.size(); ++i) {
      EXPECT_EQ(r->rounds[i].ToJson().str(), single->rounds[i].ToJson().str());
    }
    EXPECT_EQ(r->final_model, single->final_model);
  }
}

// The negative control: if rank 1 trained with another learning rate, rank 0's file would
// not be the one-process file. Rank 0 does not train rank 1's clients itself.
TEST(ShardedSimulation, RankOneTrainingDifferentlyChangesRankZerosFile) {
  REQUIRE_DATA();
  SimOptions one = Busy();
  one.metrics_path = TempPath("ctl_one.jsonl");
  ASSERT_TRUE(RunSimulation(one).ok());
  const std::string path = TempPath("ctl_two.jsonl");
  auto reports = RunOnRanks(2, [&](int rank) {
    SimOptions o = Busy();
    o.metrics_path = path;
    if (rank == 1) o.trainer.sgd.lr *= 2;  // its FitTasks and hence its training differ
    return o;
  });
  for (auto& r : reports) ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(ReadFile(path), ReadFile(one.metrics_path));
  fs::remove(one.metrics_path);
  fs::remove(path);
}

TEST(ShardedSimulation, MoreRanksThanClientsOrAModeThatCannotShardIsRefused) {
  SimOptions few = SmallSim(1);
  few.clients = 2;
  few.clients_per_round = 2;
  auto reports = RunOnRanks(3, [&](int) { return few; });
  for (auto& r : reports) {
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("3 MPI ranks for 2 clients"), std::string::npos)
        << r.status().ToString();
  }
  SimOptions gossip = SmallSim(1);
  gossip.mode = SimMode::kGossip;
  reports = RunOnRanks(2, [&](int) { return gossip; });
  for (auto& r : reports) {
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("mode gossip runs in one process only"), std::string::npos)
        << r.status().ToString();
  }
}

}  // namespace
}  // namespace fedmesh
