// fedmesh-psi (issue 22 item 1): two real processes align their tables over CurveZMQ (and
// AES-256-GCM sealed links) on loopback. Each writes its own rows of the intersection, with the same ids in the same
// order on both sides, in an order that is not the ids' sort order; bad tables, columns and
// groups exit 2 naming the file, line and column; a peer that never comes is exit 1.
#include <algorithm>
#include <set>

#include "core/data/csv_table.h"
#include "tests/node/federation_fixture.h"

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture's helpers

class PsiCliTest : public FederationTest {
 protected:
  // A table of `ids` with a data column derived from the id, so rows can be checked whole.
  void WriteTable(const std::string& name, const std::vector<int>& ids, const std::string& extra = "") {
    std::ofstream f(dir_ / name);
    f << "customer,balance\n";
    for (int id : ids) f << "C" << id << "," << id * 3 << "\n";
    f << extra;
  }
  std::vector<std::string> Args(int site, const std::string& data, const std::string& out) {
    return {kBin + "fedmesh-psi", "--key", "keys/site-" + std::to_string(site) + ".key", "--allow", "keys/allow",
            "--group", group_, "--listen", "tcp://127.0.0.1:" + std::to_string(ports_[site - 1]), "--data", data,
            "--id-column", "customer", "--out", out, "--timeout-ms", "20000"};
  }
  void SetUp() override {
    FederationTest::SetUp();
    if (IsSkipped()) return;
    ports_ = {FreeLoopbackPort(), FreeLoopbackPort()};
    group_ = "site-1@tcp://127.0.0.1:" + std::to_string(ports_[0]) + ",site-2@tcp://127.0.0.1:" +
             std::to_string(ports_[1]);
  }
  // The ids of both parties' outputs (bank.aligned.csv, insurer.aligned.csv), which must be
  // the same in the same order; empty when either cannot be read.
  std::vector<std::string> AlignedIds() {
    auto ta = ReadCsvTable((dir_ / "bank.aligned.csv").string());
    auto tb = ReadCsvTable((dir_ / "insurer.aligned.csv").string());
    if (!ta.ok() || !tb.ok()) {
      ADD_FAILURE() << "an aligned table cannot be read";
      return {};
    }
    auto ia = CsvColumn(*ta, "customer", true), ib = CsvColumn(*tb, "customer", true);
    if (!ia.ok() || !ib.ok()) {
      ADD_FAILURE() << "an aligned table has no id column";
      return {};
    }
    EXPECT_EQ(*ia, *ib);
    return *ia;
  }
  std::vector<int> ports_;
  std::string group_;
};

TEST_F(PsiCliTest, TwoPartiesWriteTheSameRecordsInTheSameOrder) {
  std::vector<int> a, b;
  for (int i = 0; i < 1000; ++i) a.push_back(i);
  for (int i = 300; i < 1500; ++i) b.push_back(i);
  std::reverse(b.begin(), b.end());
  WriteTable("bank.csv", a);
  WriteTable("insurer.csv", b);
  ChildProcess* p1 = Spawn("psi-1", Args(1, "bank.csv", "bank.aligned.csv"));
  ChildProcess* p2 = Spawn("psi-2", Args(2, "insurer.csv", "insurer.aligned.csv"));
  ASSERT_EQ(p1->WaitExit(seconds(60)), 0) << p1->Log();
  ASSERT_EQ(p2->WaitExit(seconds(60)), 0) << p2->Log();
  EXPECT_NE(p1->Log().find("1000 ids here, 1200 at site-2, 700 in common"), std::string::npos) << p1->Log();
  EXPECT_NE(p2->Log().find("1200 ids here, 1000 at site-1, 700 in common"), std::string::npos) << p2->Log();
  const std::vector<std::string> ia = AlignedIds();
  ASSERT_EQ(ia.size(), 700u);
  auto ta = ReadCsvTable((dir_ / "bank.aligned.csv").string());
  ASSERT_TRUE(ta.ok());
  std::set<std::string> want;
  for (int i = 300; i < 1000; ++i) want.insert("C" + std::to_string(i));
  EXPECT_EQ(std::set<std::string>(ia.begin(), ia.end()), want);
  EXPECT_FALSE(std::is_sorted(ia.begin(), ia.end()));
  // Whole rows, as each party wrote them.
  for (size_t k = 0; k < ia.size(); ++k) {
    EXPECT_EQ(ta->rows[k], ia[k] + "," + std::to_string(std::stoi(ia[k].substr(1)) * 3));
  }
}

