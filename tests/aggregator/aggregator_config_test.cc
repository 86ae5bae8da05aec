// Tests of fedmesh-aggregator's configuration: typed values and errors that name the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "aggregator/aggregator_config.h"
#include "config/admin_kit_config.h"
#include "config/config_loader.h"
#include "tests/config/config_temp_dir.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using TempDir = testing_util::ConfigTempDir;

TEST(ConfigAggregator, LoadsTypedConfig) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", R"(
[federation]
id = "fed-1"
[aggregator]
listen = "tcp://*:7000"
allow = "enrolled"
[rounds]
total = 20
clients_per_round = 5
min_clients = 3
timeout_s = 30
strategy = "fedprox"
prox_mu = 0.1
[train]
epochs = 2
lr = 0.05
[model]
name = "logreg"
seed = 3
[eval]
dataset = ""
)");
  auto r = LoadAggregatorConfig(path, {"rounds.total=25"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const AggregatorConfig& c = *r;
  EXPECT_EQ(c.federation_id, "fed-1");
  EXPECT_EQ(c.rounds.federation_id, "fed-1");
  EXPECT_EQ(c.listen, "tcp://*:7000");
  EXPECT_EQ(c.allow_dir, (dir.path() / "enrolled").string());
  EXPECT_EQ(c.key_path, (dir.path() / "aggregator.key").string());
  EXPECT_EQ(c.metrics_path, "");
  EXPECT_EQ(c.rounds.total_rounds, 25u);
  EXPECT_EQ(c.rounds.clients_per_round, 5);
  EXPECT_EQ(c.rounds.min_clients, 3);
  EXPECT_DOUBLE_EQ(c.rounds.timeout_s, 30.0);
  EXPECT_EQ(c.rounds.local_epochs, 2);
  EXPECT_DOUBLE_EQ(c.rounds.learning_rate, 0.05);
  EXPECT_EQ(c.strategy, "fedprox");
  EXPECT_DOUBLE_EQ(c.strategy_options.prox_mu, 0.1);
  EXPECT_EQ(c.model.name, "logreg");
  EXPECT_EQ(c.model_seed, 3u);
  EXPECT_EQ(c.eval_dataset, "");
}

TEST(ConfigAggregator, ValidatorErrorsNameTheKey) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", "[federation]\nid = \"f\"\n[rounds]\nmin_clients = 8\n");
  auto r = LoadAggregatorConfig(path, {});  // clients_per_round defaults to 10
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto bad = LoadAggregatorConfig(path, {"rounds.clients_per_round=4"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr(path + ":4:15: [rounds] min_clients: min_clients (8) exceeds clients_per_round (4)"));

  auto id = LoadAggregatorConfig(path, {"federation.id=has space"});
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("--set federation.id=has space: [federation] id: "));

  auto missing = LoadAggregatorConfig("", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("missing required key [federation] id"));
}

// [status_page] off loopback needs a token file; [admin] keys are paths beside the config.
TEST(ConfigAggregator, StatusPageOffLoopbackNeedsAToken) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", "[federation]\nid = \"f\"\n[status_page]\nlisten = \"0.0.0.0:8080\"\n"
                                           "[admin]\nlisten = \"tcp://127.0.0.1:5556\"\n");
  auto bad = LoadAggregatorConfig(path, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr(path + ":4:10: [status_page] listen: the status page at 0.0.0.0:8080 "
                                                "is not on a loopback address: set [status_page] token_file"));
  auto ok = LoadAggregatorConfig(path, {"status_page.token_file=token"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->status_listen, "0.0.0.0:8080");
  for (const char* loopback : {"127.0.0.1:0", "localhost:8080", "[::1]:8080"}) {
    auto local = LoadAggregatorConfig(path, {std::string("status_page.listen=") + loopback});
    EXPECT_TRUE(local.ok()) << loopback << ": " << local.status().ToString();
  }
  EXPECT_EQ(ok->admin_listen, "tcp://127.0.0.1:5556");
  EXPECT_EQ(ok->admin_dir, (fs::path(path).parent_path() / "admins").string());
  auto typo = LoadAggregatorConfig(path, {"admin.admin=x"});
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(), HasSubstr("admin"));
  // Listen addresses that are not HOST:PORT are refused when the file loads, naming the key.
  auto no_port = LoadAggregatorConfig(path, {"status_page.listen=127.0.0.1", "status_page.token_file=t"});
  ASSERT_FALSE(no_port.ok());
  EXPECT_THAT(no_port.status().message(),
              HasSubstr("[status_page] listen: \"127.0.0.1\" is not HOST:PORT"));
  auto metrics = LoadAggregatorConfig(path, {"metrics.listen=127.0.0.1:99999", "status_page.token_file=t"});
  ASSERT_FALSE(metrics.ok());
  EXPECT_THAT(metrics.status().message(), HasSubstr("[metrics] listen: \"127.0.0.1:99999\" is not HOST:PORT"));
  auto eval = LoadAggregatorConfig(path, {"eval.dataset=fashion", "status_page.token_file=t"});
  ASSERT_FALSE(eval.ok());
  EXPECT_THAT(eval.status().message(), HasSubstr("[eval] dataset: unknown data source 'fashion'"));
  EXPECT_TRUE(LoadAggregatorConfig(path, {"eval.dataset=", "status_page.token_file=t"}).ok());
  EXPECT_EQ(ok->payload_digest, wire::DigestKind::kBlake3);
  auto sha = LoadAggregatorConfig(path, {"aggregator.payload_digest=sha256", "status_page.token_file=t"});
  ASSERT_TRUE(sha.ok()) << sha.status().ToString();
  EXPECT_EQ(sha->payload_digest, wire::DigestKind::kSha256);
  auto md5 = LoadAggregatorConfig(path, {"aggregator.payload_digest=md5", "status_page.token_file=t"});
  ASSERT_FALSE(md5.ok());
  EXPECT_THAT(md5.status().message(), HasSubstr("[aggregator] payload_digest"));
}

