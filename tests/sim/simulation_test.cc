// fedmesh-sim's engine (sim/simulation.h) on real Fashion-MNIST: determinism, each mode,
// faults, and the issue-6 accuracy target for 100 clients.
#include "sim/simulation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/data/data_source.h"
#include "crypto/dp/rdp_accountant.h"
#include "sim/sim_config.h"
#include "tests/sim/sim_test_util.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;

SimOptions Small() { return SmallSim(4); }

std::string TempPath(const std::string& name) {
  return (fs::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()))).string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Simulation, SameSeedSameMetricsFileByteForByteWhateverTheThreads) {
  REQUIRE_DATA();
  SimOptions a = Small();
  a.codec = "topk:0.05|int8";  // error feedback state and seeded codecs in play too
  a.dropout = 0.2;
  a.metrics_path = TempPath("det_a.jsonl");
  SimOptions b = a;
  b.metrics_path = TempPath("det_b.jsonl");
  b.threads = 1;
  auto ra = RunSimulation(a);
  auto rb = RunSimulation(b);
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  const std::string fa = ReadFile(a.metrics_path), fb = ReadFile(b.metrics_path);
  EXPECT_EQ(std::count(fa.begin(), fa.end(), '\n'), 4);
  EXPECT_EQ(fa, fb);
  EXPECT_EQ(ra->final_model, rb->final_model);
  // A different seed is a different run.
  SimOptions c = a;
  c.seed = 1;
  c.metrics_path = TempPath("det_c.jsonl");
  ASSERT_TRUE(RunSimulation(c).ok());
  EXPECT_NE(ReadFile(c.metrics_path), fa);
  for (auto* p : {&a, &b, &c}) fs::remove(p->metrics_path);
}

// Error-feedback residuals and momentum buffers spilled to SQLite between selections give
// exactly the run kept in memory.
TEST(Simulation, ClientStateSpilledToSqliteChangesNothing) {
  REQUIRE_DATA();
  SimOptions memory = Small();
  memory.clients = 8;
  memory.rounds = 4;
  memory.codec = "topk:0.01|int8";
  memory.trainer.sgd.momentum = 0.5f;
  SimOptions spilled = memory;
  spilled.state_memory_mb = 0;  // every state goes to disk
  spilled.state_spill_path = TempPath("spill.db");
  auto a = RunSimulation(memory);
  auto b = RunSimulation(spilled);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  ASSERT_EQ(a->rounds.size(), b->rounds.size());
  for (size_t i = 0; i < a->rounds.size(); ++i) {
    EXPECT_EQ(a->rounds[i].ToJson().str(), b->rounds[i].ToJson().str());
  }
  EXPECT_EQ(a->final_model, b->final_model);
  EXPECT_FALSE(fs::exists(spilled.state_spill_path));  // scratch, removed at the end
  // Without the carried state the run differs: the state matters.
  SimOptions off = memory;
  off.error_feedback.mode = codec::FeedbackMode::kOff;
  off.trainer.sgd.momentum = 0;
  auto c = RunSimulation(off);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->final_model, c->final_model);
}

TEST(Simulation, AggregatorModeLearnsAndCountsBytes) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.rounds = 5;
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rounds.size(), 5u);
  const size_t model_bytes = 4 * r->final_model.size();
  for (const auto& m : r->rounds) {
    EXPECT_EQ(m.participants, 5u);
    EXPECT_EQ(m.dropped, 0u);
    // Five float32 models each way, plus headers.
    EXPECT_GE(m.bytes_up, 5 * model_bytes);
    EXPECT_LT(m.bytes_up, 5 * model_bytes + 5 * 4096);
    EXPECT_GE(m.bytes_down, 5 * model_bytes);
    ASSERT_TRUE(m.test_accuracy.has_value());
  }
  EXPECT_GT(r->rounds.back().sim_time_s, r->rounds.front().sim_time_s);
  EXPECT_GT(*r->rounds.back().test_accuracy, 0.70);
  EXPECT_EQ(r->client_updates, 25u);
}

TEST(Simulation, CompressedUpdatesShrinkUplinkOnly) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.rounds = 3;
  o.codec = "topk:0.01|int8";
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& m : r->rounds) {
    EXPECT_GT(m.bytes_down, 100 * m.bytes_up) << m.ToJson().str();
  }
}

