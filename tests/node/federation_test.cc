// Real-process federation tests: fedmesh-aggregator and fedmesh-node binaries on loopback
// with CurveZMQ, real Fashion-MNIST, real SQLite stores. Every child runs single-threaded
// (train.threads=1, OMP_WAIT_POLICY=passive), every wait has a deadline, and every child is
// SIGKILLed in TearDown (and by PR_SET_PDEATHSIG if this binary dies). Ports are chosen by
// the kernel (tcp://127.0.0.1:*) and read from the aggregator's "listening on" line.
// On failure the logs of every child are printed and the test's directory is kept
// (FEDMESH_KEEP_TEST_DIRS=1 keeps it after a pass too).
#include "tests/node/federation_fixture.h"
#include "tests/telemetry/metrics_http.h"

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture and its helpers

// (a) Four enrolled sites, five rounds: the aggregator finishes by itself and the global
// model learns.
TEST_F(FederationTest, FederationFourNodesLearn) {
  const std::string ep = StartAggregator({"rounds.total=5", "rounds.min_available_clients=4"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) {
    // Issue 23 item 3: site-1 serves Prometheus metrics on a port the OS picks.
    ASSERT_NE(StartNode(i, ep, i == 1 ? std::vector<std::string>{"metrics.listen=127.0.0.1:0"}
                                      : std::vector<std::string>{}),
              nullptr);
  }

  ChildProcess* agg = aggregator_;
  const auto rc = agg->WaitExit(seconds(90));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);
  EXPECT_NE(agg->Log().find("federation finished: 5 rounds"), std::string::npos);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 5);
  if (HasFatalFailure()) return;
  for (const auto& l : lines) {
    EXPECT_GE(JsonNumber(l, "received").value_or(-1), 3) << l;  // min_clients
    EXPECT_EQ(JsonNumber(l, "selected").value_or(-1), 4) << l;
    EXPECT_EQ(JsonNumber(l, "rejected").value_or(-1), 0) << l;
  }
  EXPECT_GT(JsonNumber(lines.back(), "test_accuracy").value_or(-1), 0.75) << lines.back();
  std::cout << "[ info ] 5 rounds in " << ElapsedS() << " s; final " << lines.back() << "\n";
  // Issue 18: the built-in mlp's global model exports as ONNX (the store keeps its spec)
  // and scores what the aggregator printed.
  EXPECT_NEAR(ExportedAccuracy("run/aggregator.db"),
              JsonNumber(lines.back(), "test_accuracy").value_or(-1), 1e-4);

  // The node's Prometheus counters add up to its own metrics file (one line per round).
  static const std::regex kUrl(R"(Prometheus metrics on http://127\.0\.0\.1:([0-9]+)/metrics)");
  std::smatch url;
  const std::string site1 = children_[1]->Log();
  ASSERT_TRUE(std::regex_search(site1, url, kUrl)) << site1;
  auto body = testing_util::HttpGet(std::stoi(url[1]));
  ASSERT_TRUE(body.has_value());
  std::string error;
  auto got = testing_util::ParseExposition(*body, &error);
  ASSERT_TRUE(got.has_value()) << error;
  const auto node_lines = SplitLines(ReadWholeFile(dir_ / "run" / "site-1-metrics.jsonl"));
  double bytes = 0;
  for (const auto& l : node_lines) bytes += JsonNumber(l, "bytes_up").value_or(0);
  EXPECT_EQ(got->at("fedmesh_node_rounds_served_total"), static_cast<double>(node_lines.size())) << *body;
  EXPECT_EQ(got->at("fedmesh_node_upload_bytes_total"), bytes);
  EXPECT_EQ(got->at("fedmesh_node_last_round_served"), 5);
  EXPECT_EQ(got->at("fedmesh_node_training_duration_seconds_count"), static_cast<double>(node_lines.size()));
  EXPECT_GE(got->at("fedmesh_node_registrations_total"), 1);
  const std::string parsed = testing_util::ParseWithPrometheusClient(*body, dir_.string());
  if (parsed != "skip") {
    EXPECT_EQ(parsed, "") << *body;
  }
}