// [model] input_shape / num_classes fix a built-in model's shape; a fraction or a 4-D shape
// names the key.
// Issue 19's aggregator keys refuse what cannot work, naming the key: federated
// normalization without statistics, cross-evaluation without federated evaluation or
// local-only models, quantiles outside [0, 1], too many histogram bins.
TEST(ConfigAggregator, StatisticsNormalizationAndCrossEvalKeysAreChecked) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", "[federation]\nid = \"f\"\n");
  auto expect_error = [&](std::vector<std::string> sets, const std::string& fragment) {
    auto r = LoadAggregatorConfig(path, sets);
    ASSERT_FALSE(r.ok()) << fragment;
    EXPECT_THAT(r.status().message(), HasSubstr(fragment));
  };
  expect_error({"data.normalize=federated"}, "[data] normalize");
  expect_error({"data.normalize=zscore"}, "[data] normalize");
  expect_error({"eval.cross_eval=true"}, "[eval] cross_eval");
  expect_error({"eval.cross_eval=true", "eval.federated=true"}, "[eval] local_only_epochs");
  expect_error({"stats.enabled=true", "stats.quantiles=0.5,1.5"}, "[stats] quantiles");
  expect_error({"stats.enabled=true", "stats.bins=5000"}, "[stats] bins");
  expect_error({"eval.finetune_epochs=20000"}, "[eval] finetune_epochs");
  auto ok = LoadAggregatorConfig(path, {"stats.enabled=true", "data.normalize=federated",
                                        "eval.federated=true", "eval.cross_eval=true",
                                        "eval.local_only_epochs=10"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->rounds.federated_stats.enabled);
  EXPECT_EQ(ok->normalize, "federated");
  EXPECT_TRUE(ok->rounds.federated_eval.cross_eval);
}

// Issue 26 item 11: [storage] keep_models defaults to keeping every model version, refuses
// a negative count, and with federated evaluation must outlast [eval] every rounds.
TEST(ConfigAggregator, KeepModelsDefaultsToAllAndIsChecked) {
  TempDir dir;
  std::string path =
      dir.Write("agg.toml", "[federation]\nid = \"f\"\n[storage]\nkeep_models = 5\n");
  auto five = LoadAggregatorConfig(path, {});
  ASSERT_TRUE(five.ok()) << five.status().ToString();
  EXPECT_EQ(five->keep_models, 5u);
  std::string plain = dir.Write("plain.toml", "[federation]\nid = \"f\"\n");
  auto all = LoadAggregatorConfig(plain, {});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->keep_models, 0u);

  auto negative = LoadAggregatorConfig(path, {"storage.keep_models=-1"});
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("[storage] keep_models"));

  auto too_few = LoadAggregatorConfig(path, {"eval.federated=true", "eval.every=5"});
  ASSERT_FALSE(too_few.ok());
  EXPECT_THAT(too_few.status().message(), HasSubstr(path + ":4:15: [storage] keep_models: "));
  EXPECT_THAT(too_few.status().message(), HasSubstr("more than [eval] every (5)"));
  EXPECT_TRUE(LoadAggregatorConfig(path, {"eval.federated=true", "eval.every=4"}).ok());
  EXPECT_TRUE(LoadAggregatorConfig(plain, {"eval.federated=true", "eval.every=4"}).ok());
}

