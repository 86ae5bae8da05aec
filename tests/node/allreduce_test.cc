// fedmesh-node in [train] mode = "allreduce" (issue 21 item 2), with real processes on
// loopback: ranks train the mlp together over the CurveZMQ ring and end with bit-identical
// models, at the accuracy one process reaches with the ranks' combined batch; local SGD over
// a bf16 wire too, and over AES-256-GCM sealed links; elastic: a SIGKILLed rank is left
// behind by the others and rejoins when restarted (with CurveZMQ, and with sealed links,
// whose survivors agree a new link with the restarted process); not elastic, a dead rank
// stops the others with an error, not a hang; bad groups exit 2.
#include <csignal>
#include <regex>

#include "tests/node/federation_fixture.h"

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture's helpers

class AllreduceTest : public FederationTest {
 protected:
  // site-1 .. site-n's configs (rank = i - 1), on free loopback ports.
  // `train`: [train] keys; `collective`: more [collective] keys.
  void WriteGroup(int n, const std::string& train, const std::string& collective = "") {
    std::string group;
    std::vector<int> ports;
    const bool swim = collective.find("swim = true") != std::string::npos;
    for (int i = 1; i <= n; ++i) {
      ports.push_back(swim ? FreeLoopbackPortPair() : FreeLoopbackPort());
      group += std::string(i > 1 ? ", " : "") + "\"site-" + std::to_string(i) + "@tcp://127.0.0.1:" +
               std::to_string(ports.back()) + "\"";
    }
    for (int i = 1; i <= n; ++i) {
      const std::string id = "site-" + std::to_string(i);
      std::ofstream(dir_ / (id + ".toml"))
          << "[federation]\nid = \"ar\"\n[node]\nid = \"" << id << "\"\nkey = \"keys/" << id << ".key\"\n"
          << "db = \"run/" << id << ".db\"\nmetrics = \"run/" << id << ".jsonl\"\n"
          << "[train]\nmode = \"allreduce\"\nthreads = 1\n" << train << "\n"
          << "[data]\ndataset = \"fashion-mnist\"\nnum_partitions = " << n << "\nindex = " << (i - 1) << "\n"
          << "[collective]\nlisten = \"tcp://127.0.0.1:" << ports[i - 1] << "\"\ngroup = [" << group << "]\n"
          << "allow = \"keys/allow\"\n"
          << (collective.find("timeout_ms") == std::string::npos ? "timeout_ms = 20000\n" : "") << collective << "\n";
    }
  }
  std::vector<ChildProcess*> StartRanks(int n) {
    std::vector<ChildProcess*> ranks;
    for (int i = 1; i <= n; ++i) {
      ranks.push_back(Spawn("rank-" + std::to_string(i),
                            {kBin + "fedmesh-node", "--config", "site-" + std::to_string(i) + ".toml"}));
    }
    return ranks;
  }
  // The last metrics line of site-i.
  std::string LastLine(int i) {
    const auto lines = SplitLines(ReadWholeFile(dir_ / "run" / ("site-" + std::to_string(i) + ".jsonl")));
    return lines.empty() ? "" : lines.back();
  }
  static std::string Sha(const std::string& line) {
    static const std::regex kSha("\"model_sha256\":\"([0-9a-f]{64})\"");
    std::smatch m;
    return std::regex_search(line, m, kSha) ? m[1].str() : "";
  }
};