// Issue 8: five sites aggregate securely (SecAgg+, CurveZMQ, every message through the
// aggregator); site-5 SIGKILLs itself after it sent its masked update, when the unmask
// request arrives. The round completes at the unmasking deadline with the four survivors'
// shares, and, as SecAgg+ defines it, the dropped site's input is IN the sum: its self-mask
// is rebuilt from its neighbours' shares. The new global model equals the old one plus the
// mean of the five clipped changes each site recorded in its own store, and differs from
// the mean of the four survivors' alone.
TEST_F(FederationTest, FederationSecureAggregationSurvivesASiteKilledBeforeUnmasking) {
  ASSERT_TRUE(GenKey("site-5"));
  fs::copy_file(dir_ / "keys" / "site-5.pub", dir_ / "keys" / "allow" / "site-5.pub");
  const double kClip = 10.0;
  const std::string ep = StartAggregator(
      {"rounds.total=1", "rounds.clients_per_round=5", "rounds.min_clients=3",
       "rounds.min_available_clients=5", "secagg.enabled=true", "secagg.clip=10",
       "secagg.bits=24", "secagg.stage_timeout_s=10"});
  ASSERT_FALSE(ep.empty());
  std::vector<ChildProcess*> nodes;
  for (int i = 1; i <= 5; ++i) {
    const std::string id = "site-" + std::to_string(i);
    std::vector<std::string> sets = {"secagg.allow=keys/allow", "data.num_partitions=5",
                                     "data.index=" + std::to_string(i - 1)};
    std::map<std::string, std::string> env;
    if (i == 5) {
      sets.insert(sets.end(), {"node.id=" + id, "node.key=keys/" + id + ".key",
                               "node.db=run/" + id + ".db", "node.metrics=run/" + id + "-metrics.jsonl"});
      env["FEDMESH_FAULT"] = "secagg-kill-before-unmask";
    }
    nodes.push_back(StartNode(std::min(i, 4), ep, sets, id, env));
    ASSERT_NE(nodes.back(), nullptr);
  }
  const auto rc = aggregator_->WaitExit(seconds(180));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 180 s";
  ASSERT_EQ(*rc, 0);
  ChildProcess* victim = nodes[4];
  const auto victim_rc = victim->WaitExit(seconds(10));
  ASSERT_TRUE(victim_rc.has_value());
  EXPECT_EQ(*victim_rc, 128 + SIGKILL);
  EXPECT_NE(victim->Log().find("round 1: sent the masked update"), std::string::npos);
  EXPECT_NE(victim->Log().find("fault injection: killing this process before unmasking round 1"),
            std::string::npos);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(WaitForLog(nodes[i], "secure aggregation done on this side", seconds(10)))
        << nodes[i]->name();
  }
  const auto lines = MetricsLines();
  ExpectRounds(lines, 1);
  if (HasFatalFailure()) return;
  EXPECT_EQ(JsonNumber(lines[0], "received").value_or(-1), 5) << lines[0];
  EXPECT_EQ(JsonNumber(lines[0], "selected").value_or(-1), 5) << lines[0];
  EXPECT_GT(JsonNumber(lines[0], "test_accuracy").value_or(-1), 0.5) << lines[0];

  // What each site says it contributed, clipped as the protocol does.
  std::vector<std::vector<float>> inputs;
  for (int i = 1; i <= 5; ++i) {
    auto store = NodeStore::Open((dir_ / "run" / ("site-" + std::to_string(i) + ".db")).string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto cp = (*store)->LoadCheckpoint();
    ASSERT_TRUE(cp.ok() && cp->has_value());
    auto it = (*cp)->tensors.find("secagg/last_input");
    ASSERT_NE(it, (*cp)->tensors.end()) << "site-" << i << " recorded no input";
    std::vector<float> x = it->second;
    double norm = 0;
    for (float v : x) norm += double(v) * v;
    norm = std::sqrt(norm);
    if (norm > kClip) {
      for (float& v : x) v = static_cast<float>(v * (kClip / norm));
    }
    inputs.push_back(std::move(x));
  }
  auto agg = AggregatorStore::Open((dir_ / "run" / "aggregator.db").string());
  ASSERT_TRUE(agg.ok()) << agg.status().ToString();
  auto before = (*agg)->LoadModel(0), after = (*agg)->LoadModel(1);
  ASSERT_TRUE(before.ok() && after.ok());
  ASSERT_EQ(before->size(), inputs[0].size());
  double worst_five = 0, worst_four = 0;
  for (size_t k = 0; k < before->size(); ++k) {
    double five = 0, four = 0;
    for (int i = 0; i < 5; ++i) five += inputs[i][k] / 5.0;
    for (int i = 0; i < 4; ++i) four += inputs[i][k] / 4.0;
    const double got = double((*after)[k]) - (*before)[k];
    worst_five = std::max(worst_five, std::abs(got - five));
    worst_four = std::max(worst_four, std::abs(got - four));
  }
  std::cout << "[ info ] largest difference from the mean of all five inputs " << worst_five
            << ", from the four survivors' " << worst_four << "\n";
  // 24 bits over [-10, 10]: 1.2e-6 per coordinate; float rounding of the model adds ~1e-7.
  EXPECT_LT(worst_five, 1e-5);
  EXPECT_GT(worst_four, 1e-3) << "the dropped site's input is part of the sum";
}

