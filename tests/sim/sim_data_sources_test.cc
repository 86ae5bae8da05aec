// fedmesh-sim with fedmesh-node's data sources and federated evaluation (issue 19, item 5):
// a CSV federation with a text label and a categorical column configured through the same
// [data] keys as a node, the central test set held out of it, and the round engine's
// federated evaluation on the clients' own held-out rows, recorded like
// fedmesh-aggregator's. Every run here is a few seconds on two cores and needs no
// installed dataset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/env.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/trainer.h"
#include "sim/sim_config.h"
#include "sim/sim_data.h"
#include "sim/simulation.h"
#include "tests/node/process_harness.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return (fs::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()))).string();
}

// 3,000 rows: two numeric features, a text category and a text label. The label is "yes"
// when 1.5 x a - b + (red: 1, green: 0, blue: -1) + N(0, 0.3^2) > 0: a logistic
// regression on (a, b, one-hot colour) can score about 0.95, one without the colour
// noticeably less.
std::string WriteCsv() {
  static const std::string path = [] {
    const std::string p = TempPath("sim_source.csv");
    std::ofstream f(p);
    f << "a,colour,b,outcome\n";
    Rng rng(7);
    const char* colours[] = {"red", "green", "blue"};
    for (int i = 0; i < 3000; ++i) {
      const double a = rng.Normal(), b = rng.Normal();
      const int c = static_cast<int>(rng.UniformInt(3));
      const double z = 1.5 * a - b + (1 - c) + rng.Normal(0, 0.3);
      char row[128];
      std::snprintf(row, sizeof row, "%.4f,%s,%.4f,%s\n", a, colours[c], b, z > 0 ? "yes" : "no");
      f << row;
    }
    return p;
  }();
  return path;
}

// The CSV federation, configured with --set as a user would: 8 clients, all in every round.
std::vector<std::string> CsvSets() {
  return {"sim.model=logreg",
          "sim.clients=8",
          "sim.clients_per_round=8",
          "sim.rounds=6",
          "sim.threads=2",
          "sim.partition=iid",
          "data.dataset=csv:" + WriteCsv(),
          "data.label_column=outcome",
          "data.label_values=no,yes",
          "data.categorical=colour",
          "train.lr=0.1"};
}

SimOptions CsvOptions(std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = CsvSets();
  sets.insert(sets.end(), extra.begin(), extra.end());
  auto o = LoadSimConfig("", sets);
  EXPECT_TRUE(o.ok()) << o.status().ToString();
  return o.ok() ? *o : SimOptions{};
}

// The numeric value of "key" in one flat JSON line; nullopt when absent.
std::optional<double> JsonNumber(const std::string& line, const std::string& key) {
  const std::string pat = "\"" + key + "\":";
  const size_t at = line.find(pat);
  if (at == std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(line.c_str() + at + pat.size(), &end);
  if (end == line.c_str() + at + pat.size()) return std::nullopt;
  return v;
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

bool IsEvalLine(const std::string& l) {
  return l.find("\"federated_eval\":true") != std::string::npos;
}
bool IsTotalLine(const std::string& l) { return l.find("\"site\":\"*\"") != std::string::npos; }

TEST(SimDataSources, CsvWithTextLabelAndCategoryLearnsOnAHeldOutCentralTestSet) {
  const SimOptions o = CsvOptions();
  auto data = LoadSimData(o);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  // a, b and three one-hot colour columns; two classes from the label's two strings.
  EXPECT_EQ(data->train.sample_shape, std::vector<int>{5});
  EXPECT_EQ(data->train.num_classes, 2);
  // [data] test_fraction (0.2) of the rows per class is the central test set; clients get
  // the rest and nothing else.
  EXPECT_EQ(data->test.size(), 600u);
  size_t rows = 0;
  for (const auto& shard : data->shards) rows += shard.size();
  EXPECT_EQ(rows, 2400u);
  EXPECT_TRUE(data->shard_test.empty());  // no federated evaluation: clients train on all

  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rounds.size(), 6u);
  ASSERT_TRUE(r->rounds.back().test_accuracy.has_value());
  // The stated target: >= 0.90 on the 600 held-out rows (about 0.95 when this was written).
  EXPECT_GE(*r->rounds.back().test_accuracy, 0.90);
  EXPECT_TRUE(r->federated_evals.empty());

  // Without the colour column the same federation does worse: the categorical column is
  // read and used, not dropped.
  auto plain = RunSimulation(CsvOptions({"data.features=a,b", "data.categorical="}));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  std::printf("[ info ] csv federation: accuracy %.4f with the colour column, %.4f without\n",
              *r->rounds.back().test_accuracy, *plain->rounds.back().test_accuracy);
  EXPECT_LT(*plain->rounds.back().test_accuracy, *r->rounds.back().test_accuracy - 0.03);
}

TEST(SimDataSources, TestFractionZeroMeansNoCentralEvaluation) {
  const SimOptions o = CsvOptions({"data.test_fraction=0", "sim.rounds=2"});
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& m : r->rounds) EXPECT_FALSE(m.test_accuracy.has_value()) << m.ToJson().str();
}