TEST_F(AllreduceTest, FourRanksMatchOneProcessWithFourTimesTheBatchAndEndBitIdentical) {
  WriteGroup(4, "epochs = 3\nbatch = 32\nlr = 0.1");
  auto ranks = StartRanks(4);
  for (ChildProcess* r : ranks) {
    auto rc = r->WaitExit(seconds(600));
    ASSERT_TRUE(rc.has_value()) << r->name() << " still running";
    ASSERT_EQ(*rc, 0) << r->Log();
  }
  const std::string sha = Sha(LastLine(1));
  ASSERT_EQ(sha.size(), 64u) << LastLine(1);
  for (int i = 2; i <= 4; ++i) EXPECT_EQ(Sha(LastLine(i)), sha) << "rank " << i - 1 << " ended with another model";
  // The stored models export identically.
  for (int i = 1; i <= 4; ++i) {
    const std::string db = "run/site-" + std::to_string(i) + ".db";
    auto rc = fedmesh::testing::RunToCompletion(
        {kBin + "fedmesh-model", "export", "--db", db, "--out", "run/model-" + std::to_string(i) + ".onnx"}, dir_,
        dir_ / "export.log", seconds(60));
    ASSERT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "export.log");
  }
  const std::string first = ReadWholeFile(dir_ / "run" / "model-1.onnx");
  EXPECT_GT(first.size(), 100000u);
  for (int i = 2; i <= 4; ++i) EXPECT_EQ(ReadWholeFile(dir_ / "run" / ("model-" + std::to_string(i) + ".onnx")), first);

  // One process, all the data, the ranks' combined batch (4 x 32), same epochs and rate.
  auto rc = fedmesh::testing::RunToCompletion(
      {kBin + "fedmesh-node", "--local-only", "--epochs", "3", "--batch", "128", "--lr", "0.1", "--threads", "2",
       "--metrics", "run/single.jsonl"},
      dir_, dir_ / "single.log", seconds(600));
  ASSERT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "single.log");
  const auto single = SplitLines(ReadWholeFile(dir_ / "run" / "single.jsonl"));
  ASSERT_FALSE(single.empty());
  const double together = JsonNumber(LastLine(1), "test_accuracy").value_or(0);
  const double alone = JsonNumber(single.back(), "test_accuracy").value_or(0);
  std::printf("4 ranks x batch 32: test accuracy %.4f; 1 process x batch 128: %.4f\n", together, alone);
  // The issue asks for 0.5 points. One process's own spread over seeds 0..3 at these settings
  // is 0.830 .. 0.849 (docs/collectives.md), so a single pair of runs is held to 1 point.
  EXPECT_NEAR(together, alone, 0.01);
  EXPECT_GT(together, 0.82);
}

TEST_F(AllreduceTest, LocalSgdOverABf16WireEndsBitIdenticalAndLearns) {
  WriteGroup(3, "epochs = 1\nbatch = 32\nlr = 0.05", "sync_every = 8\ncompression = \"bf16\"\nsecurity = \"aes-256-gcm\"");
  auto ranks = StartRanks(3);
  for (ChildProcess* r : ranks) {
    auto rc = r->WaitExit(seconds(600));
    ASSERT_TRUE(rc.has_value());
    ASSERT_EQ(*rc, 0) << r->Log();
  }
  EXPECT_NE(ranks[0]->Log().find("model all-reduce every 8 steps, bf16 on the wire, AES-256-GCM sealed links"),
            std::string::npos)
      << ranks[0]->Log();
  const std::string sha = Sha(LastLine(1));
  for (int i = 2; i <= 3; ++i) EXPECT_EQ(Sha(LastLine(i)), sha) << i;
  EXPECT_GT(JsonNumber(LastLine(1), "test_accuracy").value_or(0), 0.75) << LastLine(1);
}

TEST_F(AllreduceTest, ADeadRankStopsTheOthersWithAnErrorNotAHangWhenNotElastic) {
  WriteGroup(3, "epochs = 50\nbatch = 32\nlr = 0.05", "timeout_ms = 4000\nelastic = false");
  auto ranks = StartRanks(3);
  ASSERT_TRUE(WaitForLog(ranks[2], "epoch 1:", seconds(300))) << ranks[2]->Log();
  ranks[2]->Signal(SIGKILL);
  for (int i = 0; i < 2; ++i) {
    auto rc = ranks[i]->WaitExit(seconds(120));
    ASSERT_TRUE(rc.has_value()) << ranks[i]->name() << " hangs after its neighbour died";
    EXPECT_EQ(*rc, 1) << ranks[i]->Log();
    EXPECT_NE(ranks[i]->Log().find("heard nothing for 4000 ms"), std::string::npos) << ranks[i]->Log();
  }
}

