// Real-process federation tests of issue 19 (site data): federated evaluation without data
// at the aggregator, a one-logit ONNX model under secure aggregation with per-site
// comparisons and cross-evaluation, federated statistics (in the clear and secure),
// federated normalization (tables, and images per channel for a built-in model) and
// imputation of missing cells. Fixture: federation_fixture.h.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/graph/input_normalization.h"
#include "core/npz.h"
#include "tests/node/federation_fixture.h"

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture and its helpers

// Issue 19: no data at the aggregator at all ([eval] dataset = ""). After every round each
// of the four sites evaluates the new global model on its own share of the held-out data
// (partitioned like its training data, so the sites' figures differ), and the aggregator
// writes one "*" line with the example-weighted metrics and one line per site, which sum
// back to it; the store keeps the same rows.
TEST_F(FederationTest, FederationFederatedEvaluationWithoutAnEvalDataset) {
  const std::string ep =
      StartAggregator({"rounds.total=3", "rounds.min_available_clients=4", "eval.dataset=",
                       "eval.federated=true", "eval.min_sites=4", "eval.timeout_s=60"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  const auto rc = aggregator_->WaitExit(seconds(120));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 120 s";
  ASSERT_EQ(*rc, 0);

  std::map<int, std::string> total;                     // round -> "*" line
  std::map<int, std::vector<std::string>> sites;        // round -> site lines
  int round_lines = 0;
  for (const std::string& l : MetricsLines()) {
    const int round = static_cast<int>(JsonNumber(l, "round").value_or(-1));
    if (l.find("\"federated_eval\":true") == std::string::npos) {
      ++round_lines;
      EXPECT_EQ(l.find("\"test_accuracy\":0"), std::string::npos) << "no central test set: " << l;
      continue;
    }
    if (l.find("\"site\":\"*\"") != std::string::npos) {
      total[round] = l;
    } else {
      sites[round].push_back(l);
    }
  }
  EXPECT_EQ(round_lines, 3);
  for (int round = 1; round <= 3; ++round) {
    ASSERT_TRUE(total.contains(round)) << "no federated evaluation line for round " << round;
    const std::string& t = total[round];
    EXPECT_EQ(JsonNumber(t, "sites_answered").value_or(-1), 4) << t;
    ASSERT_EQ(sites[round].size(), 4u);
    double n = 0, correct = 0, loss = 0;
    std::set<double> per_site;
    for (const std::string& s : sites[round]) {
      const double k = JsonNumber(s, "num_examples").value_or(0);
      n += k;
      correct += k * JsonNumber(s, "accuracy").value_or(-1);
      loss += k * JsonNumber(s, "loss").value_or(-1);
      per_site.insert(JsonNumber(s, "accuracy").value_or(-1));
    }
    EXPECT_EQ(JsonNumber(t, "num_examples").value_or(-1), n) << t;
    EXPECT_NEAR(JsonNumber(t, "accuracy").value_or(-1), correct / n, 1e-6) << t;
    EXPECT_NEAR(JsonNumber(t, "loss").value_or(-1), loss / n, 1e-6) << t;
    EXPECT_GT(per_site.size(), 1u) << "every site scored the same: not their own data";
  }
  EXPECT_GT(JsonNumber(total[3], "accuracy").value_or(-1), 0.7) << total[3];

  auto store = AggregatorStore::Open((dir_ / "run" / "aggregator.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto rows = (*store)->SiteEvals(3);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 5u);
  EXPECT_EQ((*rows)[0].site, "*");
  EXPECT_EQ(static_cast<double>((*rows)[0].num_examples), JsonNumber(total[3], "num_examples").value_or(-1));

  // fedmesh-model export --best accuracy: the round with the highest federated accuracy,
  // whatever the last round scored.
  int best_round = 1;
  for (int round = 2; round <= 3; ++round)
    if (JsonNumber(total[round], "accuracy").value_or(-1) >
        JsonNumber(total[best_round], "accuracy").value_or(-1))
      best_round = round;
  auto rc_best = fedmesh::testing::RunToCompletion(
      {kBin + "fedmesh-model", "export", "--db", "run/aggregator.db", "--best", "accuracy", "--out",
       "best.npz"},
      dir_, dir_ / "export-best.log", seconds(60));
  const std::string log = ReadWholeFile(dir_ / "export-best.log");
  ASSERT_TRUE(rc_best.has_value() && *rc_best == 0) << log;
  EXPECT_NE(log.find("at round " + std::to_string(best_round) + "\n"), std::string::npos) << log;
  EXPECT_NE(log.find("model version " + std::to_string(best_round) + "\n"), std::string::npos) << log;
  auto rc_none = fedmesh::testing::RunToCompletion(
      {kBin + "fedmesh-model", "export", "--db", "run/aggregator.db", "--best", "r2", "--out",
       "none.npz"},
      dir_, dir_ / "export-none.log", seconds(60));
  ASSERT_TRUE(rc_none.has_value());
  EXPECT_EQ(*rc_none, 2) << ReadWholeFile(dir_ / "export-none.log");
  EXPECT_NE(ReadWholeFile(dir_ / "export-none.log").find("no federated evaluation with metric 'r2'"),
            std::string::npos);
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture and its helpers

// Issue 19: a binary task end to end, as examples/breast_cancer runs it but on generated rows:
// the aggregator's ONNX model has one logit (bce_with_logits, examples/breast_cancer/
// hospital_mlp.onnx with its input BatchNorm kept at each site), the sites hold CSVs with
// text labels and hold out 30% of their rows; secure aggregation and federated evaluation
// only. The sites must adopt the one-logit model (their data is checked against the
// task's loss, not cross_entropy) and the federated AUC must be high on this separable
// data.
TEST_F(FederationTest, FederationBinaryOnnxModelWithSecureAggregationAndFederatedEvaluation) {
  const std::string model = std::string(FEDMESH_SOURCE_DIR) + "/examples/breast_cancer/hospital_mlp.onnx";
  // Malignant when the first two measurements are large; scales differ by column, as in
  // the real data (the input BatchNorm standardises them).
  Rng rng(11);
  for (int site = 1; site <= 4; ++site) {
    std::ofstream out(dir_ / ("site-" + std::to_string(site) + ".csv"));
    for (int c = 0; c < 30; ++c) out << "m" << c << ",";
    out << "diagnosis\n";
    for (int row = 0; row < 60 + 20 * site; ++row) {
      const bool malignant = rng.Uniform() < 0.3;
      for (int c = 0; c < 30; ++c) {
        const double scale = c % 3 == 0 ? 1000.0 : c % 3 == 1 ? 1.0 : 0.01;
        const double shift = (c < 2 && malignant) ? 1.5 : 0.0;
        out << scale * (rng.Normal() + shift) << ",";
      }
      out << (malignant ? "malignant" : "benign") << "\n";
    }
  }
  const std::string ep = StartAggregator(
      {"rounds.total=6", "rounds.clients_per_round=4", "rounds.min_clients=3",
       "rounds.min_available_clients=4", "model.onnx=" + model, "train.loss=bce_with_logits",
       "train.lr=0.05", "train.momentum=0.9", "train.batch=16", "train.epochs=2",
       "secagg.enabled=true", "secagg.clip=5", "secagg.bits=24", "secagg.stage_timeout_s=30",
       "eval.dataset=", "eval.federated=true", "eval.min_sites=4", "eval.finetune_epochs=2",
       "eval.local_only_epochs=12", "eval.cross_eval=true"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) {
    ASSERT_NE(StartNode(i, ep,
                        {"secagg.allow=keys/allow", "data.dataset=csv:site-" + std::to_string(i) + ".csv",
                         "data.label_column=diagnosis", "data.label_values=benign,malignant",
                         "data.num_partitions=1", "data.index=0", "data.partition=iid",
                         "data.test_fraction=0.3", "model.local=input_norm.*",
                         // Sites 1 and 2 share their local-only models for cross-evaluation.
                         std::string("eval.share_local_model=") + (i <= 2 ? "true" : "false")}),
              nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(180));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 180 s";
  ASSERT_EQ(*rc, 0);
  std::string last;
  for (const std::string& l : MetricsLines())
    if (l.find("\"site\":\"*\"") != std::string::npos) last = l;
  ASSERT_FALSE(last.empty()) << "no federated evaluation";
  EXPECT_EQ(JsonNumber(last, "round").value_or(-1), 6) << last;
  EXPECT_EQ(JsonNumber(last, "sites_answered").value_or(-1), 4) << last;
  EXPECT_GE(JsonNumber(last, "auc").value_or(-1), 0.9) << last;
  EXPECT_GE(JsonNumber(last, "accuracy").value_or(-1), 0.8) << last;
  // The last evaluation also compares, per site, the global model with the site's
  // local-only baseline and the global model fine-tuned there; earlier ones do not.
  int compared = 0;
  std::map<std::string, double> local_only;                     // site -> its local_only_auc
  std::map<std::string, std::map<std::string, double>> cross;  // candidate -> site -> auc
  for (const std::string& l : MetricsLines()) {
    if (l.find("\"federated_eval\":true") == std::string::npos) continue;
    if (l.find("\"candidate\"") != std::string::npos) {
      const size_t c = l.find("\"candidate\":\"") + 13;
      const size_t s = l.find("\"site\":\"") + 8;
      cross[l.substr(c, l.find('"', c) - c)][l.substr(s, l.find('"', s) - s)] =
          JsonNumber(l, "auc").value_or(-1);
      continue;
    }
    if (l.find("\"local_only_auc\"") != std::string::npos) {
      const size_t s = l.find("\"site\":\"") + 8;
      local_only[l.substr(s, l.find('"', s) - s)] = JsonNumber(l, "local_only_auc").value_or(-1);
    }
    const bool has = l.find("\"finetuned_auc\"") != std::string::npos &&
                     l.find("\"local_only_auc\"") != std::string::npos;
    EXPECT_EQ(has, JsonNumber(l, "round").value_or(-1) == 6) << l;
    if (!has || l.find("\"site\":\"*\"") != std::string::npos) continue;
    ++compared;
    EXPECT_GE(JsonNumber(l, "local_only_auc").value_or(-1), 0.5) << l;
    EXPECT_GE(JsonNumber(l, "finetuned_auc").value_or(-1), 0.5) << l;
  }
  EXPECT_EQ(compared, 4);
  // Cross-evaluation: the two shared local models, each scored at all four sites; at its
  // own site a local model scores exactly its local-only AUC of the last evaluation.
  ASSERT_EQ(cross.size(), 2u);
  for (const std::string c : {"site-1", "site-2"}) {
    ASSERT_EQ(cross[c].size() - cross[c].count("*"), 4u) << c;
    EXPECT_EQ(cross[c][c], local_only[c]) << c;
    for (const auto& [site, auc] : cross[c]) EXPECT_GE(auc, 0.5) << c << " at " << site;
  }
  EXPECT_NE(aggregator_->Log().find("cross-evaluation: every model scored at every site"),
            std::string::npos);
  EXPECT_NE(ReadWholeFile(dir_ / "site-1.log").find("sharing this site's local-only model"),
            std::string::npos);
  EXPECT_EQ(ReadWholeFile(dir_ / "site-3.log").find("sharing this site's local-only model"),
            std::string::npos);
  EXPECT_NE(aggregator_->Log().find("did federation help each site?"), std::string::npos);
  EXPECT_NE(aggregator_->Log().find("| site-4 | "), std::string::npos) << aggregator_->Log();
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture and its helpers

// Issue 19, federated statistics: three sites release summaries of their rows (two with
// exact min/max, one with its default noise) and a fourth, with 8 rows, is below its
// min_count and releases nothing. The aggregator's report must give the mean and variance
// of the pooled rows of the three to 1e-9 relative (computed here independently, and by
// numpy when it is installed), histograms that count every row, the label counts, and the
// withheld site's reason; then round 1 trains as usual.
class FederatedStatisticsTest : public FederationTest {
 protected:
  void RunAndCheck(bool secure);
};

TEST_F(FederatedStatisticsTest, FederationFederatedStatisticsEqualThePooledRows) { RunAndCheck(false); }

// The same under secure aggregation: the sites' counts, sums, sums of squares, histograms
// and label counts are summed by SecAgg+ as exact fixed-point words, so the aggregator
// sees only the federation's totals, and they still equal the pooled figures to 1e-9.
TEST_F(FederatedStatisticsTest, FederationFederatedStatisticsUnderSecureAggregation) {
  RunAndCheck(true);
}

void FederatedStatisticsTest::RunAndCheck(bool secure) {
  Rng rng(23);
  const int rows[] = {120, 60, 200, 8};
  std::vector<std::vector<std::array<float, 3>>> values(4);
  std::vector<int> malignant(4, 0);
  for (int site = 1; site <= 4; ++site) {
    std::ofstream out(dir_ / ("site-" + std::to_string(site) + ".csv"));
    out << "age,creatinine,smoker,diagnosis\n";
    for (int r = 0; r < rows[site - 1]; ++r) {
      // Written with 9 digits: read back as float32, the reference uses the same floats.
      char line[160];
      const double age = rng.Normal(50.0 + 3 * site, 12.0);
      const double creat = 1000.0 + rng.Normal(0.1 * site, 1.0);  // mean / std ~ 1e3
      const int smoker = rng.Uniform() < 0.3;
      const bool m = rng.Uniform() < 0.35;
      std::snprintf(line, sizeof line, "%.9g,%.9g,%d,%s\n", age, creat, smoker, m ? "malignant" : "benign");
      out << line;
      values[site - 1].push_back({static_cast<float>(std::strtod(line, nullptr)), 0.0f, static_cast<float>(smoker)});
      values[site - 1].back()[1] = static_cast<float>(std::strtod(std::strchr(line, ',') + 1, nullptr));
      malignant[site - 1] += m;
    }
  }
  const std::string ep = StartAggregator(
      {"rounds.total=1", "rounds.clients_per_round=4", "rounds.min_clients=3",
       "rounds.min_available_clients=4", "model.name=logreg", "model.input_shape=3",
       "model.num_classes=2", "eval.dataset=", "stats.enabled=true", "stats.bins=8",
       "stats.min_sites=3", "stats.report=stats.json",
       std::string("secagg.enabled=") + (secure ? "true" : "false"), "secagg.stage_timeout_s=30"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) {
    std::vector<std::string> sets = {"data.dataset=csv:site-" + std::to_string(i) + ".csv",
                                     "data.label_column=diagnosis", "data.label_values=benign,malignant",
                                     "data.num_partitions=1", "data.index=0", "data.test_fraction=0",
                                     "model.name=logreg", "secagg.allow=keys/allow"};
    if (i <= 2) sets.push_back("stats.minmax_noise=0");
    ASSERT_NE(StartNode(i, ep, sets), nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(120));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 120 s";
  ASSERT_EQ(*rc, 0) << aggregator_->Log();
  EXPECT_NE(aggregator_->Log().find("federated statistics: 3/4 site(s) released, 380 rows"),
            std::string::npos) << aggregator_->Log();
  EXPECT_EQ(MetricsLines().size(), 1u) << "round 1 trained after the statistics";

  const std::string report = ReadWholeFile(dir_ / "stats.json");
  const size_t fed_at = report.find("\"federation\":");
  const size_t sites_at = report.find(",\"sites\":{");
  ASSERT_NE(fed_at, std::string::npos) << report;
  ASSERT_NE(sites_at, std::string::npos) << report;
  const std::string fed = report.substr(fed_at, sites_at - fed_at);
  EXPECT_EQ(JsonNumber(fed, "rows").value_or(-1), 380);
  EXPECT_NE(fed.find("\"label_counts\":[" + std::to_string(380 - malignant[0] - malignant[1] - malignant[2]) +
                     "," + std::to_string(malignant[0] + malignant[1] + malignant[2]) + "]"),
            std::string::npos) << fed;
  const char* names[] = {"age", "creatinine", "smoker"};
  for (int j = 0; j < 3; ++j) {
    long double mean = 0, var = 0;
    float lo = INFINITY, hi = -INFINITY, lo12 = INFINITY;
    size_t n = 0;
    for (int s = 0; s < 3; ++s) {
      for (const auto& v : values[s]) {
        mean += v[j];
        ++n;
        lo = std::min(lo, v[j]);
        hi = std::max(hi, v[j]);
        if (s < 2) lo12 = std::min(lo12, v[j]);
      }
    }
    mean /= n;
    for (int s = 0; s < 3; ++s)
      for (const auto& v : values[s]) var += (v[j] - mean) * (v[j] - mean);
    var /= n;
    const size_t at = fed.find(std::string("{\"name\":\"") + names[j] + "\"");
    ASSERT_NE(at, std::string::npos) << names[j];
    const std::string f = fed.substr(at);
    EXPECT_EQ(JsonNumber(f, "count").value_or(-1), 380);
    EXPECT_NEAR(JsonNumber(f, "mean").value_or(-1), static_cast<double>(mean),
                1e-9 * std::fabs(static_cast<double>(mean))) << names[j];
    EXPECT_NEAR(JsonNumber(f, "variance").value_or(-1), static_cast<double>(var),
                1e-9 * static_cast<double>(var)) << names[j];
    // Site 3's noisy minimum may be the lowest; never above the true one.
    const double fmin = JsonNumber(f, "min").value_or(1e300);
    EXPECT_LE(fmin, lo) << names[j];
    EXPECT_GE(fmin, lo - (hi - lo)) << names[j];
    if (j == 2) {
      EXPECT_LT(fmin, 0.0) << "site 3's noise pushes the 0/1 column's minimum below 0";
    }
    const size_t h = f.find("\"counts\":[");
    ASSERT_NE(h, std::string::npos) << f;
    uint64_t total = 0;
    for (const char* p = f.c_str() + h + 10; *p != ']'; ++p) {
      char* end = nullptr;
      total += std::strtoull(p, &end, 10);
      p = end;
      if (*p == ']') break;
    }
    EXPECT_EQ(total, 380u) << "every row in one bin: " << f.substr(h, 80);
  }
  EXPECT_NE(report.find("\"site-4\":{\"released\":false,\"withheld\":\"this site has 8 rows, fewer "
                        "than its min_count 10\"}"),
            std::string::npos) << report.substr(sites_at);
  // Per site: sums in the clear without secure aggregation, none with it.
  const std::string site1 = report.substr(report.find("\"site-1\":"), 400);
  if (secure) {
    EXPECT_NE(site1.find("\"secure\":true"), std::string::npos) << site1;
    EXPECT_NE(site1.find("\"sum\":0,"), std::string::npos) << site1;
    EXPECT_NE(aggregator_->Log().find("secure"), std::string::npos);
  } else {
    EXPECT_EQ(JsonNumber(site1, "rows").value_or(-1), 120) << site1;
    EXPECT_NE(site1.find("\"sum\":"), std::string::npos) << site1;
    EXPECT_EQ(site1.find("\"sum\":0,"), std::string::npos) << site1;
  }
  if (fs::exists("/usr/bin/gnuplot")) {
    EXPECT_GT(fs::file_size(dir_ / "stats.png"), 1000u);
  }
  // numpy, when the machine has it (scripts/setup.sh installs it with the benchmarks).
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0) {
    const std::string script = std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/stats/check_pooled.py";
    const auto r = fedmesh::testing::RunShell("cd " + dir_.string() + " && /usr/bin/python3 " + script +
                                              " stats.json diagnosis site-1.csv site-2.csv site-3.csv");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("numpy pooled check: 380 rows, 3 features"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture and its helpers

// Issue 19, [data] normalize = "federated": columns on scales 1000, 1 and 0.01 at every site;
// the aggregator collects the statistics, puts x' = (x - mean) / std with the federation's
// figures in front of its ONNX model and trains that. A site that pinned the original
// model's hash accepts it (the pinned model plus the normalization), the federation learns,
// and the exported ONNX carries the same constants as the statistics report and scores the
// raw rows.
TEST_F(FederationTest, FederationNormalizesInputsWithTheFederationsStatistics) {
  const std::string model = std::string(FEDMESH_SOURCE_DIR) + "/examples/breast_cancer/hospital_mlp.onnx";
  auto base = onnx::ReadOnnxFile(model);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  Rng rng(31);
  Dataset pooled;
  pooled.sample_shape = {30};
  pooled.num_classes = 2;
  for (int site = 1; site <= 3; ++site) {
    std::ofstream out(dir_ / ("site-" + std::to_string(site) + ".csv"));
    for (int c = 0; c < 30; ++c) out << "m" << c << ",";
    out << "diagnosis\n";
    for (int row = 0; row < 80 + 30 * site; ++row) {
      const bool malignant = rng.Uniform() < 0.35;
      for (int c = 0; c < 30; ++c) {
        const double scale = c % 3 == 0 ? 1000.0 : c % 3 == 1 ? 1.0 : 0.01;
        const double shift = (c < 3 && malignant) ? 1.5 : 0.0;
        char cell[32];
        std::snprintf(cell, sizeof cell, "%.9g", scale * (rng.Normal() + shift + 5.0));
        out << cell << ",";
        pooled.features.push_back(static_cast<float>(std::strtod(cell, nullptr)));
      }
      out << (malignant ? "malignant" : "benign") << "\n";
      pooled.labels.push_back(malignant);
    }
  }
  const std::string ep = StartAggregator(
      {"rounds.total=4", "rounds.clients_per_round=3", "rounds.min_clients=3",
       "rounds.min_available_clients=3", "model.onnx=" + model, "train.loss=bce_with_logits",
       "train.lr=0.05", "train.momentum=0.9", "train.batch=16", "train.epochs=2",
       "stats.enabled=true", "stats.min_sites=3", "stats.report=stats.json", "data.normalize=federated",
       "eval.dataset=", "eval.federated=true", "eval.min_sites=3"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 3; ++i) {
    std::vector<std::string> sets = {"data.dataset=csv:site-" + std::to_string(i) + ".csv",
                                     "data.label_column=diagnosis", "data.label_values=benign,malignant",
                                     "data.num_partitions=1", "data.index=0", "data.test_fraction=0.3"};
    if (i == 1) sets.push_back("model.expect_sha256=" + graph::CanonicalHash(*base));
    ASSERT_NE(StartNode(i, ep, sets), nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(180));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 180 s";
  ASSERT_EQ(*rc, 0) << aggregator_->Log();
  EXPECT_NE(aggregator_->Log().find("input normalization from the federation's statistics (30 features)"),
            std::string::npos) << aggregator_->Log();
  EXPECT_NE(ReadWholeFile(dir_ / "site-1.log").find("is the pinned one (expect_sha256) with the federation's "
                                                    "input normalization"),
            std::string::npos) << ReadWholeFile(dir_ / "site-1.log");
  std::string last;
  for (const std::string& l : MetricsLines())
    if (l.find("\"site\":\"*\"") != std::string::npos) last = l;
  EXPECT_GE(JsonNumber(last, "auc").value_or(-1), 0.9) << last;

  // The exported model: the report's means as its constants, and it scores raw rows.
  auto exported = ExportGlobalModel("run/aggregator.db");
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  ASSERT_TRUE(graph::HasInputNormalization(*exported));
  const std::string report = ReadWholeFile(dir_ / "stats.json");
  for (const graph::Node& n : exported->nodes) {
    if (n.name != "fedmesh_input_norm_mean") continue;
    const std::vector<float>& mean = n.attrs.at("value").t.f;
    ASSERT_EQ(mean.size(), 30u);
    const size_t at = report.find("{\"name\":\"m4\"");
    ASSERT_NE(at, std::string::npos);
    EXPECT_FLOAT_EQ(mean[4], static_cast<float>(JsonNumber(report.substr(at), "mean").value_or(-1)));
    EXPECT_NEAR(mean[3], 5000.0f, 300.0f) << "the scale-1000 column's mean";
  }
  auto backend = MakeCpuBackend(1);
  auto m = Model::CreateFromGraph("exported", backend.get(), std::move(*exported));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  LossOptions loss;
  loss.kind = LossKind::kBceWithLogits;
  ASSERT_TRUE((*m)->SetLoss(loss).ok());
  SystemEnv env(1);
  TrainerOptions topt;
  topt.loss = loss;
  Trainer trainer(m->get(), topt, &env);
  auto eval = trainer.Evaluate(pooled);
  ASSERT_TRUE(eval.ok()) << eval.status().ToString();
  EXPECT_GE(eval->accuracy, 0.85) << "the exported model on raw rows";
  // Rows with missing cells (NaN): the exported model fills them with the federation's
  // means itself (IsNaN / Where in front of the Sub), so it still scores them.
  Dataset holes = pooled;
  for (size_t r = 0; r < holes.size(); r += 2) holes.features[r * 30 + 3 + (r % 5) * 6] = std::nanf("");
  auto eval_holes = trainer.Evaluate(holes);
  ASSERT_TRUE(eval_holes.ok()) << eval_holes.status().ToString();
  EXPECT_TRUE(std::isfinite(eval_holes->loss));
  EXPECT_GE(eval_holes->accuracy, 0.85) << "the exported model on rows with missing cells";
}

// A site whose model cannot train its task (one training row under an input BatchNorm: no
// variance) fails that task, not the site: it tells the aggregator why (task_failed, with
// the op's error), the rounds close with the other two sites, and it is still there for
// every round's task (it used to exit at the first one).
TEST_F(FederationTest, FederationASiteThatCannotTrainItsTaskFailsTheTaskNotTheSite) {
  const std::string model = std::string(FEDMESH_SOURCE_DIR) + "/examples/breast_cancer/hospital_mlp.onnx";
  Rng rng(5);
  for (int site = 1; site <= 3; ++site) {
    std::ofstream out(dir_ / ("site-" + std::to_string(site) + ".csv"));
    for (int c = 0; c < 30; ++c) out << "m" << c << ",";
    out << "diagnosis\n";
    const int rows = site == 3 ? 1 : 60;
    for (int row = 0; row < rows; ++row) {
      const bool malignant = row % 3 == 0;
      for (int c = 0; c < 30; ++c) out << rng.Normal() + (c < 3 && malignant ? 1.5 : 0.0) << ",";
      out << (malignant ? "malignant" : "benign") << "\n";
    }
  }
  const std::string ep = StartAggregator(
      {"rounds.total=3", "rounds.clients_per_round=3", "rounds.min_clients=2", "rounds.min_available_clients=3",
       "model.onnx=" + model, "train.loss=bce_with_logits", "train.batch=16", "eval.dataset="});
  ASSERT_FALSE(ep.empty());
  std::vector<ChildProcess*> sites;
  for (int i = 1; i <= 3; ++i) {
    sites.push_back(StartNode(i, ep, {"data.dataset=csv:site-" + std::to_string(i) + ".csv", "data.label_column=diagnosis",
                                      "data.label_values=benign,malignant", "data.num_partitions=1", "data.index=0",
                                      "data.test_fraction=0"}));
    ASSERT_NE(sites.back(), nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(120));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 120 s";
  ASSERT_EQ(*rc, 0) << aggregator_->Log();
  const std::string log = aggregator_->Log();
  for (int round = 1; round <= 3; ++round) {
    EXPECT_NE(log.find("site-3 failed its training task of round " + std::to_string(round) + ": training failed: "),
              std::string::npos)
        << log;
  }
  EXPECT_NE(log.find("more than one value per channel"), std::string::npos) << log;
  int closed = 0;
  for (const std::string& l : MetricsLines()) closed += l.find("\"received\":2,") != std::string::npos;
  EXPECT_EQ(closed, 3) << ReadWholeFile(MetricsPath());
  EXPECT_TRUE(sites[2]->Running()) << sites[2]->Log();
  EXPECT_NE(sites[2]->Log().find("refused the FitTask for round 3: training failed"), std::string::npos)
      << sites[2]->Log();
}

// The same for images and a built-in model: three sites hold 8 x 8 RGB images (npz, HWC)
// whose channels are on scales 200, 1 and 0.01 around 1000, 5 and -0.05; the class is a
// shift of the top-left quarter of the smallest channel. The aggregator trains the built-in
// mlp as its graph ([N, 3, 8, 8]) with one mean and stddev per channel in front; sites feed
// their HWC images to it transposed. The federation learns, and the exported ONNX holds the
// channels' constants and scores the raw images.
TEST_F(FederationTest, FederationNormalizesImagesPerChannelForABuiltinModel) {
  Rng rng(17);
  Dataset pooled;
  pooled.sample_shape = {8, 8, 3};
  pooled.num_classes = 2;
  const double kMean[3] = {1000.0, 5.0, -0.05}, kScale[3] = {200.0, 1.0, 0.01};
  for (int site = 1; site <= 3; ++site) {
    const int n = 100 + 50 * site;
    NpzArray x{"x", graph::DType::kFloat32, {n, 8, 8, 3}, {}, {}};
    NpzArray y{"y", graph::DType::kInt64, {n}, {}, {}};
    for (int r = 0; r < n; ++r) {
      const int label = rng.Uniform() < 0.5;
      for (int h = 0; h < 8; ++h)
        for (int w = 0; w < 8; ++w)
          for (int c = 0; c < 3; ++c) {
            const double shift = (c == 2 && h < 4 && w < 4 && label) ? 1.5 : 0.0;
            x.f.push_back(static_cast<float>(kMean[c] + kScale[c] * (rng.Normal() + shift)));
          }
      y.i.push_back(label);
      pooled.labels.push_back(label);
    }
    pooled.features.insert(pooled.features.end(), x.f.begin(), x.f.end());
    ASSERT_TRUE(WriteNpzFile((dir_ / ("site-" + std::to_string(site) + ".npz")).string(), {x, y}).ok());
  }
  const std::string ep = StartAggregator(
      {"rounds.total=4", "rounds.clients_per_round=3", "rounds.min_clients=3",
       "rounds.min_available_clients=3", "model.name=mlp", "model.input_shape=8,8,3",
       "model.num_classes=2", "train.lr=0.05", "train.momentum=0.9", "train.batch=16",
       "train.epochs=2", "stats.enabled=true", "stats.min_sites=3", "data.normalize=federated",
       "eval.dataset=", "eval.federated=true", "eval.min_sites=3"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 3; ++i) {
    ASSERT_NE(StartNode(i, ep, {"data.dataset=npz:site-" + std::to_string(i) + ".npz",
                                "data.num_partitions=1", "data.index=0", "data.test_fraction=0.3"}),
              nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(180));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 180 s";
  ASSERT_EQ(*rc, 0) << aggregator_->Log();
  EXPECT_NE(aggregator_->Log().find("the built-in 'mlp' is trained as its ONNX graph"), std::string::npos)
      << aggregator_->Log();
  EXPECT_NE(aggregator_->Log().find("input normalization from the federation's statistics (3 channels)"),
            std::string::npos) << aggregator_->Log();
  std::string last;
  for (const std::string& l : MetricsLines())
    if (l.find("\"site\":\"*\"") != std::string::npos) last = l;
  EXPECT_GE(JsonNumber(last, "accuracy").value_or(-1), 0.9) << last;

  auto exported = ExportGlobalModel("run/aggregator.db");
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  ASSERT_EQ(exported->inputs[0].dims, (graph::Dims{-1, 3, 8, 8}));
  int constants = 0;
  for (const graph::Node& n : exported->nodes) {
    if (n.name != "fedmesh_input_norm_mean" && n.name != "fedmesh_input_norm_std") continue;
    ++constants;
    const graph::Tensor& t = n.attrs.at("value").t;
    ASSERT_EQ(t.dims, (graph::Dims{3, 1, 1}));
    const bool mean = n.name == "fedmesh_input_norm_mean";
    // The sites' training rows: the class shift moves the smallest channel a little.
    EXPECT_NEAR(t.f[0], mean ? 1000.0 : 200.0, mean ? 5.0 : 6.0) << n.name;
    EXPECT_NEAR(t.f[1], mean ? 5.0 : 1.0, mean ? 0.03 : 0.03) << n.name;
    EXPECT_NEAR(t.f[2], mean ? -0.05 + 0.01 * 1.5 / 8 : 0.0107, mean ? 0.001 : 0.001) << n.name;
  }
  EXPECT_EQ(constants, 2);
  auto backend = MakeCpuBackend(1);
  auto m = Model::CreateFromGraph("exported", backend.get(), std::move(*exported));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  SystemEnv env(1);
  Trainer trainer(m->get(), TrainerOptions{}, &env);
  auto eval = trainer.Evaluate(pooled);
  ASSERT_TRUE(eval.ok()) << eval.status().ToString();
  EXPECT_GE(eval->accuracy, 0.9) << "the exported model on the raw images";
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture and its helpers

// [data] missing = "impute_mean": three sites with missing cells. With federated statistics
// every site fills its missing cells with the federation's feature means (those of the
// statistics report, over the present values of all sites) and trains; without them a
// site refuses the task, saying what the aggregator lacks.
// Three sites' tables with missing creatinine cells (NA); returns how many are missing.
int WriteSitesWithMissingCells(const fs::path& dir) {
  Rng rng(41);
  int missing = 0;
  for (int site = 1; site <= 3; ++site) {
    std::ofstream out(dir / ("site-" + std::to_string(site) + ".csv"));
    out << "age,creatinine,smoker,diagnosis\n";
    for (int r = 0; r < 40 + 20 * site; ++r) {
      const bool m = rng.Uniform() < 0.4;
      const bool gap = rng.Uniform() < 0.15;
      missing += gap;
      out << rng.Normal(50.0 + 5 * m, 10.0) << "," << (gap ? "NA" : std::to_string(1.0 + m + 0.3 * rng.Normal()))
          << "," << (rng.Uniform() < 0.3) << "," << (m ? "malignant" : "benign") << "\n";
    }
  }
  return missing;
}

std::vector<std::string> ImputingSite(int i, const std::string& db) {
  return {"data.dataset=csv:site-" + std::to_string(i) + ".csv", "data.label_column=diagnosis",
          "data.label_values=benign,malignant", "data.missing=impute_mean", "data.num_partitions=1",
          "data.index=0", "data.test_fraction=0", "model.name=logreg", "node.db=" + db};
}

TEST_F(FederationTest, FederationImputesMissingCellsWithTheFederationsMeans) {
  const int missing = WriteSitesWithMissingCells(dir_);
  auto run = [&](bool stats) {
    const std::string ep = StartAggregator(
        {"rounds.total=2", "rounds.clients_per_round=3", "rounds.min_clients=3",
         "rounds.min_available_clients=3", "rounds.timeout_s=4", "rounds.max_retries=0",
         "model.name=logreg", "model.input_shape=3", "model.num_classes=2", "eval.dataset=",
         std::string("stats.enabled=") + (stats ? "true" : "false"), "stats.report=stats.json"},
        "tcp://127.0.0.1:*", stats ? "aggregator" : "aggregator-nostats");
    if (ep.empty()) return -1;
    for (int i = 1; i <= 3; ++i) {
      StartNode(i, ep, ImputingSite(i, "run/site-" + std::to_string(i) + (stats ? "" : "-nostats") + ".db"),
                "site-" + std::to_string(i) + (stats ? "" : "-nostats"));
    }
    const auto rc = aggregator_->WaitExit(seconds(120));
    return rc.has_value() ? *rc : -2;
  };
  ASSERT_EQ(run(true), 0) << aggregator_->Log();
  ASSERT_GT(missing, 10);
  int imputed = 0;
  for (int i = 1; i <= 3; ++i) {
    const std::string log = ReadWholeFile(dir_ / ("site-" + std::to_string(i) + ".log"));
    const size_t at = log.find("imputed ");
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_NE(log.find("missing cells with the federation's feature means"), std::string::npos) << log;
    imputed += std::stoi(log.substr(at + 8));
  }
  EXPECT_EQ(imputed, missing) << "every missing cell, once";
  const std::string report = ReadWholeFile(dir_ / "stats.json");
  const size_t creat = report.find("{\"name\":\"creatinine\"");
  ASSERT_NE(creat, std::string::npos);
  EXPECT_EQ(JsonNumber(report.substr(creat), "count").value_or(-1), 240 - missing)
      << "the statistics count only present cells";
  EXPECT_EQ(MetricsLines().size(), 2u);

  // Without statistics: refused, and the reason names what to turn on.
  fs::remove_all(dir_ / "run");
  fs::create_directories(dir_ / "run");
  EXPECT_NE(run(false), 0);
  const std::string log = ReadWholeFile(dir_ / "site-1-nostats.log");
  EXPECT_NE(log.find("the aggregator sent none: it needs [stats] enabled"), std::string::npos) << log;
}

// The federation's means outlive an aggregator restart: the statistics run before round 1;
// the aggregator stops after it (rounds.total = 1) and site-3 is SIGKILLed; the aggregator
// restarts for rounds 2-3 from its store, and a fresh site-3 process, whose table still has
// its gaps, gets the means with its task and imputes. Before, a restarted aggregator sent
// no means past round 1, site-3 refused every task ("the aggregator sent none") and the
// federation failed.
TEST_F(FederationTest, FederationImputationSurvivesAnAggregatorRestart) {
  ASSERT_GT(WriteSitesWithMissingCells(dir_), 10);
  std::vector<std::string> sets = {
      "rounds.total=1", "rounds.clients_per_round=3", "rounds.min_clients=3", "rounds.min_available_clients=3",
      "rounds.timeout_s=30", "rounds.max_retries=0", "model.name=logreg", "model.input_shape=3",
      "model.num_classes=2", "eval.dataset=", "stats.enabled=true", "stats.report=stats.json",
      "aggregator.heartbeat_ms=500"};
  const std::string ep = StartAggregator(sets);
  ASSERT_FALSE(ep.empty());
  ChildProcess* first = aggregator_;
  std::vector<ChildProcess*> sites;
  for (int i = 1; i <= 3; ++i) sites.push_back(StartNode(i, ep, ImputingSite(i, "run/site-" + std::to_string(i) + ".db")));
  const auto first_rc = first->WaitExit(seconds(60));
  ASSERT_TRUE(first_rc.has_value() && *first_rc == 0) << first->Log();
  sites[2]->Kill();
  ASSERT_EQ(MetricsLines().size(), 1u) << first->Log();

  sets[0] = "rounds.total=3";
  ASSERT_EQ(StartAggregator(sets, ep, "aggregator-restarted"), ep);
  ChildProcess* second = aggregator_;
  ChildProcess* site3 = StartNode(3, ep, ImputingSite(3, "run/site-3.db"), "site-3-restarted");
  ASSERT_NE(site3, nullptr);
  const auto rc = second->WaitExit(seconds(120));
  ASSERT_TRUE(rc.has_value()) << second->Log();
  EXPECT_EQ(*rc, 0) << second->Log();
  EXPECT_NE(second->Log().find("restored the federation's feature means for imputation (3 features)"),
            std::string::npos) << second->Log();
  EXPECT_EQ(MetricsLines().size(), 3u);
  const std::string log = ReadWholeFile(dir_ / "site-3-restarted.log");
  EXPECT_NE(log.find("missing cells with the federation's feature means"), std::string::npos) << log;
  EXPECT_EQ(log.find("the aggregator sent none"), std::string::npos) << log;
}

}  // namespace
}  // namespace fedmesh