TEST(ConfigAggregator, ModelShapeKeys) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", "[federation]\nid = \"f\"\n[model]\ninput_shape = [30]\n"
                                           "num_classes = 2\n[eval]\nlabel_column = \"diagnosis\"\n");
  auto r = LoadAggregatorConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model.input_shape, SampleShape({30}));
  EXPECT_EQ(r->model.num_classes, 2);
  EXPECT_EQ(r->eval_label_column, "diagnosis");
  auto def = LoadAggregatorConfig(path, {"model.input_shape=28,28,1"});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->model.input_shape, SampleShape({28, 28, 1}));
  auto frac = LoadAggregatorConfig(path, {"model.input_shape=2.5"});
  ASSERT_FALSE(frac.ok());
  EXPECT_THAT(frac.status().message(), HasSubstr("[model] input_shape: input_shape must hold whole"));
  auto rank = LoadAggregatorConfig(path, {"model.input_shape=1,2,3,4"});
  ASSERT_FALSE(rank.ok());
  EXPECT_THAT(rank.status().message(), HasSubstr("[model] input_shape: input_shape needs 1 value"));
  auto zero = LoadAggregatorConfig(path, {"model.num_classes=0"});
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), HasSubstr("[model] num_classes"));
  // Shapes and class counts that would exhaust memory (std::length_error, bad_alloc) or wrap
  // in an int (4294967298 -> 2) are refused at load, naming the key.
  for (const char* huge : {"model.num_classes=2000000000", "model.num_classes=4294967298"}) {
    auto r2 = LoadAggregatorConfig(path, {huge});
    ASSERT_FALSE(r2.ok()) << huge;
    EXPECT_THAT(r2.status().message(), HasSubstr("[model] num_classes")) << huge;
  }
  for (const char* huge : {"model.input_shape=100000,100000,100000", "model.input_shape=4096,4096,64"}) {
    auto r2 = LoadAggregatorConfig(path, {huge, "model.name=mlp"});
    ASSERT_FALSE(r2.ok()) << huge;
    EXPECT_THAT(r2.status().message(), HasSubstr("[model] input_shape: mlp over input")) << huge;
    EXPECT_THAT(r2.status().message(), HasSubstr("parameters; a built-in model has at most 268435456")) << huge;
  }
  EXPECT_TRUE(LoadAggregatorConfig(path, {"model.input_shape=224,224,3", "model.name=cnn"}).ok());
  // Counts read into an int are bounded, not wrapped (4294967297 used to become 1).
  for (const char* key : {"eval.min_sites", "stats.min_sites"}) {
    auto wrapped = LoadAggregatorConfig(path, {std::string(key) + "=4294967297"});
    ASSERT_FALSE(wrapped.ok()) << key;
    EXPECT_THAT(wrapped.status().message(), HasSubstr("must be in [1, 1000000], got 4294967297")) << key;
  }
}

// Issue 8: the [strategy] table reaches StrategyOptions; out-of-range values and unknown
// keys name their key.
TEST(ConfigAggregator, StrategyTableFillsTheOptionsAndBadValuesNameTheKey) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", R"([federation]
id = "f"
[rounds]
strategy = "fedadam"
[strategy]
server_lr = 0.03
beta1 = 0.8
tau = 0.01
trim_fraction = 0.25
byzantine_fraction = 0.3
multikrum_select = 4
)");
  auto r = LoadAggregatorConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->strategy, "fedadam");
  EXPECT_DOUBLE_EQ(r->strategy_options.server_lr, 0.03);
  EXPECT_DOUBLE_EQ(r->strategy_options.beta1, 0.8);
  EXPECT_DOUBLE_EQ(r->strategy_options.beta2, 0.99);  // default
  EXPECT_DOUBLE_EQ(r->strategy_options.tau, 0.01);
  EXPECT_DOUBLE_EQ(r->strategy_options.trim_fraction, 0.25);
  EXPECT_DOUBLE_EQ(r->strategy_options.byzantine_fraction, 0.3);
  EXPECT_EQ(r->strategy_options.multikrum_select, 4u);

  auto beta = LoadAggregatorConfig(path, {"strategy.beta2=1"});
  ASSERT_FALSE(beta.ok());
  EXPECT_THAT(beta.status().message(), HasSubstr("[strategy] beta2"));
  auto trim = LoadAggregatorConfig(path, {"strategy.trim_fraction=0.5"});
  ASSERT_FALSE(trim.ok());
  EXPECT_THAT(trim.status().message(), HasSubstr("[strategy] trim_fraction"));
  auto unknown = LoadAggregatorConfig(path, {"strategy.momentum=0.9"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("momentum"));
  auto name = LoadAggregatorConfig(path, {"rounds.strategy=fedsgd"});
  ASSERT_FALSE(name.ok());
  EXPECT_THAT(name.status().message(), HasSubstr("[rounds] strategy"));
}