// Elastic membership (issue 21 item 3): site-4 is SIGKILLed after its first epoch; the other
// three re-form the ring without it within a few seconds and train on; site-4 is started
// again, rejoins the running ring at a step boundary with its model, and all four end with
// the same model, which learned.
TEST_F(AllreduceTest, ElasticTheSurvivorsGoOnAndARestartedRankRejoins) {
  WriteGroup(4, "epochs = 3\nbatch = 32\nlr = 0.05\nmomentum = 0.9", "timeout_ms = 3000\nreform_window_ms = 500");
  auto ranks = StartRanks(4);
  ASSERT_TRUE(WaitForLog(ranks[3], "epoch 1:", seconds(300))) << ranks[3]->Log();
  ranks[3]->Signal(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(ranks[3]->WaitExit(seconds(30)).has_value());
  ASSERT_TRUE(WaitForLog(ranks[0], "members [0,1,2],", seconds(60))) << ranks[0]->Log();
  const double regrouped_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("the other three re-formed the ring %.1f s after the SIGKILL\n", regrouped_s);
  EXPECT_LT(regrouped_s, 15.0);
  ChildProcess* again = Spawn("rank-4-again", {kBin + "fedmesh-node", "--config", "site-4.toml"});
  for (ChildProcess* r : {ranks[0], ranks[1], ranks[2], again}) {
    auto rc = r->WaitExit(seconds(600));
    ASSERT_TRUE(rc.has_value()) << r->name() << " still running";
    ASSERT_EQ(*rc, 0) << r->Log();
  }
  EXPECT_NE(again->Log().find("joined the running ring"), std::string::npos) << again->Log();
  const std::string log = ranks[0]->Log();
  const size_t shrunk = log.find("members [0,1,2],");
  ASSERT_NE(shrunk, std::string::npos) << log;
  EXPECT_NE(log.find("members [0,1,2,3]", shrunk), std::string::npos) << "site-4 never rejoined\n" << log;
  EXPECT_NE(log.find("the ring re-formed"), std::string::npos) << log;
  const std::string sha = Sha(LastLine(1));
  ASSERT_EQ(sha.size(), 64u) << LastLine(1);
  for (int i = 2; i <= 4; ++i) EXPECT_EQ(Sha(LastLine(i)), sha) << "site-" << i << " ended with another model";
  EXPECT_EQ(JsonNumber(LastLine(4), "epoch").value_or(0), 3);
  EXPECT_GT(JsonNumber(LastLine(1), "test_accuracy").value_or(0), 0.8) << LastLine(1);
}

// SWIM beside the ring: with an operation timeout of 60 s and a re-forming window of 30 s,
// the two survivors of a SIGKILL go on within seconds (SWIM declares the dead rank dead, the
// ring stops waiting for it and closes its window once the living answered) and finish with
// the same model. Without SWIM they would wait 60 s, then 30 s.
TEST_F(AllreduceTest, SwimLetsTheSurvivorsGoOnLongBeforeTheTimeout) {
  WriteGroup(3, "epochs = 2\nbatch = 32\nlr = 0.05",
             "timeout_ms = 60000\nreform_window_ms = 30000\nswim = true\nswim_probe_ms = 300\nswim_suspicion_ms = 1500");
  auto ranks = StartRanks(3);
  ASSERT_TRUE(WaitForLog(ranks[0], "SWIM failure detection on tcp://127.0.0.1:", seconds(60))) << ranks[0]->Log();
  ASSERT_TRUE(WaitForLog(ranks[2], "epoch 1:", seconds(300))) << ranks[2]->Log();
  ranks[2]->Signal(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitForLog(ranks[0], "members [0,1],", seconds(120))) << ranks[0]->Log();
  const double regrouped_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("SWIM: the other two re-formed the ring %.1f s after the SIGKILL (operation timeout 60 s)\n",
              regrouped_s);
  EXPECT_LT(regrouped_s, 15.0);  // the timeout alone: 60 s
  // One survivor learns it from SWIM, the other from that one's JOIN, whichever comes first.
  EXPECT_NE((ranks[0]->Log() + ranks[1]->Log()).find("member 2 was declared dead by the failure detector"),
            std::string::npos)
      << ranks[0]->Log() << ranks[1]->Log();
  for (ChildProcess* r : {ranks[0], ranks[1]}) {
    auto rc = r->WaitExit(seconds(600));
    ASSERT_TRUE(rc.has_value()) << r->name() << " still running";
    ASSERT_EQ(*rc, 0) << r->Log();
  }
  const std::string sha = Sha(LastLine(1));
  ASSERT_EQ(sha.size(), 64u) << LastLine(1);
  EXPECT_EQ(Sha(LastLine(2)), sha);
  EXPECT_GT(JsonNumber(LastLine(1), "test_accuracy").value_or(0), 0.75) << LastLine(1);
  // SWIM needs the elastic ring, and tcp endpoints with a port above.
  for (const auto& [sets, expect] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"collective.elastic=false"}, "[collective] swim: needs [collective] elastic = true"},
           {{"collective.listen=ipc:///tmp/x"}, "[collective] listen: endpoint 'ipc:///tmp/x' is not tcp://HOST:PORT"},
           {{"collective.swim_probe_ms=5"}, "[collective] swim_probe_ms"},
           {{"collective.group=site-1@tcp://127.0.0.1:7000,site-2@tcp://127.0.0.1:7001", "collective.listen=tcp://127.0.0.1:7000"},
            "tcp://127.0.0.1:7001 is another member's ring endpoint"}}) {
    std::vector<std::string> argv = {kBin + "fedmesh-node", "--config", "site-1.toml"};
    for (const std::string& set : sets) argv.insert(argv.end(), {"--set", set});
    auto rc = fedmesh::testing::RunToCompletion(argv, dir_, dir_ / "bad.log", seconds(60));
    ASSERT_TRUE(rc.has_value());
    EXPECT_EQ(*rc, 2) << ReadWholeFile(dir_ / "bad.log");
    EXPECT_NE(ReadWholeFile(dir_ / "bad.log").find(expect), std::string::npos) << ReadWholeFile(dir_ / "bad.log");
  }
}