TEST(Simulation, DropoutLeavesSelectedClientsSilentAndRoundsStillClose) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.dropout = 0.4;
  o.min_clients = 1;
  o.round_timeout_s = 120;
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  uint64_t dropped = 0;
  for (const auto& m : r->rounds) {
    EXPECT_EQ(m.participants + m.dropped, 5u);
    dropped += m.dropped;
  }
  EXPECT_GT(dropped, 0u);
  // A round with a silent client waits for its deadline.
  for (size_t i = 0; i < r->rounds.size(); ++i) {
    const double start = i == 0 ? 0.0 : r->rounds[i - 1].sim_time_s;
    if (r->rounds[i].dropped > 0) {
      EXPECT_GE(r->rounds[i].sim_time_s - start, 119.0);
    }
  }
}

TEST(Simulation, CrashedClientsAreDroppedAndRejoin) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.clients = 4;
  o.clients_per_round = 3;
  o.rounds = 5;
  o.min_clients = 1;
  o.crashes = {CrashEvent{1, 2, 2}, CrashEvent{3, 3, 0}};  // 1: down in 2-3; 3: from 3 on
  o.round_timeout_s = 60;
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rounds.size(), 5u);
  for (const auto& m : r->rounds) EXPECT_EQ(m.participants + m.dropped, 3u) << m.ToJson().str();
  // Round 3 is selected among {0, 2, 3} (1 is known to be gone), then 3 crashes: 2 answer.
  // Round 4 waits until 1 has registered again: {0, 1, 2}, all answer; round 5 too.
  EXPECT_EQ(r->rounds[0].participants, 3u);
  EXPECT_EQ(r->rounds[2].participants, 2u);
  EXPECT_EQ(r->rounds[3].participants, 3u);
  EXPECT_EQ(r->rounds[4].participants, 3u);
  // The silent crashed client holds its round until the deadline.
  EXPECT_GE(r->rounds[2].sim_time_s - r->rounds[1].sim_time_s, 59.0);
}

TEST(Simulation, ClientDownFromRoundOneRegistersOnlyWhenItRejoins) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.clients = 4;
  o.clients_per_round = 3;
  o.rounds = 3;
  o.min_clients = 3;  // a silent selected client would fail the round at its deadline
  o.round_timeout_s = 30;
  o.crashes = {CrashEvent{0, 1, 2}};  // down in rounds 1-2, registers as round 3 opens
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rounds.size(), 3u);
  // Never selected while down: every round closes with all three answers, before its
  // deadline.
  for (const auto& m : r->rounds) {
    EXPECT_EQ(m.participants, 3u);
    EXPECT_EQ(m.dropped, 0u);
  }
  EXPECT_LT(r->rounds.back().sim_time_s, 30.0);
}

TEST(Simulation, ARoundThatCannotOpenWaitsForTheNextRejoin) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.clients = 3;
  o.clients_per_round = 3;
  o.rounds = 3;
  o.min_clients = 1;
  o.crashes = {CrashEvent{0, 2, 3}};  // down from round 2; back 3 rounds later
  o.round_timeout_s = 30;
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rounds.size(), 3u);
  EXPECT_EQ(r->rounds[1].participants, 2u);  // 0 selected, silent
  EXPECT_EQ(r->rounds[2].participants, 3u);  // opened only once 0 was back
}

TEST(Simulation, ByzantineSignFlipBreaksFedAvg) {
  REQUIRE_DATA();
  SimOptions clean = Small();
  clean.rounds = 5;
  SimOptions attacked = clean;
  attacked.byzantine = 0.5;
  auto rc = RunSimulation(clean);
  auto ra = RunSimulation(attacked);
  ASSERT_TRUE(rc.ok() && ra.ok());
  EXPECT_GT(*rc->rounds.back().test_accuracy, 0.70);
  EXPECT_LT(*ra->rounds.back().test_accuracy, *rc->rounds.back().test_accuracy - 0.2);
}

