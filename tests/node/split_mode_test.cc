// fedmesh-node in [train] mode = "split" (issue 22), real processes on loopback: the
// vertical example's hospital (label) and lab (feature) align their patients by private set
// intersection and train the cut model to a high test AUC; both trained parts export as
// ONNX; bad [split] settings exit 2 naming the key; a lab killed mid-job and restarted
// resumes from the last committed checkpoint and the job finishes; one that never comes back
// fails the job with a reason, not a hang.
#include <csignal>

#include "tests/node/federation_fixture.h"

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture's helpers

const fs::path kVertical = fs::path(FEDMESH_SOURCE_DIR) / "examples" / "vertical";

class SplitModeTest : public FederationTest {
 protected:
  void SetUp() override {
    FederationTest::SetUp();
    if (IsSkipped()) return;
    if (!fs::exists("/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv")) {
      GTEST_SKIP() << "no breast cancer CSV (apt-get install python3-sklearn)";
    }
    for (const char* who : {"hospital", "lab"}) {
      ASSERT_TRUE(GenKey(who));
      fs::copy_file(dir_ / "keys" / (std::string(who) + ".pub"), dir_ / "keys" / "allow" / (std::string(who) + ".pub"));
    }
    for (const char* f :
         {"hospital.toml", "lab.toml", "hospital_bottom.onnx", "lab_bottom.onnx", "top.onnx", "top_sum.onnx"}) {
      fs::copy_file(kVertical / f, dir_ / f);
    }
    auto rc = fedmesh::testing::RunToCompletion({"/bin/bash", (kVertical / "split.sh").string(), "data"}, dir_,
                                                dir_ / "split.log", seconds(60));
    ASSERT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "split.log");
    hp_ = FreeLoopbackPort();
    lp_ = FreeLoopbackPort();
  }
  std::vector<std::string> Node(const std::string& who, std::vector<std::string> sets = {}) {
    std::vector<std::string> argv = {kBin + "fedmesh-node", "--config", who + ".toml", "--set",
                                     "split.listen=tcp://127.0.0.1:" + std::to_string(who == "hospital" ? hp_ : lp_),
                                     "--set",
                                     "split.peers=hospital@tcp://127.0.0.1:" + std::to_string(hp_) +
                                         ",lab@tcp://127.0.0.1:" + std::to_string(lp_)};
    for (auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    return argv;
  }
  // The hospital's metrics: 15 epochs, the last with test AUC >= 0.95 and accuracy >= 0.88,
  // and `field` in its line.
  void ExpectFifteenEpochsLearned(const std::string& field) {
    const auto lines = SplitLines(ReadWholeFile(dir_ / "run" / "hospital-metrics.jsonl"));
    ASSERT_EQ(lines.size(), 15u);
    const double auc = std::stod(lines.back().substr(lines.back().find("\"test_auc\":") + 11));
    const double acc = std::stod(lines.back().substr(lines.back().find("\"test_accuracy\":") + 16));
    EXPECT_GE(auc, 0.95) << lines.back();
    EXPECT_GE(acc, 0.88) << lines.back();
    EXPECT_NE(lines.back().find(field), std::string::npos) << lines.back();
  }
  int hp_ = 0, lp_ = 0;
};

TEST_F(SplitModeTest, HospitalAndLabTrainTheCutModelAndExportTheirParts) {
  ChildProcess* lab = Spawn("lab", Node("lab", {"split.share_part=true"}));  // as the example's lab.toml
  ChildProcess* hospital = Spawn("hospital", Node("hospital", {"train.epochs=15", "split.assemble=whole.onnx"}));
  ASSERT_EQ(hospital->WaitExit(seconds(180)), 0) << hospital->Log();
  ASSERT_EQ(lab->WaitExit(seconds(30)), 0) << lab->Log();
  // 396 patients are in both files (split.sh is deterministic); 25% held out per class.
  EXPECT_NE(hospital->Log().find("psi: 471 ids here; 396 rows shared by every party: 297 to train, 99 held out"),
            std::string::npos)
      << hospital->Log();
  EXPECT_NE(lab->Log().find("psi: 476 ids here, 396 shared with the label party"), std::string::npos) << lab->Log();
  ExpectFifteenEpochsLearned("\"microbatches\":4");
  // Each party's trained part as ONNX; a feature party has no top.
  for (const auto& [db, part, out] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"run/hospital.db", "bottom", "h.onnx"}, {"run/hospital.db", "top", "t.onnx"}, {"run/lab.db", "bottom", "l.onnx"}}) {
    auto rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-model", "export", "--db", db, "--part", part, "--out", out},
                                                dir_, dir_ / "export.log", seconds(60));
    ASSERT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "export.log");
    EXPECT_GT(fs::file_size(dir_ / out), 200u);
  }
  // The whole model, with the lab's consent: the 10 + 20 columns of a joined row in, one logit out.
  EXPECT_NE(hospital->Log().find("wrote the whole model to whole.onnx (input: 30 columns"), std::string::npos)
      << hospital->Log();
  auto inspect = fedmesh::testing::RunToCompletion({kBin + "fedmesh-model", "inspect", "whole.onnx"}, dir_,
                                                   dir_ / "inspect.log", seconds(60));
  ASSERT_TRUE(inspect.has_value() && *inspect == 0) << ReadWholeFile(dir_ / "inspect.log");
  EXPECT_NE(ReadWholeFile(dir_ / "inspect.log").find("x float32 [N,30]"), std::string::npos) << ReadWholeFile(dir_ / "inspect.log");
  auto rc = fedmesh::testing::RunToCompletion(
      {kBin + "fedmesh-model", "export", "--db", "run/lab.db", "--part", "top", "--out", "x.onnx"}, dir_,
      dir_ / "export.log", seconds(60));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 2);
  EXPECT_NE(ReadWholeFile(dir_ / "export.log").find("holds no top model"), std::string::npos);
}