TEST_F(PsiCliTest, BadDataAndArgumentsExitTwoNamingTheFileLineAndColumn) {
  WriteTable("dup.csv", {1, 2, 3, 2});
  WriteTable("ragged.csv", {1, 2}, "C9\n");
  WriteTable("ok.csv", {1, 2});
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {Args(1, "dup.csv", "o.csv"), "dup.csv line 5: column \"customer\" value \"C2\" appears again (first on line 3)"},
      {Args(1, "ragged.csv", "o.csv"), "ragged.csv line 4: has 1 cells but the header names 2 columns"},
      {Args(1, "missing.csv", "o.csv"), "missing.csv does not exist"},
  };
  auto no_column = Args(1, "ok.csv", "o.csv");
  no_column[12] = "id";
  cases.push_back({no_column, "column \"id\" is not in the header of ok.csv; available columns: customer, balance"});
  auto stranger = Args(1, "ok.csv", "o.csv");
  stranger[6] = "site-1@tcp://127.0.0.1:1,site-9@tcp://127.0.0.1:2";
  cases.push_back({stranger, "member site-9 has no public key in keys/allow"});
  auto bad_security = Args(1, "ok.csv", "o.csv");
  bad_security.insert(bad_security.end(), {"--security", "aes"});
  cases.push_back({bad_security, "--security: aes not in {curve,aes-256-gcm}"});
  auto not_me = Args(1, "ok.csv", "o.csv");
  not_me[6] = "site-2@tcp://127.0.0.1:1,site-3@tcp://127.0.0.1:2";
  cases.push_back({not_me, "does not list this site (site-1)"});
  for (const Case& c : cases) {
    auto rc = fedmesh::testing::RunToCompletion(c.args, dir_, dir_ / "bad.log", seconds(30));
    ASSERT_TRUE(rc.has_value());
    EXPECT_EQ(*rc, 2) << ReadWholeFile(dir_ / "bad.log");
    EXPECT_NE(ReadWholeFile(dir_ / "bad.log").find(c.expect), std::string::npos)
        << "want: " << c.expect << "\ngot: " << ReadWholeFile(dir_ / "bad.log");
    fs::remove(dir_ / "bad.log");
  }
  EXPECT_FALSE(fs::exists(dir_ / "o.csv"));
}

// The same alignment over AES-256-GCM sealed links; a peer on the other security is never
// heard, and the log says why rather than only that it was silent.
TEST_F(PsiCliTest, SealedLinksAlignAlikeAndAnotherSecurityIsNamed) {
  std::vector<int> a, b;
  for (int i = 0; i < 200; ++i) a.push_back(i);
  for (int i = 150; i < 400; ++i) b.push_back(i);
  WriteTable("bank.csv", a);
  WriteTable("insurer.csv", b);
  auto sealed = [&](int site, const std::string& data, const std::string& out) {
    auto args = Args(site, data, out);
    args.insert(args.end(), {"--security", "aes-256-gcm"});
    return args;
  };
  ChildProcess* p1 = Spawn("psi-1", sealed(1, "bank.csv", "bank.aligned.csv"));
  ChildProcess* p2 = Spawn("psi-2", sealed(2, "insurer.csv", "insurer.aligned.csv"));
  ASSERT_EQ(p1->WaitExit(seconds(60)), 0) << p1->Log();
  ASSERT_EQ(p2->WaitExit(seconds(60)), 0) << p2->Log();
  EXPECT_NE(p1->Log().find("200 ids here, 250 at site-2, 50 in common"), std::string::npos) << p1->Log();
  EXPECT_EQ(AlignedIds().size(), 50u);

  auto curve = Args(1, "bank.csv", "c1.csv");
  curve.back() = "2000";  // --timeout-ms
  auto gcm = sealed(2, "insurer.csv", "c2.csv");
  gcm[gcm.size() - 3] = "2000";
  ChildProcess* c1 = Spawn("psi-curve", curve);
  ChildProcess* c2 = Spawn("psi-gcm", gcm);
  EXPECT_EQ(c1->WaitExit(seconds(30)), 1) << c1->Log();
  EXPECT_EQ(c2->WaitExit(seconds(30)), 1) << c2->Log();
  // libzmq tells whichever end reads the other's greeting first: nearly always both.
  const std::string why = "offered another security mechanism than this member's";
  EXPECT_TRUE(c1->Log().find(why) != std::string::npos || c2->Log().find(why) != std::string::npos)
      << c1->Log() << "\n" << c2->Log();
  // Each end stops saying why: it heard nothing in time, or (when it read the other's refusal
  // first) its connection was refused.
  for (ChildProcess* p : {c1, c2}) {
    const std::string log = p->Log();
    EXPECT_TRUE(log.find("heard nothing from rank") != std::string::npos ||
                log.find("refused this member's connection") != std::string::npos)
        << log;
  }
  EXPECT_FALSE(fs::exists(dir_ / "c1.csv"));
  EXPECT_FALSE(fs::exists(dir_ / "c2.csv"));
}