// Issue 8: the robust strategies keep a federation with 20% sign-flipping clients (4 of 20,
// scale 10) training where FedAvg is thrown back to chance in some rounds. Locally: FedAvg
// fell to 0.100 in round 2 and ended at 0.747 after swinging; median, trimmed_mean and
// multikrum never went below 0.70 and ended at 0.79; krum (one client's model) at 0.705.
TEST(Simulation, RobustStrategiesResistSignFlippingClients) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.clients_per_round = 10;
  o.rounds = 6;
  o.byzantine = 0.2;
  o.strategy_options.trim_fraction = 0.2;
  auto worst = [](const SimReport& r) {
    double w = 1;
    for (const auto& m : r.rounds) w = std::min(w, *m.test_accuracy);
    return w;
  };
  auto fedavg = RunSimulation(o);
  ASSERT_TRUE(fedavg.ok()) << fedavg.status().ToString();
  EXPECT_LT(worst(*fedavg), 0.35);
  for (const char* name : {"median", "trimmed_mean", "multikrum", "krum"}) {
    o.strategy = name;
    auto r = RunSimulation(o);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    const bool single = std::string(name) == "krum";
    EXPECT_GT(worst(*r), single ? 0.55 : 0.65) << name;
    EXPECT_GT(*r->rounds.back().test_accuracy, single ? 0.6 : 0.75) << name;
  }
}

// Issue 8: central DP in the simulator: every round reports the accountant's epsilon for
// q = clients_per_round / clients, the run stops before the round that would exceed the
// budget (and evaluates the round it stopped at), and the seeded noise replays exactly.
TEST(Simulation, CentralDpReportsEpsilonAndStopsAtTheBudget) {
  REQUIRE_DATA();
  auto reference = RdpAccountant::Create().value();
  std::vector<double> eps;
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(reference.Compose(5.0 / 20.0, 1.0).ok());
    eps.push_back(reference.Epsilon(1e-5)->epsilon);
  }
  SimOptions o = Small();
  o.rounds = 6;
  o.eval_every = 5;
  o.strategy_options.dp.central = true;
  o.strategy_options.dp.noise_multiplier = 1.0;
  o.strategy_options.dp.clip = 1.0;
  o.strategy_options.dp.epsilon_budget = (eps[2] + eps[3]) / 2;
  auto a = RunSimulation(o);
  auto b = RunSimulation(o);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  ASSERT_EQ(a->rounds.size(), 3u);
  for (size_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(a->rounds[r].epsilon.has_value());
    EXPECT_DOUBLE_EQ(*a->rounds[r].epsilon, eps[r]);
    EXPECT_EQ(*a->rounds[r].clip_norm, 1.0);
  }
  EXPECT_TRUE(a->rounds.back().test_accuracy.has_value());
  EXPECT_THAT(a->stopped_early, ::testing::HasSubstr("privacy budget"));
  EXPECT_EQ(a->final_model, b->final_model);
  EXPECT_NE(a->rounds.back().ToJson().str().find("\"epsilon\":"), std::string::npos);
}

// Issue 8, FedBuff: with 30% of clients 10x slower, buffered rounds (5 updates per model
// from 10 clients training continuously) make 8 models in far less simulated time than 8
// synchronous rounds, which each wait for their slowest client, and still learn. Locally:
// buffered 0.8075 at 18 s, synchronous 0.8195 at 111 s.
TEST(Simulation, BufferedRoundsOutpaceStragglers) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.clients_per_round = 10;
  o.rounds = 8;
  o.stragglers = 0.3;
  o.straggler_slowdown = 10;
  auto sync = RunSimulation(o);
  o.round_mode = RoundMode::kBuffered;
  o.buffer_size = 5;
  auto buffered = RunSimulation(o);
  ASSERT_TRUE(sync.ok() && buffered.ok()) << buffered.status().ToString();
  ASSERT_EQ(buffered->rounds.size(), 8u);
  EXPECT_LT(buffered->rounds.back().sim_time_s, 0.5 * sync->rounds.back().sim_time_s);
  EXPECT_GT(*buffered->rounds.back().test_accuracy, 0.75);
  for (const auto& m : buffered->rounds) EXPECT_EQ(m.participants, 5u);
  EXPECT_LE(buffered->client_updates, 8u * 5u + 10u);
}