// Issue 8: the [dp] table reaches DpOptions (expected_clients from clients_per_round), and
// DP settings the strategy refuses name the key to change.
TEST(ConfigAggregator, DpTableFillsTheOptionsAndBadSettingsNameTheKey) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", R"([federation]
id = "f"
[rounds]
clients_per_round = 40
[dp]
mode = "central"
clip = 0.5
noise_multiplier = 1.2
delta = 1e-6
epsilon_budget = 8
population = 400
)");
  auto r = LoadAggregatorConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const DpOptions& dp = r->strategy_options.dp;
  EXPECT_TRUE(dp.central);
  EXPECT_DOUBLE_EQ(dp.clip, 0.5);
  EXPECT_DOUBLE_EQ(dp.noise_multiplier, 1.2);
  EXPECT_DOUBLE_EQ(dp.delta, 1e-6);
  EXPECT_DOUBLE_EQ(dp.epsilon_budget, 8);
  EXPECT_EQ(dp.population, 400u);
  EXPECT_EQ(dp.expected_clients, 40u);
  EXPECT_FALSE(dp.noise_seed.has_value()) << "a real aggregator's noise is never seeded";
  auto off = LoadAggregatorConfig(path, {"dp.mode=off"});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->strategy_options.dp.central);

  auto mode = LoadAggregatorConfig(path, {"dp.mode=local"});
  ASSERT_FALSE(mode.ok());
  EXPECT_THAT(mode.status().message(), HasSubstr("[dp] mode"));
  auto adaptive = LoadAggregatorConfig(path, {"dp.adaptive_clip=true", "dp.noise_multiplier=5"});
  ASSERT_FALSE(adaptive.ok());
  EXPECT_THAT(adaptive.status().message(), HasSubstr("[dp] noise_multiplier"));
  EXPECT_THAT(adaptive.status().message(), HasSubstr("adaptive_clip needs"));
  auto population = LoadAggregatorConfig(path, {"dp.population=10"});
  ASSERT_FALSE(population.ok());
  EXPECT_THAT(population.status().message(), HasSubstr("[dp] population"));
  auto robust = LoadAggregatorConfig(path, {"rounds.strategy=median"});
  ASSERT_FALSE(robust.ok());
  EXPECT_THAT(robust.status().message(), HasSubstr("[rounds] strategy"));
  EXPECT_THAT(robust.status().message(), HasSubstr("nothing to choose from"));
}

// Issue 8: [rounds] mode = "buffered" (FedBuff) with its buffer and staleness bound.
TEST(ConfigAggregator, BufferedModeKeysAndABufferLargerThanTheSelection) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", R"([federation]
id = "f"
[rounds]
mode = "buffered"
clients_per_round = 8
min_clients = 2
buffer_size = 4
max_staleness = 3
)");
  auto r = LoadAggregatorConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rounds.mode, RoundMode::kBuffered);
  EXPECT_EQ(r->rounds.buffer_size, 4);
  EXPECT_EQ(r->rounds.max_staleness, 3);
  auto big = LoadAggregatorConfig(path, {"rounds.buffer_size=9"});
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("[rounds] buffer_size"));
  auto mode = LoadAggregatorConfig(path, {"rounds.mode=async"});
  ASSERT_FALSE(mode.ok());
  EXPECT_THAT(mode.status().message(), HasSubstr("[rounds] mode"));
}