// --out is written after the exchange, when the peer has its result already: one that would
// overwrite --data or cannot be written is refused (exit 2, naming --out) before anything
// is sent, as are a --max-ids below the table and a negative --order-seed, named by flag.
TEST_F(PsiCliTest, OutAndLimitsAreCheckedBeforeTheExchange) {
  WriteTable("bank.csv", {1, 2, 3});
  const std::string table = ReadWholeFile(dir_ / "bank.csv");
  fs::create_symlink("bank.csv", dir_ / "link.csv");
  fs::create_directories(dir_ / "folder");
  struct Case {
    std::string out;
    std::vector<std::string> extra;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"bank.csv", {}, "--out bank.csv is --data bank.csv: writing the intersection would overwrite the input table"},
      {"./bank.csv", {}, "--out ./bank.csv is --data bank.csv"},
      {"link.csv", {}, "--out link.csv is --data bank.csv"},
      {"/nonexistent/x.csv", {}, "--out /nonexistent/x.csv: folder /nonexistent does not exist"},
      {"folder", {}, "--out folder is a directory"},
      {"o.csv", {"--max-ids", "2"}, "--max-ids: bank.csv holds 3 ids, over the limit of 2; raise --max-ids"},
      {"o.csv", {"--order-seed", "-1"}, "--order-seed: must be 0 or more, not -1"},
      {"o.csv", {"--max-ids=-5"}, "--max-ids: must be 0 or more, not -5"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.out + " " + (c.extra.empty() ? "" : c.extra[0]));
    auto args = Args(1, "bank.csv", c.out);
    args.back() = "1500";  // --timeout-ms: were the exchange tried, it would fail with exit 1
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    auto rc = fedmesh::testing::RunToCompletion(args, dir_, dir_ / "out.log", seconds(30));
    ASSERT_TRUE(rc.has_value());
    const std::string log = ReadWholeFile(dir_ / "out.log");
    EXPECT_EQ(*rc, 2) << log;
    EXPECT_NE(log.find(c.expect), std::string::npos) << "want: " << c.expect << "\ngot: " << log;
    EXPECT_EQ(log.find("heard nothing"), std::string::npos) << log;
    EXPECT_EQ(log.find("PsiOptions"), std::string::npos) << log;
    fs::remove(dir_ / "out.log");
  }
  EXPECT_EQ(ReadWholeFile(dir_ / "bank.csv"), table);
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.csv"));
  EXPECT_FALSE(fs::exists(dir_ / "o.csv"));
}

TEST_F(PsiCliTest, APeerThatNeverComesIsExitOneAndNoOutput) {
  WriteTable("ok.csv", {1, 2});
  auto args = Args(1, "ok.csv", "o.csv");
  args.back() = "1500";  // --timeout-ms
  auto rc = fedmesh::testing::RunToCompletion(args, dir_, dir_ / "alone.log", seconds(30));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 1);
  EXPECT_NE(ReadWholeFile(dir_ / "alone.log").find("heard nothing from rank 1 for 1500 ms"), std::string::npos)
      << ReadWholeFile(dir_ / "alone.log");
  EXPECT_FALSE(fs::exists(dir_ / "o.csv"));
}

}  // namespace
}  // namespace fedmesh