// Staleness 1 with real processes: the hospital begins each step before the last one's
// gradients are back (draining at every checkpoint and epoch end), and the job learns as well.
TEST_F(SplitModeTest, StalenessOneRunsAheadAndStillLearns) {
  ChildProcess* lab = Spawn("lab", Node("lab"));
  ChildProcess* hospital =
      Spawn("hospital", Node("hospital", {"train.epochs=15", "split.staleness=1", "split.checkpoint_every=7"}));
  ASSERT_EQ(hospital->WaitExit(seconds(180)), 0) << hospital->Log();
  ASSERT_EQ(lab->WaitExit(seconds(30)), 0) << lab->Log();
  ExpectFifteenEpochsLearned("\"staleness\":1");
}

// The other cut: int8 activations and gradients (each side picks its own; the wire type
// travels in every message), the top over the sum of the two bottoms' 8 values, every
// message signed (fedmesh-node always signs); the job learns as well, and the whole model
// assembled with Add nodes takes the joined 30 columns.
TEST_F(SplitModeTest, Int8SummedCutLearnsAndAssemblesTheSum) {
  ChildProcess* lab = Spawn("lab", Node("lab", {"split.share_part=true", "split.compression=int8"}));
  ChildProcess* hospital =
      Spawn("hospital", Node("hospital", {"train.epochs=15", "split.compression=int8", "split.combine=sum",
                                          "split.top=top_sum.onnx", "split.assemble=whole.onnx"}));
  ASSERT_EQ(hospital->WaitExit(seconds(180)), 0) << hospital->Log();
  ASSERT_EQ(lab->WaitExit(seconds(30)), 0) << lab->Log();
  ExpectFifteenEpochsLearned("\"microbatches\":4");
  auto inspect = fedmesh::testing::RunToCompletion({kBin + "fedmesh-model", "inspect", "whole.onnx"}, dir_,
                                                   dir_ / "inspect.log", seconds(60));
  ASSERT_TRUE(inspect.has_value() && *inspect == 0) << ReadWholeFile(dir_ / "inspect.log");
  const std::string text = ReadWholeFile(dir_ / "inspect.log");
  EXPECT_NE(text.find("x float32 [N,30]"), std::string::npos) << text;
  EXPECT_NE(text.find("Add"), std::string::npos) << text;
  EXPECT_EQ(text.find("Concat"), std::string::npos) << text;
}