// Issue 8, FedBuff between real processes: buffers of 2 updates from 4 sites training
// continuously; 6 models are made, each from 2 updates, and the model learns.
TEST_F(FederationTest, FederationBufferedRoundsLearn) {
  const std::string ep = StartAggregator({"rounds.total=6", "rounds.mode=buffered",
                                          "rounds.buffer_size=2", "rounds.min_clients=2",
                                          "rounds.min_available_clients=4"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  const auto rc = aggregator_->WaitExit(seconds(120));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 120 s";
  ASSERT_EQ(*rc, 0);
  const auto lines = MetricsLines();
  ExpectRounds(lines, 6);
  if (HasFatalFailure()) return;
  for (const auto& l : lines) EXPECT_EQ(JsonNumber(l, "received").value_or(-1), 2) << l;
  // Which 2 of the 4 label-skewed sites make a model depends on timing: one model can lean
  // to two sites' classes, so the bar is on the best of the last 3 (the last was 0.70-0.78).
  double best = -1;
  for (size_t i = lines.size() - 3; i < lines.size(); ++i) {
    best = std::max(best, JsonNumber(lines[i], "test_accuracy").value_or(-1));
  }
  EXPECT_GT(best, 0.7) << lines.back();
  EXPECT_GT(JsonNumber(lines.back(), "test_accuracy").value_or(-1), 0.5) << lines.back();
  std::cout << "[ info ] 6 buffered models in " << ElapsedS() << " s; final " << lines.back() << "\n";
}

// (f) Issue 4: every site sends its update as topk:0.01|int8|zstd (its own [codec] chain)
// with error feedback, and the aggregator sends the global model as fp16. The updates shrink
// at least 100x and the federation still learns.
TEST_F(FederationTest, FederationCompressedUpdatesLearn) {
  // With update prediction: from round 2 each task carries the model and p (fp16), and the
  // nodes send top-k of their change minus p, which the aggregator adds back.
  const std::string ep = StartAggregator({"rounds.total=10", "rounds.min_available_clients=4",
                                          "codec.downlink=fp16", "rounds.update_prediction=0.9"});
  ASSERT_FALSE(ep.empty());
  for (int i = 1; i <= 4; ++i) {
    ASSERT_NE(StartNode(i, ep, {"codec.chain=topk:0.01|int8|zstd"}), nullptr);
  }
  ChildProcess* agg = aggregator_;
  const auto rc = agg->WaitExit(seconds(180));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 180 s";
  ASSERT_EQ(*rc, 0);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 10);
  if (HasFatalFailure()) return;
  constexpr double kMlpParams = 784 * 256 + 256 + 256 * 10 + 10;
  for (const auto& l : lines) {
    const double received = JsonNumber(l, "received").value_or(0);
    EXPECT_GE(received, 3) << l;
    EXPECT_EQ(JsonNumber(l, "rejected").value_or(-1), 0) << l;
    EXPECT_EQ(JsonNumber(l, "bytes_up_raw").value_or(-1), received * 4 * kMlpParams) << l;
    EXPECT_GE(JsonNumber(l, "compression_ratio").value_or(0), 100.0) << l;
    EXPECT_NEAR(JsonNumber(l, "bytes_up_raw").value_or(0) / JsonNumber(l, "bytes_up").value_or(1),
                JsonNumber(l, "compression_ratio").value_or(0), 1e-3) << l;
    // fp16 downlink: half the float32 bytes per task sent.
    EXPECT_EQ(JsonNumber(l, "bytes_down").value_or(-1) * 2, JsonNumber(l, "bytes_down_raw").value_or(0))
        << l;
    // Whole models per round: one per task in round 1, two (model and p) per task after.
    const double models = JsonNumber(l, "bytes_down_raw").value_or(0) / (4 * kMlpParams);
    EXPECT_EQ(models, std::floor(models)) << l;
    if (JsonNumber(l, "round").value_or(0) > 1) {
      EXPECT_EQ(std::fmod(models, 2.0), 0.0) << l;
      EXPECT_GE(models, 2 * received) << l;
    }
  }
  const double first = JsonNumber(lines.front(), "test_accuracy").value_or(-1);
  const double last = JsonNumber(lines.back(), "test_accuracy").value_or(-1);
  EXPECT_GT(last, 0.70) << lines.back();
  EXPECT_GT(last, first) << "accuracy did not rise";
  // Each node says what it sent, round by round, in its own metrics file.
  const std::string node_metrics = ReadWholeFile(dir_ / "run" / "site-1-metrics.jsonl");
  EXPECT_NE(node_metrics.find("\"codec\":\"topk:0.01|int8:256|zstd:3\""), std::string::npos)
      << node_metrics;
  EXPECT_NE(node_metrics.find("\"residual_norm\":"), std::string::npos) << node_metrics;
  std::cout << "[ info ] compressed: 10 rounds in " << ElapsedS() << " s; first " << lines.front()
            << "\n         final " << lines.back() << "\n";
}

// (b) A fifth node whose key is not in the allowlist is refused at the CurveZMQ handshake:
// it never registers nor trains, and the aggregator names its key.
TEST_F(FederationTest, FederationUnenrolledNodeGetsNothing) {
  ASSERT_TRUE(GenKey("site-5"));  // generated, but its .pub is not copied into keys/allow
  auto intruder_key = ReadPublicIdentity((dir_ / "keys" / "site-5.pub").string());
  ASSERT_TRUE(intruder_key.ok()) << intruder_key.status().ToString();
  const std::string intruder_z85 = intruder_key->curve_public_z85();

  const std::string ep = StartAggregator(
      {"rounds.total=2", "rounds.min_clients=3", "rounds.clients_per_round=3"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  // The intruder uses site 4's data; its identity and files are its own.
  ChildProcess* intruder =
      StartNode(4, ep,
                {"node.id=site-5", "node.key=keys/site-5.key", "node.db=run/site-5.db",
                 "node.metrics=run/site-5-metrics.jsonl"},
                "site-5");
  ASSERT_NE(intruder, nullptr);
  // Its refusal is logged before any enrolled node exists, so the order is deterministic.
  ASSERT_TRUE(WaitForLog(agg, "refused connection", seconds(60)))
      << "the aggregator never logged the unenrolled node's refused handshake";
  const std::string agg_log_early = agg->Log();
  EXPECT_NE(agg_log_early.find("with key " + intruder_z85 + ": not in the allowlist"),
            std::string::npos)
      << "refusal does not name site-5's key " << intruder_z85;

  for (int i = 1; i <= 3; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  const auto rc = agg->WaitExit(seconds(90));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 2);
  for (const auto& l : lines) {
    EXPECT_EQ(JsonNumber(l, "selected").value_or(-1), 3) << l;
    EXPECT_EQ(JsonNumber(l, "received").value_or(-1), 3) << l;
  }
  const std::string agg_log = agg->Log();
  EXPECT_EQ(agg_log.find("node site-5"), std::string::npos) << "site-5 reached the engine";
  EXPECT_EQ(agg_log.find("from site-5"), std::string::npos) << "site-5 reached the engine";

  ASSERT_TRUE(intruder->Running()) << "the unenrolled node exited by itself";
  intruder->Signal(SIGTERM);
  const auto irc = intruder->WaitExit(seconds(30));
  ASSERT_TRUE(irc.has_value()) << "unenrolled node ignored SIGTERM for 30 s";
  EXPECT_EQ(*irc, 0);
  const std::string ilog = intruder->Log();
  EXPECT_EQ(ilog.find("registered with the aggregator"), std::string::npos) << ilog;
  EXPECT_EQ(ilog.find("FitTask"), std::string::npos) << ilog;
  EXPECT_EQ(ilog.find("trained"), std::string::npos) << ilog;
  EXPECT_NE(ilog.find("stopped: 0 round(s) served"), std::string::npos) << ilog;

  auto store = NodeStore::Open((dir_ / "run" / "site-5.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto cp = (*store)->LoadCheckpoint();
  ASSERT_TRUE(cp.ok()) << cp.status().ToString();
  EXPECT_TRUE(!cp->has_value() || !(*cp)->last_round_served.has_value())
      << "the unenrolled node's store records a served round " << *(*cp)->last_round_served;
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// (b, second half) Enrolment without a restart: a site refused at first is admitted after
// its .pub is copied into the allowlist directory and the aggregator gets SIGHUP; the node
// gets in by itself (re-register with backoff) and trains in the federation.
TEST_F(FederationTest, FederationSighupEnrollsANewSite) {
  ASSERT_TRUE(GenKey("site-5"));  // not yet in keys/allow
  const std::string ep = StartAggregator({"rounds.total=2", "rounds.min_clients=4",
                                          "rounds.clients_per_round=4",
                                          "rounds.min_available_clients=4"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  ChildProcess* newcomer =
      StartNode(4, ep,
                {"node.id=site-5", "node.key=keys/site-5.key", "node.db=run/site-5.db",
                 "node.metrics=run/site-5-metrics.jsonl"},
                "site-5");
  ASSERT_NE(newcomer, nullptr);
  for (int i = 1; i <= 3; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  ASSERT_TRUE(WaitForLog(agg, "refused connection", seconds(60)));
  // Four nodes are needed and only three are enrolled: no round can open yet.
  EXPECT_EQ(agg->Log().find("round 1 attempt 1 opened"), std::string::npos);

  fs::copy_file(dir_ / "keys" / "site-5.pub", dir_ / "keys" / "allow" / "site-5.pub");
  agg->Signal(SIGHUP);
  ASSERT_TRUE(WaitForLog(agg, "allowlist reloaded", seconds(30))) << agg->Log();
  ASSERT_TRUE(WaitForLog(agg, "node site-5 registered", seconds(60))) << agg->Log();

  const auto rc = agg->WaitExit(seconds(90));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);
  const auto lines = MetricsLines();
  ExpectRounds(lines, 2);
  if (HasFatalFailure()) return;
  for (const auto& l : lines) EXPECT_EQ(JsonNumber(l, "received").value_or(-1), 4) << l;
  EXPECT_NE(agg->Log().find("accepted update from site-5"), std::string::npos);
  EXPECT_NE(newcomer->Log().find(": trained"), std::string::npos) << newcomer->Log();
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// (c) A selected node is SIGKILLed while round 1 is open: the round closes at its deadline
// with the 3 other updates (min_clients 3), and the run still completes.
TEST_F(FederationTest, FederationNodeKilledMidRoundClosesWithQuorum) {
  const std::string ep = StartAggregator({"rounds.total=2", "rounds.min_clients=3",
                                          "rounds.clients_per_round=4",
                                          "rounds.min_available_clients=4", "rounds.timeout_s=5"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  std::vector<ChildProcess*> nodes;
  for (int i = 1; i <= 4; ++i) {
    nodes.push_back(StartNode(i, ep));
    ASSERT_NE(nodes.back(), nullptr);
  }
  ASSERT_TRUE(WaitForLog(agg, "round 1 attempt 1 opened with 4 node(s)", seconds(60)));
  ChildProcess* victim = nodes[3];
  victim->Kill();
  ASSERT_EQ(victim->Log().find("round 1: trained"), std::string::npos)
      << "site-4 finished round 1 before the kill landed; the test could not kill it mid-round";

  const auto rc = agg->WaitExit(seconds(60));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 60 s";
  ASSERT_EQ(*rc, 0);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 2);
  if (HasFatalFailure()) return;
  EXPECT_EQ(JsonNumber(lines[0], "selected").value_or(-1), 4) << lines[0];
  EXPECT_EQ(JsonNumber(lines[0], "attempts").value_or(-1), 1) << lines[0];
  for (const auto& l : lines) EXPECT_EQ(JsonNumber(l, "received").value_or(-1), 3) << l;
  EXPECT_EQ(agg->Log().find("accepted update from site-4"), std::string::npos);
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// (c, second half) A node SIGKILLed after it served round 1 is started again on its own
// store: it resumes from its checkpoint, registers again by itself and contributes to a
// later round; the run completes.
TEST_F(FederationTest, FederationKilledNodeRestartsFromItsStoreAndRejoins) {
  const std::string ep = StartAggregator({"rounds.total=3", "rounds.min_clients=3",
                                          "rounds.clients_per_round=4",
                                          "rounds.min_available_clients=4", "rounds.timeout_s=5"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  std::vector<ChildProcess*> nodes;
  for (int i = 1; i <= 4; ++i) {
    nodes.push_back(StartNode(i, ep));
    ASSERT_NE(nodes.back(), nullptr);
  }
  ASSERT_TRUE(WaitForLog(nodes[3], "round 1: trained", seconds(60)));
  ASSERT_TRUE(WaitForLog(agg, "round 1 closed", seconds(60)));
  nodes[3]->Kill();
  ChildProcess* again = StartNode(4, ep, {}, "site-4-restarted");
  ASSERT_NE(again, nullptr);

  const auto rc = agg->WaitExit(seconds(90));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);
  ExpectRounds(MetricsLines(), 3);
  const std::string log = again->Log();
  EXPECT_NE(log.find("resumed from checkpoint"), std::string::npos) << log;
  EXPECT_NE(log.find(": trained"), std::string::npos) << "the restarted site-4 never trained\n" << log;
  EXPECT_NE(log.find("sent"), std::string::npos) << log;
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// (d) The aggregator is SIGKILLed in round 2 after it accepted an update, and restarted on
// the same store and port: it restores exactly the accepted updates, the nodes find it by
// themselves, no restored update is accepted twice, and the run completes.
TEST_F(FederationTest, FederationAggregatorKilledAndRestartedResumes) {
  // Two local epochs make a round last long enough for the kill to land inside it.
  // min_available_clients 4 on restart too: a node whose round-2 update was restored sits
  // idle, and only its heartbeat (delivered to the round engine, which answers an unknown
  // node with Reject(not_enrolled)) makes it register again before FederatedClient's 60 s
  // silence fallback; the run must finish well inside that (regression: heartbeats used to
  // be swallowed by ZmqServer and round 3 opened only after 60 s).
  const std::vector<std::string> sets = {"rounds.total=3", "rounds.min_clients=2",
                                         "rounds.clients_per_round=4", "rounds.timeout_s=60",
                                         "train.epochs=2", "rounds.min_available_clients=4",
                                         "aggregator.heartbeat_ms=500"};
  std::vector<std::string> first_sets = sets;
  const std::string ep = StartAggregator(first_sets);
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg1 = aggregator_;
  for (int i = 1; i <= 4; ++i) ASSERT_NE(StartNode(i, ep), nullptr);

  ASSERT_TRUE(WaitForLog(agg1, "round 2: accepted update from", seconds(90)));
  agg1->Kill();
  const auto killed_at = Clock::now();
  ASSERT_EQ(MetricsLines().size(), 1u) << "round 2 closed before the kill";

  size_t accepted_before = 0;
  std::set<std::string> restored_nodes;
  {
    auto store = AggregatorStore::Open((dir_ / "run" / "aggregator.db").string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto open = (*store)->LoadOpenRound();
    ASSERT_TRUE(open.ok()) << open.status().ToString();
    ASSERT_TRUE(open->has_value()) << "no open round in the store after the kill";
    EXPECT_EQ((*open)->round, 2u);
    accepted_before = (*open)->updates.size();
    for (const auto& u : (*open)->updates) restored_nodes.insert(u.node);
  }
  ASSERT_GE(accepted_before, 1u);

  const std::string ep2 = StartAggregator(sets, ep, "aggregator-restarted");
  ASSERT_EQ(ep2, ep);
  ChildProcess* agg2 = aggregator_;
  const std::string resumed = "resuming round 2 attempt 1 with " +
                              std::to_string(accepted_before) + " accepted update(s)";
  EXPECT_TRUE(WaitForLog(agg2, "resuming round 2", seconds(30)));
  EXPECT_NE(agg2->Log().find(resumed), std::string::npos) << "expected: " << resumed;

  const auto rc = agg2->WaitExit(seconds(150));
  ASSERT_TRUE(rc.has_value()) << "restarted aggregator still running after 150 s";
  ASSERT_EQ(*rc, 0);
  const double after_restart_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  // The idle node came back through its heartbeat, not the 60 s silence fallback.
  EXPECT_LT(after_restart_s, 45.0);

  const auto lines = MetricsLines();
  ExpectRounds(lines, 3);
  if (HasFatalFailure()) return;
  const std::string log2 = agg2->Log();
  for (const auto& node : restored_nodes) {
    EXPECT_EQ(log2.find("round 2: accepted update from " + node + " ("), std::string::npos)
        << node << "'s restored update was accepted a second time";
  }
  // Round 2 counts the restored updates plus those accepted after the restart.
  size_t accepted_after = 0;
  for (size_t at = log2.find("round 2: accepted update from"); at != std::string::npos;
       at = log2.find("round 2: accepted update from", at + 1)) {
    ++accepted_after;
  }
  EXPECT_EQ(JsonNumber(lines[1], "received").value_or(-1),
            static_cast<double>(accepted_before + accepted_after))
      << lines[1];
  for (const auto& l : lines) EXPECT_GE(JsonNumber(l, "received").value_or(-1), 2) << l;
  std::cout << "[ info ] " << accepted_before << " update(s) restored; restart to finish "
            << after_restart_s << " s; total " << ElapsedS() << " s\n";
}

// Connects a TCP socket to `endpoint` (tcp://127.0.0.1:PORT); -1 on failure.
int ConnectTcp(const std::string& endpoint) {
  const int port = std::atoi(endpoint.substr(endpoint.rfind(':') + 1).c_str());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends as much of `data` as the peer takes before it closes, errors or stalls (bounded by
// SO_SNDTIMEO and `timeout`). Returns the bytes sent.
size_t SendBounded(int fd, const std::string& data, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  size_t sent = 0;
  while (sent < data.size() && Clock::now() < deadline) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    sent += static_cast<size_t>(n);
  }
  return sent;
}

// (e) Raw TCP garbage at the aggregator's port while a federation runs: random bytes, a
// truncated ZMTP greeting, a complete greeting asking for the NULL mechanism, a 64 MiB blob
// and an idle connection. The federation still finishes every round.
TEST_F(FederationTest, FederationAggregatorSurvivesGarbage) {
  const std::string ep = StartAggregator({"rounds.total=3", "rounds.min_available_clients=4"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  for (int i = 1; i <= 4; ++i) ASSERT_NE(StartNode(i, ep), nullptr);
  ASSERT_TRUE(WaitForLog(agg, "round 1 attempt 1 opened", seconds(60)));

  // An idle connection held across the attacks.
  const int idle = ConnectTcp(ep);
  EXPECT_GE(idle, 0);

  // 1. Random bytes (fixed seed).
  {
    std::string junk(4096, '\0');
    uint32_t x = 12345;
    for (char& c : junk) {
      x = x * 1664525u + 1013904223u;
      c = static_cast<char>(x >> 24);
    }
    const int fd = ConnectTcp(ep);
    ASSERT_GE(fd, 0);
    SendBounded(fd, junk, seconds(10));
    close(fd);
  }
  // 2. A truncated ZMTP 3 greeting: signature and major version, then close.
  {
    const std::string greeting("\xFF\x00\x00\x00\x00\x00\x00\x00\x01\x7F\x03", 11);
    const int fd = ConnectTcp(ep);
    ASSERT_GE(fd, 0);
    SendBounded(fd, greeting, seconds(10));
    close(fd);
  }
  // 3. A full greeting asking for the NULL mechanism (the server requires CURVE), then junk.
  {
    std::string greeting("\xFF\x00\x00\x00\x00\x00\x00\x00\x01\x7F\x03\x01", 12);
    std::string mech = "NULL";
    mech.resize(20, '\0');
    greeting += mech;
    greeting += std::string(1, '\0');   // as-server
    greeting += std::string(31, '\0');  // filler
    static const char kReady[] = "\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x06ROUTER";
    greeting += std::string(kReady, sizeof(kReady) - 1);
    const int fd = ConnectTcp(ep);
    ASSERT_GE(fd, 0);
    SendBounded(fd, greeting, seconds(10));
    close(fd);
  }
  // 4. 64 MiB of zeros.
  {
    const std::string blob(64u << 20, '\0');
    const int fd = ConnectTcp(ep);
    ASSERT_GE(fd, 0);
    const size_t sent = SendBounded(fd, blob, seconds(20));
    close(fd);
    std::cout << "[ info ] the aggregator took " << sent << " of " << blob.size()
              << " blob bytes before closing\n";
  }
  // 5. A burst of connections that close at once.
  for (int i = 0; i < 50; ++i) {
    const int fd = ConnectTcp(ep);
    if (fd >= 0) close(fd);
  }

  EXPECT_TRUE(agg->Running()) << "the aggregator died under garbage";
  const auto rc = agg->WaitExit(seconds(90));
  if (idle >= 0) close(idle);
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 90 s";
  ASSERT_EQ(*rc, 0);
  const auto lines = MetricsLines();
  ExpectRounds(lines, 3);
  for (const auto& l : lines) EXPECT_GE(JsonNumber(l, "received").value_or(-1), 3) << l;
  std::cout << "[ info ] done in " << ElapsedS() << " s\n";
}

// Issue 18: the aggregator loads an ONNX residual CNN written by torch.onnx.export (Conv,
// BatchNorm with running statistics, a residual Add, pooling) and ships its graph with
// every task; the four sites' configs name no ONNX file (they say "mlp") and train the
// aggregator's model. Site 1 pins the graph hash (expect_sha256) and trains too. After 5
// rounds the global model reaches 0.85 on the test set, and the model fedmesh-model
// exports from the store scores exactly what the aggregator printed.
const std::string kResnetOnnx =
    std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/resnet_bn/model_train.onnx";
const std::string kResnetSha = "602eb0f33760f14a51f62f97b028d880da75d02f42d88cfc84979c823f2cc3d9";

TEST_F(FederationTest, FederationOnnxModelFromTheAggregatorReachesTarget) {
  const std::string ep = StartAggregator({"rounds.total=5", "rounds.min_available_clients=4",
                                          "model.onnx=" + kResnetOnnx, "train.lr=0.05", "train.epochs=2",
                                          "train.momentum=0.9"});
  ASSERT_FALSE(ep.empty());
  ChildProcess* agg = aggregator_;
  EXPECT_NE(agg->Log().find("graph sha256 " + kResnetSha), std::string::npos) << agg->Log();
  std::vector<ChildProcess*> nodes;
  for (int i = 1; i <= 4; ++i) {
    std::vector<std::string> sets = {"data.partition=iid"};
    if (i == 1) sets.push_back("model.expect_sha256=" + kResnetSha);
    nodes.push_back(StartNode(i, ep, sets));
    ASSERT_NE(nodes.back(), nullptr);
  }
  const auto rc = agg->WaitExit(seconds(400));
  ASSERT_TRUE(rc.has_value()) << "aggregator still running after 400 s";
  ASSERT_EQ(*rc, 0);
  const auto lines = MetricsLines();
  ExpectRounds(lines, 5);
  if (HasFatalFailure()) return;
  const double final_accuracy = JsonNumber(lines.back(), "test_accuracy").value_or(-1);
  EXPECT_GE(final_accuracy, 0.85) << lines.back();
  for (ChildProcess* n : nodes) {
    EXPECT_NE(n->Log().find("training the aggregator's model: graph sha256 " + kResnetSha),
              std::string::npos) << n->Log();
  }

  // Export the last global model and score it with fedmesh's own ONNX reader.
  const double exported = ExportedAccuracy("run/aggregator.db");
  EXPECT_NEAR(exported, final_accuracy, 1e-4);
  std::cout << "[ info ] 5 rounds in " << ElapsedS() << " s; final " << lines.back()
            << "; exported model scores " << exported << "\n";
}

// Issue 18: a site whose [model] expect_sha256 names another architecture stops at the
// first task with exit code 2 and says why; it never trains.
TEST_F(FederationTest, FederationSiteRefusesAModelWithAnotherGraphHash) {
  const std::string ep = StartAggregator({"rounds.total=1", "rounds.min_clients=1",
                                          "rounds.clients_per_round=1",
                                          "rounds.min_available_clients=1",
                                          "model.onnx=" + kResnetOnnx});
  ASSERT_FALSE(ep.empty());
  const std::string pinned(64, 'a');
  ChildProcess* node = StartNode(1, ep, {"model.expect_sha256=" + pinned});
  ASSERT_NE(node, nullptr);
  const auto rc = node->WaitExit(seconds(60));
  ASSERT_TRUE(rc.has_value()) << "the node kept running with a refused model";
  EXPECT_EQ(*rc, 2);
  const std::string log = node->Log();
  EXPECT_NE(log.find("the aggregator's model has graph sha256 " + kResnetSha +
                     " but [model] expect_sha256 is " + pinned),
            std::string::npos) << log;
  EXPECT_EQ(log.find(": trained"), std::string::npos) << log;
}

}  // namespace
}  // namespace fedmesh