TEST(Simulation, GossipModeConvergesWithConsensusDistance) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.mode = SimMode::kGossip;
  o.clients = 8;
  o.rounds = 6;
  o.eval_clients = 2;
  o.protocol = "dpsgd";
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& m : r->rounds) {
    ASSERT_TRUE(m.consensus_distance.has_value());
    EXPECT_EQ(m.participants, 8u);
    EXPECT_GT(m.bytes_up, 0u);
    EXPECT_EQ(m.bytes_up, m.bytes_down);  // nothing lost
  }
  // Mixing keeps the nodes together while they train on skewed data.
  double norm = 0;
  for (float v : r->final_model) norm += double(v) * v;
  EXPECT_LT(r->rounds.back().consensus_distance.value(), 0.05 * norm);
  EXPECT_GT(*r->rounds.back().test_accuracy, 0.6);
}

TEST(Simulation, GossipChocoWithCompressionSendsFewerBytes) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.mode = SimMode::kGossip;
  o.clients = 8;
  o.rounds = 3;
  o.eval_clients = 1;
  o.protocol = "dpsgd";
  auto plain = RunSimulation(o);
  o.protocol = "choco";
  o.codec = "topk:0.01|int8";
  auto choco = RunSimulation(o);
  ASSERT_TRUE(plain.ok() && choco.ok()) << choco.status().ToString();
  EXPECT_GT(plain->rounds.back().bytes_up, 30 * choco->rounds.back().bytes_up);
}

TEST(Simulation, LocalAndCentralBaselines) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.rounds = 2;
  o.mode = SimMode::kCentral;
  auto central = RunSimulation(o);
  ASSERT_TRUE(central.ok()) << central.status().ToString();
  EXPECT_GT(*central->rounds.back().test_accuracy, 0.80);
  EXPECT_EQ(central->rounds.back().bytes_up, 0u);
  o.mode = SimMode::kLocal;
  o.partition = "shards";  // two classes per client: alone, a client cannot exceed ~0.2
  o.eval_clients = 3;
  auto local = RunSimulation(o);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_LT(*local->rounds.back().test_accuracy, 0.35);
  EXPECT_EQ(local->rounds.back().participants, 5u);
}

// sim.mode = allreduce (issue 21 item 5): the ranks average exactly every round, so they end
// where no rank alone gets (local mode, same clients), and each round's all-reduce in
// virtual time sits at its bandwidth bound, plus at most one latency and a chunk per step.
TEST(Simulation, AllreduceRanksAverageExactlyAndTheRingMeetsItsBound) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.mode = SimMode::kAllreduce;
  o.rounds = 3;
  o.partition = "shards";  // two classes per client: alone, a client cannot exceed ~0.2
  auto run = RunSimulation(o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_EQ(run->rounds.size(), 3u);
  SimOptions alone = o;
  alone.mode = SimMode::kLocal;
  alone.eval_clients = 3;
  auto local = RunSimulation(alone);
  ASSERT_TRUE(local.ok());
  std::printf("allreduce %.4f, local %.4f\n", *run->rounds.back().test_accuracy, *local->rounds.back().test_accuracy);
  EXPECT_GT(*run->rounds.back().test_accuracy, *local->rounds.back().test_accuracy + 0.1)
      << "the ranks did not pool what they learned";
  for (const SimRoundMetrics& m : run->rounds) {
    ASSERT_TRUE(m.allreduce_s && m.allreduce_bound_s);
    const double ranks = static_cast<double>(m.participants);
    EXPECT_GE(*m.allreduce_s, *m.allreduce_bound_s);
    // A latency (< 1 s at the default links) and a 1 MiB chunk per step at most.
    EXPECT_LE(*m.allreduce_s, *m.allreduce_bound_s * 1.1 + 2 * (ranks - 1) * 1.0) << m.ToJson().str();
    EXPECT_GT(m.bytes_up, 0u);
  }
  const std::string line = run->rounds[0].ToJson().str();
  EXPECT_NE(line.find("\"allreduce_s\":"), std::string::npos) << line;
}