// Issue 8: [secagg] on the aggregator and [secagg] allow on a node; combinations secure
// aggregation cannot serve name the key to change.
TEST(ConfigAggregator, SecAggKeysAndWhatTheyCannotBeCombinedWith) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", R"([federation]
id = "f"
[secagg]
enabled = true
threshold = 3
neighbours = 4
clip = 5.0
bits = 20
stage_timeout_s = 30
)");
  auto r = LoadAggregatorConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SecAggSettings& s = r->rounds.secagg;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.threshold, 3u);
  EXPECT_EQ(s.neighbours, 4u);
  EXPECT_DOUBLE_EQ(s.clip, 5.0);
  EXPECT_EQ(s.bits, 20u);
  EXPECT_DOUBLE_EQ(s.stage_timeout_s, 30);
  auto bits = LoadAggregatorConfig(path, {"secagg.bits=33"});
  ASSERT_FALSE(bits.ok());
  EXPECT_THAT(bits.status().message(), HasSubstr("[secagg] bits"));
  auto dp = LoadAggregatorConfig(path, {"dp.mode=central", "rounds.clients_per_round=10"});
  ASSERT_FALSE(dp.ok());
  EXPECT_THAT(dp.status().message(), HasSubstr("[dp] mode"));
  auto robust = LoadAggregatorConfig(path, {"rounds.strategy=krum"});
  ASSERT_FALSE(robust.ok());
  EXPECT_THAT(robust.status().message(), HasSubstr("[rounds] strategy"));
  EXPECT_THAT(robust.status().message(), HasSubstr("secure aggregation hides"));
  // Distributed DP: each node's share of the noise, for any min_clients (2 here) survivors.
  auto dist = LoadAggregatorConfig(path, {"dp.mode=distributed", "dp.noise_multiplier=0.8",
                                          "rounds.min_clients=2"});
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  EXPECT_TRUE(dist->strategy_options.dp.distributed);
  EXPECT_DOUBLE_EQ(dist->strategy_options.dp.clip, 5.0);  // [secagg] clip
  EXPECT_NEAR(dist->rounds.secagg.noise_stddev, 0.8 * 5.0 / std::sqrt(2.0), 1e-12);
  auto no_secagg = LoadAggregatorConfig(path, {"dp.mode=distributed", "secagg.enabled=false"});
  ASSERT_FALSE(no_secagg.ok());
  EXPECT_THAT(no_secagg.status().message(), HasSubstr("[dp] mode"));
  EXPECT_THAT(no_secagg.status().message(), HasSubstr("under secure aggregation"));
  auto adaptive = LoadAggregatorConfig(path, {"dp.mode=distributed", "dp.adaptive_clip=true",
                                              "rounds.clients_per_round=40"});
  ASSERT_FALSE(adaptive.ok());
  EXPECT_THAT(adaptive.status().message(), HasSubstr("[dp] adaptive_clip"));
  auto buffered = LoadAggregatorConfig(path, {"rounds.mode=buffered", "rounds.buffer_size=5"});
  ASSERT_FALSE(buffered.ok());
  EXPECT_THAT(buffered.status().message(), HasSubstr("synchronous"));

}

