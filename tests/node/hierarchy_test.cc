// Hierarchical aggregation (issue 24, aggregator/upstream_link.h): a top fedmesh-aggregator,
// two regional fedmesh-aggregators with [upstream], three fedmesh-node sites each, all real
// processes on loopback with CurveZMQ. The top's final model must equal what one flat
// aggregator over the same six sites computes with the same seeds and data (FedAvg weighted
// by examples is associative), also when a region is SIGKILLed and restarted mid-run, and
// with secure aggregation at the region level.
#include <algorithm>
#include <cmath>
#include <fstream>

#include "tests/node/federation_fixture.h"

namespace fedmesh::federation_testing {
namespace {

class HierarchyTest : public FederationTest {
 protected:
  void SetUp() override {
    FederationTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    for (const char* name : {"site-5", "site-6", "top", "region-a", "region-b", "agg-a", "agg-b"}) {
      ASSERT_TRUE(GenKey(name)) << name << ":\n" << ReadWholeFile(dir_ / "keygen.log");
    }
    auto allow = [&](const std::string& dir, const std::vector<std::string>& names) {
      fs::create_directories(dir_ / "keys" / dir);
      for (const std::string& n : names) {
        fs::copy_file(dir_ / "keys" / (n + ".pub"), dir_ / "keys" / dir / (n + ".pub"));
      }
    };
    allow("allow-flat", {"site-1", "site-2", "site-3", "site-4", "site-5", "site-6"});
    allow("allow-top", {"region-a", "region-b"});
    allow("allow-a", {"site-1", "site-2", "site-3"});
    allow("allow-b", {"site-4", "site-5", "site-6"});
  }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }

  // An aggregator config: `key` its key, `allow` its allow dir, `clients` per round (all).
  std::string AggregatorToml(const std::string& federation, const std::string& name,
                             const std::string& key, const std::string& allow, int clients,
                             const std::string& extra) {
    return "[federation]\nid = \"" + federation + "\"\n[aggregator]\nlisten = \"tcp://127.0.0.1:*\"\n"
           "key = \"keys/" + key + ".key\"\nallow = \"keys/" + allow + "\"\ndb = \"run/" + name +
           ".db\"\nmetrics = \"run/" + name + ".jsonl\"\nheartbeat_ms = 1000\n"
           "[rounds]\ntotal = 5\nclients_per_round = " + std::to_string(clients) +
           "\nmin_clients = " + std::to_string(clients) +
           "\ntimeout_s = 120\nstrategy = \"fedavg\"\n"
           "[train]\nepochs = 1\nbatch = 32\nlr = 0.05\n[model]\nname = \"logreg\"\nseed = 42\n" + extra;
  }

  // Starts fedmesh-aggregator with `config`; returns its endpoint ("" on failure).
  std::string StartAggregatorWith(const std::string& name, const std::string& config,
                                  ChildProcess** child, const std::vector<std::string>& sets = {}) {
    std::vector<std::string> argv = {kBin + "fedmesh-aggregator", "--config", config};
    for (const std::string& set : sets) argv.insert(argv.end(), {"--set", set});
    *child = Spawn(name, argv);
    if (*child == nullptr) return "";
    static const std::regex kListening(R"(listening on (tcp://127\.0\.0\.1:[0-9]+)\n)");
    std::string endpoint;
    WaitUntil(
        [&] {
          std::smatch m;
          const std::string log = (*child)->Log();
          if (std::regex_search(log, m, kListening)) endpoint = m[1];
          return !endpoint.empty() || !(*child)->Running();
        },
        seconds(60));
    EXPECT_FALSE(endpoint.empty()) << name << " did not print its endpoint:\n" << (*child)->Log();
    return endpoint;
  }