// Failures in allreduce mode follow the elastic ring: rank 1 crashes as round 2 opens and is
// back for round 3. Round 2 averages without it after the detection timeout and the
// re-forming; round 3 re-forms again and broadcasts the model to it; rounds 1 and 4 cost the
// ring alone. The ranks still learn together.
TEST(Simulation, AllreduceCrashedRankIsWaitedForThenLeftOutThenRejoins) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.mode = SimMode::kAllreduce;
  o.rounds = 4;
  o.crashes = {CrashEvent{1, 2, 1}};
  o.allreduce_timeout_s = 10.0;
  o.allreduce_reform_s = 2.0;
  auto run = RunSimulation(o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_EQ(run->rounds.size(), 4u);
  const auto& r = run->rounds;
  const uint64_t k = r[0].participants;
  ASSERT_GE(k, 3u);
  EXPECT_EQ(r[1].participants, k - 1);
  EXPECT_EQ(r[1].dropped, 1u);
  EXPECT_EQ(r[2].participants, k);
  EXPECT_EQ(r[3].participants, k);
  EXPECT_LT(*r[0].allreduce_s, 10.0);
  EXPECT_LT(*r[3].allreduce_s, 10.0);
  EXPECT_NEAR(*r[1].allreduce_s - 12.0, *r[1].allreduce_bound_s, *r[1].allreduce_bound_s * 0.1 + 2 * k) << r[1].ToJson().str();
  EXPECT_GE(*r[2].allreduce_s, 2.0 + *r[2].allreduce_bound_s);
  EXPECT_LT(*r[2].allreduce_s, 10.0);
  EXPECT_GT(*r.back().test_accuracy, 0.5);
  // Dropouts: a rank that trains and never answers costs the timeout too.
  SimOptions d = o;
  d.crashes.clear();
  d.dropout = 0.5;
  auto dropped = RunSimulation(d);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  int with_losses = 0;
  for (const SimRoundMetrics& m : dropped->rounds) {
    ASSERT_TRUE(m.allreduce_s.has_value());
    if (m.participants < k) {
      ++with_losses;
      EXPECT_GE(*m.allreduce_s, 12.0) << m.ToJson().str();
    }
  }
  EXPECT_GT(with_losses, 0);
}

// allreduce mode's [collective] keys: out of range, a key that is not one, or a value that is
// not a number is refused naming the key; in range they reach the options in seconds.
TEST(Simulation, AllreduceCollectiveKeysAreBoundedAndNamed) {
  const std::pair<std::string, std::string> bad[] = {
      {"collective.timeout_ms=0", "[collective] timeout_ms"},
      {"collective.reform_window_ms=-1", "[collective] reform_window_ms"},
      {"collective.timeout_ms=soon", "[collective] timeout_ms"},
      {"collective.window_ms=5", "window_ms"},
  };
  for (const auto& [set, key] : bad) {
    auto o = LoadSimConfig("", {"sim.mode=allreduce", set});
    ASSERT_FALSE(o.ok()) << set;
    EXPECT_NE(o.status().message().find(key), std::string::npos) << set << ": " << o.status().ToString();
  }
  auto o = LoadSimConfig("", {"sim.mode=allreduce", "collective.timeout_ms=2500", "collective.reform_window_ms=0"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_DOUBLE_EQ(o->allreduce_timeout_s, 2.5);
  EXPECT_DOUBLE_EQ(o->allreduce_reform_s, 0.0);
}

TEST(Simulation, BadOptionsAreRefusedWithTheField) {
  SimOptions o = Small();
  o.clients_per_round = 50;
  EXPECT_NE(RunSimulation(o).status().message().find("clients_per_round"), std::string::npos);
  o = Small();
  o.dropout = 1.5;
  EXPECT_NE(Validate(o).message().find("dropout"), std::string::npos);
  o = Small();
  o.codec = "topk:2";
  EXPECT_EQ(Validate(o).code(), StatusCode::kInvalidArgument);
  o = Small();
  o.mode = SimMode::kGossip;
  o.protocol = "choco";
  o.topology = "random";
  EXPECT_EQ(Validate(o).code(), StatusCode::kInvalidArgument);
  o = Small();
  o.crashes = {CrashEvent{20, 1, 0}};
  EXPECT_NE(Validate(o).message().find("crash of client 20"), std::string::npos);
  o = Small();
  o.strategy_options.dp.distributed = true;  // needs secure aggregation, not simulated
  EXPECT_NE(Validate(o).message().find("dp mode distributed"), std::string::npos);
  o = Small();
  o.strategy_options.dp.central = true;  // its accountant assumes synchronous rounds
  o.round_mode = RoundMode::kBuffered;
  EXPECT_NE(Validate(o).message().find("central DP accounts synchronous rounds"), std::string::npos);
  // From the config: the key is named.
  auto dp_buffered = LoadSimConfig("", {"dp.mode=central", "rounds.mode=buffered"});
  ASSERT_FALSE(dp_buffered.ok());
  EXPECT_NE(dp_buffered.status().message().find("[rounds] mode"), std::string::npos)
      << dp_buffered.status().ToString();
  o = Small();
  o.round_mode = RoundMode::kBuffered;
  o.buffer_size = 6;  // more than clients_per_round (5)
  EXPECT_NE(Validate(o).message().find("buffer_size 6"), std::string::npos);
  o = Small();
  o.data_shards = 21;
  EXPECT_NE(Validate(o).message().find("data_shards"), std::string::npos);
  EXPECT_FALSE(ParseCrashEvent("3@0").ok());
  EXPECT_FALSE(ParseCrashEvent("x@2").ok());
  EXPECT_FALSE(ParseCrashEvent("3@2:").ok());
  auto e = ParseCrashEvent("3@5:2");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->client, 3u);
  EXPECT_EQ(e->round, 5u);
  EXPECT_EQ(e->rounds_down, 2u);
}

TEST(Simulation, TooManyClientsForTheDataNeedShards) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.clients = 100000;
  o.clients_per_round = 2;
  o.rounds = 1;
  auto r = RunSimulation(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("data_shards"), std::string::npos) << r.status().ToString();
  o.data_shards = 1000;  // clients share partitions
  r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rounds.back().participants, 2u);
}