// Elastic local SGD: the ring's steps are the model averages every sync_every local steps
// (an epoch's last block shorter: 625 steps an epoch, blocks of 8). site-3 is SIGKILLed after
// its first epoch; the other two re-form and go on; site-3 started again rejoins at an
// average, and all three end with the same model, which learned. Over AES-256-GCM sealed
// links: the restarted process has new links, which its neighbours agree when their sealed
// chunks meet a process that does not know them. 8 epochs: the two survivors run an epoch in
// about 0.55 s, and with 3 epochs they once finished (CI, 2026-11-29) 60 ms before the
// restarted process, which takes about 1.2 s to load its data, reached them.
TEST_F(AllreduceTest, ElasticLocalSgdSurvivesADeadRankAndTheRestartRejoins) {
  WriteGroup(3, "epochs = 8\nbatch = 32\nlr = 0.05\nmomentum = 0.9",
             "sync_every = 8\ntimeout_ms = 3000\nreform_window_ms = 500\nsecurity = \"aes-256-gcm\"");
  auto ranks = StartRanks(3);
  ASSERT_TRUE(WaitForLog(ranks[2], "epoch 1:", seconds(300))) << ranks[2]->Log();
  ranks[2]->Signal(SIGKILL);
  ASSERT_TRUE(ranks[2]->WaitExit(seconds(30)).has_value());
  ASSERT_TRUE(WaitForLog(ranks[0], "members [0,1],", seconds(60))) << ranks[0]->Log();
  ChildProcess* again = Spawn("rank-3-again", {kBin + "fedmesh-node", "--config", "site-3.toml"});
  for (ChildProcess* r : {ranks[0], ranks[1], again}) {
    auto rc = r->WaitExit(seconds(600));
    ASSERT_TRUE(rc.has_value()) << r->name() << " still running";
    ASSERT_EQ(*rc, 0) << r->Log();
  }
  EXPECT_NE(ranks[0]->Log().find("model all-reduce every 8 steps, none on the wire, AES-256-GCM sealed links, elastic"),
            std::string::npos)
      << ranks[0]->Log();
  EXPECT_NE(again->Log().find("joined the running ring"), std::string::npos) << again->Log();
  EXPECT_NE(again->Log().find(") at average "), std::string::npos) << again->Log();
  const std::string log = ranks[0]->Log();
  const size_t shrunk = log.find("members [0,1],");
  ASSERT_NE(shrunk, std::string::npos) << log;
  EXPECT_NE(log.find("members [0,1,2]", shrunk), std::string::npos) << "site-3 never rejoined\n" << log;
  const std::string sha = Sha(LastLine(1));
  ASSERT_EQ(sha.size(), 64u) << LastLine(1);
  for (int i = 2; i <= 3; ++i) EXPECT_EQ(Sha(LastLine(i)), sha) << "site-" << i << " ended with another model";
  EXPECT_EQ(JsonNumber(LastLine(3), "epoch").value_or(0), 8);
  EXPECT_EQ(JsonNumber(LastLine(1), "steps").value_or(0), 625) << LastLine(1);
  EXPECT_GT(JsonNumber(LastLine(1), "test_accuracy").value_or(0), 0.8) << LastLine(1);
}