  // Site i (1..6) of federation `federation` at `endpoint` (key `server_key`), its store
  // run/<prefix>site-i.db. `partition`: "dirichlet" (unequal sites) or "iid".
  ChildProcess* StartSite(int i, const std::string& federation, const std::string& endpoint,
                          const std::string& server_key, const std::string& prefix,
                          const std::string& partition, const std::string& secagg_allow,
                          const std::string& model = "logreg") {
    const std::string id = "site-" + std::to_string(i);
    const std::string file = prefix + id + ".toml";
    Write(file, "[federation]\nid = \"" + federation + "\"\n[node]\nid = \"" + id + "\"\nkey = \"keys/" +
                    id + ".key\"\ndb = \"run/" + prefix + id + ".db\"\n[aggregator]\nendpoint = \"" +
                    endpoint + "\"\npublic_key = \"keys/" + server_key + ".pub\"\n"
                    "[data]\ndataset = \"fashion-mnist\"\npartition = \"" + partition +
                    "\"\nalpha = 0.5\nnum_partitions = 6\nindex = " + std::to_string(i - 1) +
                    "\nseed = 7\n[model]\nname = \"" + model + "\"\nseed = 42\n[train]\nthreads = 1\n" +
                    (secagg_allow.empty() ? "" : "[secagg]\nallow = \"keys/" + secagg_allow + "\"\n"));
    return Spawn(prefix + id, {kBin + "fedmesh-node", "--config", file});
  }

  std::vector<float> LatestModel(const std::string& db) {
    auto store = AggregatorStore::Open((dir_ / "run" / db).string());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return {};
    auto latest = (*store)->LatestModel();
    EXPECT_TRUE(latest.ok() && latest->has_value());
    return latest.ok() && latest->has_value() ? (*latest)->params : std::vector<float>{};
  }

  // One flat aggregator over the six sites; returns its final model.
  std::vector<float> RunFlat(const std::string& partition, const std::string& secagg) {
    Write("flat.toml", AggregatorToml("hier", "flat", "top", "allow-flat", 6,
                                      "[eval]\ndataset = \"fashion-mnist\"\n" + secagg));
    ChildProcess* top = nullptr;
    const std::string ep = StartAggregatorWith("flat", "flat.toml", &top);
    if (ep.empty()) return {};
    std::vector<ChildProcess*> sites;
    for (int i = 1; i <= 6; ++i) {
      sites.push_back(StartSite(i, "hier", ep, "top", "flat-", partition,
                                secagg.empty() ? "" : "allow-flat"));
    }
    const auto rc = top->WaitExit(seconds(240));
    EXPECT_EQ(rc, std::optional<int>(0)) << "the flat aggregator did not finish:\n" << top->Log();
    for (ChildProcess* s : sites) s->Kill();
    return LatestModel("flat.db");
  }