TEST(SimDataSources, ConfigErrorsNameTheKey) {
  auto bad = LoadSimConfig("", {"sim.mode=gossip", "eval.federated=true"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[eval] federated"), std::string::npos)
      << bad.status().ToString();
  bad = LoadSimConfig("", {"eval.federated=true", "data.client_test_fraction=0"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[data] client_test_fraction"), std::string::npos)
      << bad.status().ToString();
  bad = LoadSimConfig("", {"data.image_channels=2"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[data] image_channels"), std::string::npos)
      << bad.status().ToString();
  bad = LoadSimConfig("", {"sim.batched_clients=4", "train.loss=mse"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[sim] batched_clients"), std::string::npos)
      << bad.status().ToString();
  // A csv source without its label column fails at load, naming the source.
  auto o = LoadSimConfig("", {"data.dataset=csv:" + WriteCsv()});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  auto r = RunSimulation(*o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("label column"), std::string::npos) << r.status().ToString();
}

// The binary: a data file that is missing, or malformed, is bad input like a bad key: exit 2
// (it exited 1 for anything but InvalidArgument, e.g. a missing CSV's NotFound).
TEST(SimDataSources, DataErrorsExitTwoNamingTheFile) {
  const std::string sim = FEDMESH_BINARY_DIR "/bin/fedmesh-sim --quiet --set sim.rounds=1 --set data.label_column=y ";
  auto missing = fedmesh::testing::RunShell(sim + "--set data.dataset=csv:/nonexistent/nope.csv 2>&1");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/nope.csv"), std::string::npos) << missing.output;
  const std::string ragged = ::testing::TempDir() + "/sim_ragged_" + std::to_string(::getpid()) + ".csv";
  std::ofstream(ragged) << "a,b,y\n1,2,0\n3,1\n";
  auto bad = fedmesh::testing::RunShell(sim + "--set data.dataset=csv:" + ragged + " 2>&1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("line 3"), std::string::npos) << bad.output;
  std::remove(ragged.c_str());
}

// Every client holds client_test_fraction of its shard out; the held-out rows are never in
// its training rows, and the shards' training and held-out rows together are the shard.
TEST(SimFederatedEval, ClientsHoldOutRowsTheyNeverTrainOn) {
  const SimOptions with = CsvOptions({"eval.federated=true"});
  const SimOptions without = CsvOptions();
  auto a = LoadSimData(with);
  auto b = LoadSimData(without);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->shard_test.size(), a->shards.size());
  for (size_t k = 0; k < a->shards.size(); ++k) {
    const size_t held = a->shard_test[k].size();
    EXPECT_EQ(a->shards[k].size() + held, b->shards[k].size()) << "shard " << k;
    // 0.2 of each class's rows, rounded per class.
    EXPECT_NEAR(static_cast<double>(held), 0.2 * static_cast<double>(b->shards[k].size()), 1.0);
    const std::set<uint32_t> train(a->shards[k].begin(), a->shards[k].end());
    std::set<uint32_t> all(b->shards[k].begin(), b->shards[k].end());
    for (uint32_t i : train) EXPECT_TRUE(all.erase(i) == 1);
    // What is left of the shard is its held-out data: compare the rows' features.
    ASSERT_EQ(all.size(), held);
    size_t j = 0;
    for (uint32_t i : all) {
      const float* want = b->train.sample(i);
      const float* got = a->shard_test[k].sample(j++);
      EXPECT_TRUE(std::equal(want, want + 5, got)) << "shard " << k << " row " << i;
    }
  }
}

// The metrics file gets, per federated evaluation, a "*" line and one line per client;
// the clients' example counts sum to the "*" line's and their metrics, weighted by them,
// give its figures. Round lines keep their own bytes: evaluation traffic is counted in the
// "*" line only.
TEST(SimFederatedEval, SiteLinesSumBackToTheWeightedTotal) {
  const std::string path = TempPath("sim_fedeval.jsonl");
  SimOptions o = CsvOptions({"eval.federated=true", "eval.every=2", "sim.metrics=" + path});
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // After rounds 2, 4 and 6 (the last).
  ASSERT_EQ(r->federated_evals.size(), 3u);
  std::map<int, std::string> totals;
  std::map<int, std::vector<std::string>> sites;
  int round_lines = 0;
  for (const std::string& l : Lines(path)) {
    if (!IsEvalLine(l)) {
      ++round_lines;
      continue;
    }
    const int round = static_cast<int>(JsonNumber(l, "round").value_or(-1));
    if (IsTotalLine(l)) {
      totals[round] = l;
    } else {
      sites[round].push_back(l);
    }
  }
  EXPECT_EQ(round_lines, 6);
  ASSERT_EQ(totals.size(), 3u);
  for (int round : {2, 4, 6}) {
    ASSERT_TRUE(totals.contains(round)) << "no federated evaluation of round " << round;
    const std::string& t = totals[round];
    EXPECT_EQ(JsonNumber(t, "sites_asked").value_or(-1), 8) << t;
    EXPECT_EQ(JsonNumber(t, "sites_answered").value_or(-1), 8) << t;
    EXPECT_GT(JsonNumber(t, "bytes_down").value_or(0), 8 * 4 * 12) << t;  // 8 models of 12 floats
    ASSERT_EQ(sites[round].size(), 8u);
    double n = 0, correct = 0, loss = 0;
    std::set<double> accuracies;
    for (const std::string& s : sites[round]) {
      const double k = JsonNumber(s, "num_examples").value_or(0);
      EXPECT_GT(k, 0) << s;
      n += k;
      correct += k * JsonNumber(s, "accuracy").value_or(-1);
      loss += k * JsonNumber(s, "loss").value_or(-1);
      accuracies.insert(JsonNumber(s, "accuracy").value_or(-1));
    }
    // 2,400 training rows over 8 clients, a fifth of each held out.
    EXPECT_NEAR(n, 480, 8);
    EXPECT_EQ(JsonNumber(t, "num_examples").value_or(-1), n) << t;
    EXPECT_NEAR(JsonNumber(t, "accuracy").value_or(-1), correct / n, 1e-6) << t;
    EXPECT_NEAR(JsonNumber(t, "loss").value_or(-1), loss / n, 1e-6) << t;
    EXPECT_GT(accuracies.size(), 1u) << "every client scored the same: not their own rows";
  }
  EXPECT_GE(JsonNumber(totals[6], "accuracy").value_or(-1), 0.90) << totals[6];

  // The same federation without federated evaluation sends the same bytes per round
  // (codec none: fixed-size models): evaluation traffic is not in the round lines.
  auto plain = RunSimulation(CsvOptions());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_EQ(plain->rounds.size(), r->rounds.size());
  for (size_t i = 0; i < r->rounds.size(); ++i) {
    EXPECT_EQ(r->rounds[i].bytes_up, plain->rounds[i].bytes_up) << i;
    EXPECT_EQ(r->rounds[i].bytes_down, plain->rounds[i].bytes_down) << i;
  }

  // More clients answering than [eval] site_lines: only the "*" lines.
  o.eval_site_lines = 7;
  ASSERT_TRUE(RunSimulation(o).ok());
  int evals = 0;
  for (const std::string& l : Lines(path)) {
    if (!IsEvalLine(l)) continue;
    EXPECT_TRUE(IsTotalLine(l)) << l;
    ++evals;
  }
  EXPECT_EQ(evals, 3);
}

// The last federated evaluation scores the final global model: each client's figures equal
// evaluating that model directly on the client's held-out rows, and the "*" figures are
// their example-weighted means.
TEST(SimFederatedEval, EqualsEvaluatingEachClientsHeldOutRowsDirectly) {
  const SimOptions o = CsvOptions({"eval.federated=true", "sim.model=mlp", "sim.rounds=3"});
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->federated_evals.empty());
  const FederatedEvalReport& last = r->federated_evals.back().report;
  EXPECT_EQ(last.round, 3u);
  ASSERT_EQ(last.sites.size(), 8u);
  ASSERT_TRUE(last.total.has_value());

  auto data = LoadSimData(o);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto backend = MakeCpuBackend(1);
  auto model = BuildModel(data->Spec(o.model), backend.get());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_TRUE((*model)->SetParams(r->final_model).ok());
  SeededEnv env(nullptr, 0);
  Trainer trainer(model->get(), o.trainer, &env);
  uint64_t n = 0;
  double loss = 0;
  for (uint64_t c = 0; c < o.clients; ++c) {
    const auto it = last.sites.find(SimClientId(c));
    ASSERT_NE(it, last.sites.end()) << SimClientId(c);
    auto want = trainer.Evaluate(data->TestOf(c));
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    EXPECT_EQ(it->second.num_examples, data->TestOf(c).size()) << it->first;
    EXPECT_DOUBLE_EQ(it->second.loss, want->loss) << it->first;
    ASSERT_TRUE(it->second.metrics.contains("accuracy")) << it->first;
    EXPECT_DOUBLE_EQ(it->second.metrics.at("accuracy"), want->metrics.at("accuracy")) << it->first;
    n += it->second.num_examples;
    loss += static_cast<double>(it->second.num_examples) * want->loss;
  }
  EXPECT_EQ(last.total->num_examples, n);
  EXPECT_NEAR(last.total->loss, loss / static_cast<double>(n), 1e-12);
}

}  // namespace
}  // namespace fedmesh