TEST(SimConfig, KeysAndErrorsNameTheKey) {
  auto o = LoadSimConfig("", {"sim.clients=30", "sim.codec=topk:0.01|int8", "faults.crash=3@2:1",
                              "sim.mode=gossip", "sim.protocol=choco"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->clients, 30u);
  EXPECT_EQ(o->mode, SimMode::kGossip);
  ASSERT_EQ(o->crashes.size(), 1u);
  EXPECT_EQ(o->crashes[0].rounds_down, 1u);
  auto bad = LoadSimConfig("", {"sim.clients=5", "sim.clients_per_round=10"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[sim] clients_per_round"), std::string::npos)
      << bad.status().ToString();
  bad = LoadSimConfig("", {"faults.crash=oops"});
  EXPECT_NE(bad.status().message().find("[faults] crash"), std::string::npos);
  bad = LoadSimConfig("", {"sim.cleints=5"});
  EXPECT_NE(bad.status().message().find("clients"), std::string::npos);  // did you mean
  bad = LoadSimConfig("", {"sim.dropout=2"});
  EXPECT_FALSE(bad.ok());
  bad = LoadSimConfig("", {"sim.codec=zip"});
  EXPECT_NE(bad.status().message().find("[sim] codec"), std::string::npos) << bad.status().ToString();
  bad = LoadSimConfig("", {"sim.mode=gossip", "sim.protocol=choco", "sim.topology=random"});
  EXPECT_FALSE(bad.ok());
  bad = LoadSimConfig("", {"rounds.update_prediction=1.5"});
  EXPECT_NE(bad.status().message().find("[rounds] update_prediction"), std::string::npos)
      << bad.status().ToString();
  bad = LoadSimConfig("", {"sim.mode=gossip", "rounds.update_prediction=0.5"});
  EXPECT_NE(bad.status().message().find("update_prediction needs mode = \"aggregator\""),
            std::string::npos)
      << bad.status().ToString();
  bad = LoadSimConfig("", {"rounds.mode=buffered", "rounds.update_prediction=0.5"});
  EXPECT_NE(bad.status().message().find("[rounds] update_prediction"), std::string::npos)
      << bad.status().ToString();
}

TEST(Simulation, UpdatePredictionWithALosslessCodecLeavesTheModelAndSendsItDown) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.rounds = 4;
  auto plain = RunSimulation(o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  o.update_prediction = 0.9;
  auto predicted = RunSimulation(o);
  ASSERT_TRUE(predicted.ok()) << predicted.status().ToString();
  // The nodes send change - p and the aggregator adds p back: FedAvg's result, up to float
  // rounding (a few ulps per round that training then carries on).
  ASSERT_EQ(plain->final_model.size(), predicted->final_model.size());
  double max_diff = 0;
  for (size_t i = 0; i < plain->final_model.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double(plain->final_model[i]) - predicted->final_model[i]));
  }
  EXPECT_LT(max_diff, 1e-3);
  EXPECT_NEAR(*predicted->rounds.back().test_accuracy, *plain->rounds.back().test_accuracy, 0.005);
  // Round 1 has nothing to predict from; later FitTasks carry the model and p.
  EXPECT_EQ(predicted->rounds[0].bytes_down, plain->rounds[0].bytes_down);
  for (size_t r = 1; r < 4; ++r) {
    EXPECT_GT(predicted->rounds[r].bytes_down, 19 * plain->rounds[r].bytes_down / 10) << r;
    // The uplink carries the same float32 changes; each FitResult has 2 more bytes (the
    // applied_prediction flag).
    EXPECT_LE(predicted->rounds[r].bytes_up, plain->rounds[r].bytes_up + 5 * 2) << r;
    EXPECT_GE(predicted->rounds[r].bytes_up, plain->rounds[r].bytes_up) << r;
  }
}

// Issue 6's experiment: 100 clients, 10 per round, Dirichlet(0.5), mlp, 50 rounds (5 local
// epochs, lr 0.1, as examples/sim/fedavg.toml).
SimOptions HundredClients() {
  SimOptions o;
  o.local_epochs = 5;
  o.trainer.sgd.lr = 0.1f;
  o.eval_every = 10;
  return o;
}

// Issue 6 acceptance: final accuracy >= 0.84.
TEST(Simulation, HundredClientsFedAvgReachesTarget) {
  REQUIRE_DATA();
  const SimOptions o = HundredClients();
  auto r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& last = r->rounds.back();
  std::cout << "[ info ] 100 clients, 50 rounds: " << last.ToJson().str() << " in "
            << r->wall_seconds << " s\n";
  EXPECT_GE(*last.test_accuracy, 0.84);
}

// Issue 6 acceptance, compressed: the same run with topk:0.01|int8 updates (error feedback
// auto, and update prediction 0.9) loses at most 1 point against uncompressed, for at
// least 100x fewer uplink bytes. Seed 0 gave 0.8557 against 0.8579 (bench/RESULTS.md).
TEST(Simulation, HundredClientsTopKWithUpdatePredictionWithinAPointOfUncompressed) {
  REQUIRE_DATA();
  SimOptions o = HundredClients();
  o.eval_every = 50;
  auto plain = RunSimulation(o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  o.codec = "topk:0.01|int8";
  o.update_prediction = 0.9;
  auto topk = RunSimulation(o);
  ASSERT_TRUE(topk.ok()) << topk.status().ToString();
  uint64_t up_plain = 0, up_topk = 0;
  for (const auto& m : plain->rounds) up_plain += m.bytes_up;
  for (const auto& m : topk->rounds) up_topk += m.bytes_up;
  const double a = *plain->rounds.back().test_accuracy, b = *topk->rounds.back().test_accuracy;
  std::cout << "[ info ] uncompressed " << a << ", topk:0.01|int8 with prediction " << b
            << ", uplink " << static_cast<double>(up_plain) / static_cast<double>(up_topk)
            << "x smaller\n";
  EXPECT_GE(b, a - 0.01);
  EXPECT_GE(up_plain, 100 * up_topk);
}


namespace dp_sgd_sim {

// Issue 27 in fedmesh-sim: every client trains with DP-SGD and keeps its own ledger, through
// the node's own RunFitTask. The largest epsilon is each client's accountant's (a client that
// trained in r rounds spent r x ceil(n / batch) steps at q = batch / n); runs replay byte for
// byte (the noise is seeded); and a budget makes clients refuse, so rounds shrink.
TEST(SimulationDpSgd, ClientsSpendTheirOwnEpsilonReplayAndRefusePastTheBudget) {
  REQUIRE_DATA();
  SimOptions a = SmallSim(4);
  a.model.hidden = {32};
  a.trainer.batch_size = 50;
  a.trainer.sgd.lr = 0.5f;
  a.partition = "iid";  // 3000 samples per client
  a.privacy.mode = "dp-sgd";
  a.privacy.noise_multiplier = 1.0;
  a.metrics_path = TempPath("dpsgd_a.jsonl");
  SimOptions b = a;
  b.metrics_path = TempPath("dpsgd_b.jsonl");
  b.threads = 1;
  auto ra = RunSimulation(a);
  auto rb = RunSimulation(b);
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  EXPECT_EQ(ReadFile(a.metrics_path), ReadFile(b.metrics_path));
  ASSERT_EQ(ra->rounds.size(), 4u);
  double last = 0;
  for (const auto& r : ra->rounds) {
    ASSERT_TRUE(r.dp_sgd_epsilon_max.has_value());
    EXPECT_GE(*r.dp_sgd_epsilon_max, last);
    last = *r.dp_sgd_epsilon_max;
  }
  // 60000 samples over 20 clients: 3000 each (iid), 60 steps per round at q = 50 / 3000.
  // The largest epsilon is that of some client that trained k rounds, k in 1..4.
  bool matches = false;
  for (int k = 1; k <= 4; ++k) {
    auto acc = RdpAccountant::Create().value();
    ASSERT_TRUE(acc.Compose(50.0 / 3000.0, 1.0, 60 * k).ok());
    matches = matches || std::abs(acc.Epsilon(1e-5)->epsilon - last) < 1e-9 * last;
  }
  EXPECT_TRUE(matches) << last;
  EXPECT_NE(ReadFile(a.metrics_path).find("\"dp_sgd_epsilon_max\""), std::string::npos);

  // A budget one round's spend allows: clients that trained once refuse after that.
  SimOptions c = a;
  auto one = RdpAccountant::Create().value();
  ASSERT_TRUE(one.Compose(50.0 / 3000.0, 1.0, 60).ok());
  c.privacy.epsilon_budget = one.Epsilon(1e-5)->epsilon * 1.01;
  c.rounds = 6;
  c.min_clients = 1;  // rounds close with whoever still has budget
  c.metrics_path = TempPath("dpsgd_c.jsonl");
  auto rc = RunSimulation(c);
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  uint64_t dropped = 0;
  for (const auto& r : rc->rounds) {
    dropped += r.dropped;
    EXPECT_LE(*r.dp_sgd_epsilon_max, c.privacy.epsilon_budget) << r.round;
  }
  EXPECT_GT(dropped, 0u);  // 6 rounds x 5 of 20 clients: some are chosen twice
  for (auto* p : {&a, &b, &c}) fs::remove(p->metrics_path);
}

TEST(SimulationDpSgd, RefusedWhereItDoesNotRun) {
  SimOptions o = SmallSim(1);
  o.privacy.mode = "dp-sgd";
  o.batched_clients = 5;
  EXPECT_THAT(Validate(o).message(), ::testing::HasSubstr("privacy mode dp-sgd"));
  o.batched_clients = 0;
  o.device = "cuda";
  EXPECT_THAT(Validate(o).message(), ::testing::HasSubstr("cpu device"));
  auto cfg = LoadSimConfig("", {"privacy.mode=dp-sgd", "sim.batched_clients=4"});
  ASSERT_FALSE(cfg.ok());
  EXPECT_THAT(cfg.status().message(), ::testing::HasSubstr("[privacy] mode"));
  // A graph with BatchNormalization: refused at the start, before any client trains.
  o.device = "cpu";
  o.model.name = std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/resnet_bn/model_train.onnx";
  ASSERT_TRUE(Validate(o).ok()) << Validate(o).ToString();
  auto run = RunSimulation(o);
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(), ::testing::HasSubstr("has BatchNormalization"));
}

}  // namespace dp_sgd_sim
}  // namespace
}  // namespace fedmesh