TEST_F(SplitModeTest, BadSplitSettingsExitTwoNamingTheKey) {
  struct Case {
    std::string who;
    std::vector<std::string> sets;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"lab", {"split.role="}, "[split] role: is required in split mode"},
      {"hospital", {"split.peers=lab@tcp://127.0.0.1:1,hospital@tcp://127.0.0.1:2"}, "lists the label party first"},
      {"lab", {"split.top=top.onnx"}, "[split] top: is for the label party only"},
      {"lab", {"data.label_column=diagnosis"}, "[data] label_column: is for the label party only"},
      {"hospital", {"split.top="}, "[split] top: is required on the label party"},
      {"hospital", {"data.missing=drop"}, "[data] missing: \"drop\" would leave rows out"},
      {"hospital", {"data.dataset=fashion-mnist"}, "split mode reads a table"},
      {"hospital", {"split.bottom=missing.onnx"}, "missing.onnx"},
      {"hospital", {"split.id_column=customer"}, "[split] id_column: column \"customer\" is not in the header"},
      {"hospital", {"split.bottom=lab_bottom.onnx"}, "takes 20 features per row; data/hospital.csv gives 10"},
      {"hospital", {"split.share_part=true"}, "[split] share_part: is for feature parties"},
      {"lab", {"split.assemble=whole.onnx"}, "[split] assemble: is for the label party only"},
      {"lab", {"split.staleness=1"}, "[split] staleness: is for the label party only"},
      {"hospital", {"split.staleness=2"}, "[split] staleness"},
      {"lab", {"split.combine=sum"}, "[split] combine: is for the label party only"},
      {"hospital", {"split.combine=mean"}, "[split] combine"},
      {"hospital", {"split.compression=int4"}, "[split] compression"},
      {"lab", {"split.security=aes"}, "[split] security"},
      {"hospital", {"split.combine=sum"}, "[split] combine = sum adds bottom outputs of one width: the top model (top.onnx) takes 16 inputs, the own bottom model gives 8"},
      {"hospital", {"split.peers=hospital@tcp://127.0.0.1:1,stranger@tcp://127.0.0.1:2"},
       "member stranger has no public key in keys/allow"},
  };
  for (const Case& c : cases) {
    auto rc = fedmesh::testing::RunToCompletion(Node(c.who, c.sets), dir_, dir_ / "bad.log", seconds(60));
    ASSERT_TRUE(rc.has_value());
    EXPECT_EQ(*rc, 2) << ReadWholeFile(dir_ / "bad.log");
    EXPECT_NE(ReadWholeFile(dir_ / "bad.log").find(c.expect), std::string::npos)
        << "want: " << c.expect << "\ngot: " << ReadWholeFile(dir_ / "bad.log");
    fs::remove(dir_ / "bad.log");
  }
}

TEST_F(SplitModeTest, ALabKilledAndRestartedResumesFromTheLastCheckpointAndTheJobFinishes) {
  const std::vector<std::string> common = {"train.batch=8", "split.microbatches=1", "split.timeout_ms=1000"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  ChildProcess* lab = Spawn("lab", Node("lab", with({"split.share_part=false"})));
  ChildProcess* hospital =
      Spawn("hospital", Node("hospital", with({"train.epochs=150", "split.assemble=whole.onnx"})));
  const fs::path metrics = dir_ / "run" / "hospital-metrics.jsonl";
  ASSERT_TRUE(WaitUntil([&] { return SplitLines(ReadWholeFile(metrics)).size() >= 3; }, seconds(60))) << hospital->Log();
  lab->Signal(SIGKILL);
  ASSERT_TRUE(lab->WaitExit(seconds(10)).has_value());
  const size_t lines_at_kill = SplitLines(ReadWholeFile(metrics)).size();
  ASSERT_LT(lines_at_kill, 150u) << "the job ended before the lab was killed";
  ChildProcess* again = Spawn("lab-again", Node("lab", with({"split.share_part=false"})));
  ASSERT_EQ(hospital->WaitExit(seconds(240)), 0) << hospital->Log();
  ASSERT_EQ(again->WaitExit(seconds(30)), 0) << again->Log();
  EXPECT_NE(again->Log().find("restarted with the checkpoint of step"), std::string::npos) << again->Log();
  EXPECT_NE(hospital->Log().find("every party is back at step"), std::string::npos) << hospital->Log();
  // The lab did not consent to share its part: no whole model, each part exports alone.
  EXPECT_NE(hospital->Log().find("not assembling the whole model: lab did not consent"), std::string::npos)
      << hospital->Log();
  EXPECT_FALSE(fs::exists(dir_ / "whole.onnx"));
  const auto lines = SplitLines(ReadWholeFile(metrics));
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("\"epoch\":150,"), std::string::npos) << lines.back();
  // The kill is one resume; a CI machine that stalls a party past the 1 s timeout can add
  // another (a recovery, not an error).
  const size_t at = lines.back().find("\"resumes\":");
  ASSERT_NE(at, std::string::npos) << lines.back();
  EXPECT_GE(std::stoi(lines.back().substr(at + 10)), 1) << lines.back();
  // 297 training rows in batches of 8: 37 steps an epoch (the last takes 9), every one taken.
  EXPECT_NE(lines.back().find("\"steps\":5550,"), std::string::npos) << lines.back();
  const double auc = std::stod(lines.back().substr(lines.back().find("\"test_auc\":") + 11));
  EXPECT_GE(auc, 0.95) << lines.back();
  // A finished job's store is not run again by mistake.
  auto rc = fedmesh::testing::RunToCompletion(Node("lab", with({})), dir_, dir_ / "rerun.log", seconds(30));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 2);
  EXPECT_NE(ReadWholeFile(dir_ / "rerun.log").find("holds a finished split job"), std::string::npos);
}