  // The top, two regions of three sites; `kill_region_after` > 0: region-a is SIGKILLed
  // once the top has closed that many rounds, and started again. Returns the top's model.
  std::vector<float> RunHierarchy(const std::string& partition, const std::string& secagg,
                                  int kill_region_after) {
    Write("top.toml", AggregatorToml("hier", "top", "top", "allow-top", 2,
                                     "[eval]\ndataset = \"fashion-mnist\"\n"));
    ChildProcess* top = nullptr;
    const std::string top_ep = StartAggregatorWith("top", "top.toml", &top);
    if (top_ep.empty()) return {};
    std::map<std::string, std::string> region_ep;
    ChildProcess* region_a = nullptr;
    for (const std::string r : {"a", "b"}) {
      Write("region-" + r + ".toml",
            AggregatorToml("region-" + r, "region-" + r, "agg-" + r, "allow-" + r, 3,
                           "[eval]\ndataset = \"\"\n" + secagg + "[upstream]\nendpoint = \"" + top_ep +
                               "\"\npublic_key = \"keys/top.pub\"\nkey = \"keys/region-" + r +
                               ".key\"\nfederation = \"hier\"\n"));
      ChildProcess* child = nullptr;
      region_ep[r] = StartAggregatorWith("region-" + r, "region-" + r + ".toml", &child);
      if (region_ep[r].empty()) return {};
      if (r == "a") region_a = child;
    }
    std::vector<ChildProcess*> sites;
    for (int i = 1; i <= 6; ++i) {
      const std::string r = i <= 3 ? "a" : "b";
      sites.push_back(StartSite(i, "region-" + r, region_ep[r], "agg-" + r, "hier-", partition,
                                secagg.empty() ? "" : "allow-" + r));
    }
    if (kill_region_after > 0) {
      const fs::path metrics = dir_ / "run" / "top.jsonl";
      EXPECT_TRUE(WaitUntil(
          [&] { return SplitLines(ReadWholeFile(metrics)).size() >= static_cast<size_t>(kill_region_after); },
          seconds(180)))
          << "the top did not close " << kill_region_after << " rounds:\n" << top->Log();
      region_a->Kill();
      // Same config, same store, same port: its sites reconnect to it.
      std::string config = ReadWholeFile(dir_ / "region-a.toml");
      config.replace(config.find("tcp://127.0.0.1:*"), 17, region_ep["a"]);
      Write("region-a.toml", config);
      ChildProcess* again = nullptr;
      EXPECT_EQ(StartAggregatorWith("region-a-restarted", "region-a.toml", &again), region_ep["a"]);
    }
    const auto rc = top->WaitExit(seconds(300));
    EXPECT_EQ(rc, std::optional<int>(0)) << "the top did not finish:\n" << top->Log();
    for (ChildProcess* s : sites) s->Kill();
    return LatestModel("top.db");
  }

  static double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
    return d;
  }
};

TEST_F(HierarchyTest, TwoRegionsEqualTheFlatFederationAlsoWhenARegionIsKilled) {
  const std::vector<float> flat = RunFlat("dirichlet", "");
  const std::vector<float> hier = RunHierarchy("dirichlet", "", /*kill_region_after=*/2);
  ASSERT_EQ(flat.size(), hier.size());
  ASSERT_FALSE(flat.empty());
  // Every round's example count at the top is the regions' sites' sum, as flat.
  const auto top_lines = SplitLines(ReadWholeFile(dir_ / "run" / "top.jsonl"));
  const auto flat_lines = SplitLines(ReadWholeFile(dir_ / "run" / "flat.jsonl"));
  ASSERT_EQ(top_lines.size(), 5u);
  ASSERT_EQ(flat_lines.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(JsonNumber(top_lines[i], "num_examples"), JsonNumber(flat_lines[i], "num_examples"));
    EXPECT_EQ(JsonNumber(top_lines[i], "received"), std::optional<double>(2)) << top_lines[i];
  }
  EXPECT_GT(JsonNumber(top_lines[4], "test_accuracy").value_or(0), 0.7) << top_lines[4];
  const double diff = MaxAbsDiff(flat, hier);
  std::cout << "max |hierarchical - flat| over " << flat.size() << " parameters: " << diff << "\n";
  EXPECT_LT(diff, 1e-5);
  // Not equal by doing nothing: training moved the model.
  auto store = AggregatorStore::Open((dir_ / "run" / "flat.db").string());
  ASSERT_TRUE(store.ok());
  auto first = (*store)->LoadModel(0);
  ASSERT_TRUE(first.ok());
  EXPECT_GT(MaxAbsDiff(*first, flat), 0.05);
  // The region really was killed and resumed from its store.
  EXPECT_NE(ReadWholeFile(dir_ / "region-a-restarted.log").find("upstream: registered"), std::string::npos);
}