// Issue 26 item 6: DP's assumptions are enforced by the configuration: the selection comes
// from the OS CSPRNG, and a round opens only once the population the accountant's sampling
// rate assumes is connected; buffered rounds, which the accountant does not cover, are refused.
TEST(ConfigAggregator, DpDrawsSelectionsSecurelyAndWaitsForItsPopulation) {
  TempDir dir;
  std::string path = dir.Write("agg.toml", R"([federation]
id = "f"
[rounds]
clients_per_round = 40
min_clients = 20
[dp]
mode = "central"
population = 400
)");
  auto r = LoadAggregatorConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->rounds.secure_selection);
  EXPECT_EQ(r->rounds.min_available_clients, 400);
  auto off = LoadAggregatorConfig(path, {"dp.mode=off"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->rounds.secure_selection);
  EXPECT_EQ(off->rounds.min_available_clients, 0);
  auto cap = LoadAggregatorConfig(path, {"rounds.max_examples_per_node=-1"});
  ASSERT_FALSE(cap.ok());
  EXPECT_THAT(cap.status().message(), HasSubstr("[rounds] max_examples_per_node"));
  auto buffered = LoadAggregatorConfig(path, {"rounds.mode=buffered", "rounds.buffer_size=25"});
  ASSERT_FALSE(buffered.ok());
  EXPECT_EQ(buffered.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(buffered.status().message(), HasSubstr("[rounds] mode"));
  EXPECT_THAT(buffered.status().message(), HasSubstr("central DP accounts synchronous rounds"));
  EXPECT_THAT(buffered.status().message(), HasSubstr("--set rounds.mode=buffered"));
  // Set in the file, the error names the file and the line.
  std::string in_file = dir.Write("buffered.toml", R"([federation]
id = "f"
[rounds]
clients_per_round = 40
mode = "buffered"
buffer_size = 25
[dp]
mode = "central"
)");
  auto from_file = LoadAggregatorConfig(in_file, {});
  ASSERT_FALSE(from_file.ok());
  EXPECT_THAT(from_file.status().message(), HasSubstr("buffered.toml:5"));
  EXPECT_THAT(from_file.status().message(), HasSubstr("[rounds] mode"));
  auto buffered_no_dp = LoadAggregatorConfig(path, {"rounds.mode=buffered", "rounds.buffer_size=25", "dp.mode=off"});
  EXPECT_TRUE(buffered_no_dp.ok()) << buffered_no_dp.status().ToString();
}

TEST(ConfigAggregator, UpstreamMakesARegionAndRefusesWhatARegionCannotRun) {
  TempDir dir;
  std::string path = dir.Write("region.toml", R"([federation]
id = "region-a"
[rounds]
total = 5
[upstream]
endpoint = "tcp://top.example:5555"
public_key = "top.pub"
key = "region-a.key"
)");
  auto r = LoadAggregatorConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->rounds.rounds_on_demand);
  EXPECT_EQ(r->upstream.endpoint, "tcp://top.example:5555");
  EXPECT_EQ(r->upstream.federation_id, "region-a");  // defaults to its own
  EXPECT_EQ(r->rounds.total_rounds, 1000000000u);    // the top decides
  auto top = LoadAggregatorConfig(path, {"upstream.endpoint=", "upstream.federation=hier"});
  ASSERT_TRUE(top.ok());
  EXPECT_FALSE(top->rounds.rounds_on_demand);
  EXPECT_EQ(top->upstream.federation_id, "hier");
  EXPECT_EQ(top->rounds.total_rounds, 5u);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"rounds.strategy=fedadam", "[rounds] strategy"},
      {"rounds.strategy=fedprox", "[rounds] strategy"},
      {"rounds.mode=buffered", "[rounds] mode"},
      {"stats.enabled=true", "[stats] enabled"},
      {"eval.federated=true", "[eval] federated"},
      {"rounds.update_prediction=0.5", "[rounds] update_prediction"},
      {"dp.mode=central", "[dp] mode"},
  };
  for (const auto& [set, key] : refused) {
    std::vector<std::string> sets = {set};
    if (set == "rounds.mode=buffered") sets.push_back("rounds.buffer_size=2");
    auto bad = LoadAggregatorConfig(path, sets);
    ASSERT_FALSE(bad.ok()) << set;
    EXPECT_THAT(bad.status().message(), HasSubstr(key)) << set;
    EXPECT_THAT(bad.status().message(), HasSubstr("regional aggregator")) << set;
  }
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// An admin kit's timeout is read into an int: a value past a day is refused naming the key
// (9223372036854775807 used to wait "-1 ms", 4294967297 one millisecond).
TEST(ConfigAdminKit, TimeoutIsBoundedNotWrapped) {
  const std::string dir = ::testing::TempDir() + "/admin_kit_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const char* t : {"4294967297", "9223372036854775807"}) {
    const std::string path = dir + "/admin.toml";
    std::ofstream(path) << "[admin]\nname = \"alice\"\nendpoint = \"tcp://127.0.0.1:5556\"\ntimeout_ms = " << t << "\n";
    auto kit = LoadAdminKitConfig(path);
    ASSERT_FALSE(kit.ok()) << t;
    EXPECT_THAT(kit.status().message(), ::testing::HasSubstr("[admin] timeout_ms: must be in [1, 86400000]")) << t;
    EXPECT_THAT(kit.status().message(), ::testing::HasSubstr("admin.toml:4")) << t;
  }
  // An endpoint that is no endpoint is named with its line (it used to fail at the call as
  // "fedmesh-admin: fedmesh-admin: talking to bogus: Invalid argument").
  const std::string path = dir + "/admin.toml";
  std::ofstream(path) << "[admin]\nname = \"alice\"\nendpoint = \"bogus\"\n";
  auto kit = LoadAdminKitConfig(path);
  ASSERT_FALSE(kit.ok());
  EXPECT_THAT(kit.status().message(), ::testing::HasSubstr("admin.toml:3:12: [admin] endpoint: \"bogus\" is not a ZeroMQ endpoint"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fedmesh