// Over AES-256-GCM sealed links ([split] security): the restarted hospital is a new
// incarnation, and the lab's link to it is agreed anew.
TEST_F(SplitModeTest, AHospitalKilledAndRestartedResumesTheJobWithTheLabStillWaiting) {
  const std::vector<std::string> common = {"train.batch=8", "split.microbatches=1", "split.timeout_ms=1000",
                                           "split.security=aes-256-gcm"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  ChildProcess* lab = Spawn("lab", Node("lab", with({})));
  ChildProcess* hospital = Spawn("hospital", Node("hospital", with({"train.epochs=150"})));
  const fs::path metrics = dir_ / "run" / "hospital-metrics.jsonl";
  ASSERT_TRUE(WaitUntil([&] { return SplitLines(ReadWholeFile(metrics)).size() >= 3; }, seconds(60))) << hospital->Log();
  hospital->Signal(SIGKILL);
  ASSERT_TRUE(hospital->WaitExit(seconds(10)).has_value());
  ChildProcess* again = Spawn("hospital-again", Node("hospital", with({"train.epochs=150"})));
  ASSERT_EQ(again->WaitExit(seconds(240)), 0) << again->Log();
  ASSERT_EQ(lab->WaitExit(seconds(30)), 0) << lab->Log();
  EXPECT_NE(again->Log().find("resuming from the checkpoint of step"), std::string::npos) << again->Log();
  EXPECT_NE(lab->Log().find("back at step"), std::string::npos) << lab->Log();
  EXPECT_NE(lab->Log().find("feature party 1 of 2 on tcp://127.0.0.1:" + std::to_string(lp_) +
                            " (AES-256-GCM sealed links)"),
            std::string::npos)
      << lab->Log();
  const auto lines = SplitLines(ReadWholeFile(metrics));
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("\"epoch\":150,"), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("\"steps\":5550,"), std::string::npos) << lines.back();
  const double auc = std::stod(lines.back().substr(lines.back().find("\"test_auc\":") + 11));
  EXPECT_GE(auc, 0.95) << lines.back();
}

// Parties on different [split] security settings never hear each other: the job fails at
// the start, and the logs say the connections offered another mechanism.
TEST_F(SplitModeTest, PartiesOnDifferentSecuritiesAreToldSo) {
  ChildProcess* lab = Spawn("lab", Node("lab", {"split.timeout_ms=2000", "split.rejoin_timeout_ms=100"}));
  ChildProcess* hospital = Spawn("hospital", Node("hospital", {"split.security=aes-256-gcm", "split.timeout_ms=2000",
                                                               "split.rejoin_timeout_ms=100"}));
  const auto rh = hospital->WaitExit(seconds(60));
  const auto rl = lab->WaitExit(seconds(60));
  ASSERT_TRUE(rh.has_value() && rl.has_value());
  EXPECT_EQ(*rh, 1) << hospital->Log();
  EXPECT_EQ(*rl, 1) << lab->Log();
  // libzmq tells whichever end reads the other's greeting first: nearly always both.
  EXPECT_TRUE(hospital->Log().find("offered another security mechanism than this member's (aes-256-gcm)") !=
                  std::string::npos ||
              lab->Log().find("offered another security mechanism than this member's (curve)") != std::string::npos)
      << hospital->Log() << "\n" << lab->Log();
}

TEST_F(SplitModeTest, ALabThatNeverComesBackFailsTheJobWithAReason) {
  ChildProcess* lab = Spawn("lab", Node("lab"));
  ChildProcess* hospital = Spawn("hospital", Node("hospital", {"train.epochs=100000", "train.batch=8",
                                                               "split.timeout_ms=1000", "split.rejoin_timeout_ms=2000",
                                                               "split.microbatches=1"}));
  ASSERT_TRUE(WaitUntil([&] { return SplitLines(ReadWholeFile(dir_ / "run" / "hospital-metrics.jsonl")).size() >= 1; },
                        seconds(60)))
      << hospital->Log();
  lab->Signal(SIGKILL);
  const auto rc = hospital->WaitExit(seconds(30));
  ASSERT_TRUE(rc.has_value()) << "the hospital hangs";
  EXPECT_EQ(*rc, 1);
  EXPECT_NE(hospital->Log().find("did not come back within 2000 ms ([split] rejoin_timeout_ms)"), std::string::npos)
      << hospital->Log();
}

}  // namespace
}  // namespace fedmesh