TEST_F(HierarchyTest, SecureAggregationAtTheRegionsEqualsTheFlatSecureFederation) {
  const std::string secagg = "[secagg]\nenabled = true\nclip = 10.0\nbits = 24\n";
  const std::vector<float> flat = RunFlat("iid", secagg);
  const std::vector<float> hier = RunHierarchy("iid", secagg, 0);
  ASSERT_EQ(flat.size(), hier.size());
  ASSERT_FALSE(flat.empty());
  const double diff = MaxAbsDiff(flat, hier);
  std::cout << "max |hierarchical - flat| under secure aggregation: " << diff << "\n";
  // Fixed-point sums of 3 + 3 versus 6 inputs: the same up to the encoding's resolution.
  EXPECT_LT(diff, 1e-4);
  const auto top_lines = SplitLines(ReadWholeFile(dir_ / "run" / "top.jsonl"));
  ASSERT_EQ(top_lines.size(), 5u);
  EXPECT_GT(JsonNumber(top_lines[4], "test_accuracy").value_or(0), 0.7) << top_lines[4];
  for (const char* r : {"region-a", "region-b"}) {
    EXPECT_EQ(SplitLines(ReadWholeFile(dir_ / "run" / (std::string(r) + ".jsonl"))).size(), 5u) << r;
  }
}

TEST_F(HierarchyTest, ARegionWhoseRoundFailsRefusesTheTaskAndServesTheNext) {
  Write("top.toml", AggregatorToml("hier", "top", "top", "allow-top", 2, "[eval]\ndataset = \"\"\n"));
  ChildProcess* top = nullptr;
  const std::string top_ep =
      // No back-off at the top: region a is to be asked again in round 2 after failing round 1.
      StartAggregatorWith("top", "top.toml", &top,
                          {"rounds.total=2", "rounds.min_clients=1", "rounds.failure_backoff_max_rounds=0"});
  ASSERT_FALSE(top_ep.empty());
  std::map<std::string, std::string> ep;
  ChildProcess* region_a = nullptr;
  for (const std::string r : {"a", "b"}) {
    Write("region-" + r + ".toml",
          AggregatorToml("region-" + r, "region-" + r, "agg-" + r, "allow-" + r, r == "a" ? 2 : 3,
                         "[eval]\ndataset = \"\"\n[upstream]\nendpoint = \"" + top_ep +
                             "\"\npublic_key = \"keys/top.pub\"\nkey = \"keys/region-" + r +
                             ".key\"\nfederation = \"hier\"\n"));
    ChildProcess* child = nullptr;
    ep[r] = StartAggregatorWith("region-" + r, "region-" + r + ".toml", &child,
                                r == "a" ? std::vector<std::string>{"rounds.max_retries=0"}
                                         : std::vector<std::string>{});
    ASSERT_FALSE(ep[r].empty());
    if (r == "a") region_a = child;
  }
  // Region a's two sites were set up with another model: both refuse every task, so each of
  // its rounds fails below quorum, and with max_retries 0 it is given up at once.
  for (int i : {1, 2, 4, 5, 6}) {
    const std::string r = i <= 3 ? "a" : "b";
    ASSERT_NE(StartSite(i, "region-" + r, ep[r], "agg-" + r, "hier-", "iid", "", r == "a" ? "mlp" : "logreg"),
              nullptr);
  }
  const auto rc = top->WaitExit(seconds(120));
  ASSERT_EQ(rc, std::optional<int>(0)) << top->Log();
  const auto lines = SplitLines(ReadWholeFile(dir_ / "run" / "top.jsonl"));
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& line : lines) {
    EXPECT_EQ(JsonNumber(line, "received"), std::optional<double>(1)) << line;  // region-b only
    EXPECT_LT(JsonNumber(line, "wall_s").value_or(999), 60) << line;  // not the 120 s deadline
  }
  EXPECT_TRUE(region_a->Running());  // gave the rounds up, did not die
  const std::string log = region_a->Log();
  EXPECT_NE(log.find("round 1 gave up after attempt 1"), std::string::npos) << log;
  EXPECT_NE(log.find("round 2 gave up after attempt 1"), std::string::npos) << log;
  EXPECT_NE(top->Log().find("the regional round failed after 1 attempt(s)"), std::string::npos) << top->Log();
}

}  // namespace
}  // namespace fedmesh::federation_testing