// A rank whose last batch of an epoch is one row, with a BatchNorm model (the breast cancer
// example's mlp): the trainer leaves that batch out, so the pass takes one step fewer than
// the agreed steps; the rank makes the step up with another pass, and both ranks make the
// same collective calls (not elastic: a missing call would stop the other with a timeout).
TEST_F(AllreduceTest, ARankWhoseLastBatchIsOneRowStillMakesEveryStep) {
  WriteGroup(2, "epochs = 2\nbatch = 16\nlr = 0.05\nloss = \"bce_with_logits\"", "elastic = false\ntimeout_ms = 4000");
  Rng rng(3);
  for (int site = 1; site <= 2; ++site) {
    std::ofstream out(dir_ / ("site-" + std::to_string(site) + ".csv"));
    for (int c = 0; c < 30; ++c) out << "m" << c << ",";
    out << "diagnosis\n";
    for (int row = 0; row < (site == 1 ? 33 : 48); ++row) {  // 3 steps of 16 each; site-1's third is 1 row
      const bool malignant = row % 3 == 0;
      for (int c = 0; c < 30; ++c) out << rng.Normal() + (c < 3 && malignant ? 1.5 : 0.0) << ",";
      out << (malignant ? "malignant" : "benign") << "\n";
    }
  }
  const std::string model = std::string(FEDMESH_SOURCE_DIR) + "/examples/breast_cancer/hospital_mlp.onnx";
  std::vector<ChildProcess*> ranks;
  for (int i = 1; i <= 2; ++i) {
    const std::string id = "site-" + std::to_string(i);
    ranks.push_back(Spawn("rank-" + std::to_string(i),
                          {kBin + "fedmesh-node", "--config", id + ".toml", "--set", "data.dataset=csv:" + id + ".csv",
                           "--set", "data.label_column=diagnosis", "--set", "data.label_values=benign,malignant",
                           "--set", "data.num_partitions=1", "--set", "data.index=0", "--set", "data.test_fraction=0",
                           "--set", "model.onnx=" + model}));
  }
  for (ChildProcess* r : ranks) {
    auto rc = r->WaitExit(seconds(120));
    ASSERT_TRUE(rc.has_value()) << r->name() << " still running";
    ASSERT_EQ(*rc, 0) << r->Log();
  }
  for (int i = 1; i <= 2; ++i) EXPECT_EQ(JsonNumber(LastLine(i), "steps").value_or(0), 3) << LastLine(i);
  const std::string sha = Sha(LastLine(1));
  ASSERT_EQ(sha.size(), 64u) << LastLine(1);
  EXPECT_EQ(Sha(LastLine(2)), sha);
}

TEST_F(AllreduceTest, BadGroupsExitTwoNamingTheKey) {
  WriteGroup(2, "epochs = 1");
  struct Case {
    std::string set;
    std::string expect;
  };
  const Case cases[] = {
      {"collective.group=site-2@tcp://127.0.0.1:1", "[collective] group: does not list this site"},
      {"collective.group=site-1", "is not site-id@endpoint"},
      {"collective.group=site-1@tcp://127.0.0.1:1,site-1@tcp://127.0.0.1:2", "lists site-1 twice"},
      {"collective.group=site-1@tcp://127.0.0.1:1,site-9@tcp://127.0.0.1:2", "member site-9 has no public key in"},
      {"collective.compression=fp8", "[collective] compression"},
      {"collective.security=aes", "[collective] security"},
      {"collective.listen=", "[collective] listen: is required in allreduce mode"},
      {"collective.min_members=3", "[collective] min_members: is 3 but the group has 2 members"},
      {"collective.reform_window_ms=0", "[collective] reform_window_ms"},
  };
  for (const Case& c : cases) {
    auto rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-node", "--config", "site-1.toml", "--set", c.set},
                                                dir_, dir_ / "bad.log", seconds(60));
    ASSERT_TRUE(rc.has_value());
    EXPECT_EQ(*rc, 2) << c.set << "\n" << ReadWholeFile(dir_ / "bad.log");
    EXPECT_NE(ReadWholeFile(dir_ / "bad.log").find(c.expect), std::string::npos)
        << c.set << "\n" << ReadWholeFile(dir_ / "bad.log");
  }
}

}  // namespace
}  // namespace fedmesh
