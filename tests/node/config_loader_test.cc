// Tests of the config schema, loader, node/aggregator configs, example configs and
// docs/config.md. Every suite starts with "Config" so `--gtest_filter='Config*'` runs
// exactly these (node_tests also holds slow training tests).
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

#include "core/data/data_source.h"
#include "core/onnx/onnx_reader.h"
#include "node/config/aggregator_config.h"
#include "node/config/config_loader.h"
#include "node/config/config_schema.h"
#include "node/config/node_config.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A schema with every type, range, choice and path kind, independent of the real configs.
const ConfigSchema& TestSchema() {
  static const ConfigSchema* s = [] {
    auto* schema = new ConfigSchema;
    schema->name = "test";
    schema->keys = {
        RequiredKey("node", "id", ConfigType::kString, "the id"),
        StringKey("node", "key", "node.key", "key file").Path(),
        StringKey("node", "mode", "fast", "mode").Choices({"fast", "slow"}),
        StringKey("data", "dataset", "fashion-mnist", "data").Path(PathKind::kDataSource),
        IntKey("train", "epochs", 1, "epochs").Min(1).Max(100),
        FloatKey("train", "lr", 0.01, "learning rate").Min(0, true),
        FloatKey("train", "momentum", 0.0, "momentum").Min(0).Max(1, true),
        BoolKey("train", "verbose", false, "chatty"),
        StringListKey("train", "tags", {"a"}, "labels"),
    };
    return schema;
  }();
  return *s;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("fedmesh_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  // Writes `text` to `name` (subfolders created) and returns its path.
  std::string Write(const std::string& name, const std::string& text) const {
    fs::path p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

Status LoadError(const std::string& path, const std::vector<std::string>& sets = {"node.id=n"}) {
  auto r = LoadConfig(TestSchema(), path, sets);
  EXPECT_FALSE(r.ok()) << "expected an error";
  return r.status();
}

TEST(ConfigLoader, DefaultsWithoutFile) {
  auto r = LoadConfig(TestSchema(), "", {"node.id=n1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->GetString("node", "id"), "n1");
  EXPECT_EQ(r->GetInt("train", "epochs"), 1);
  EXPECT_DOUBLE_EQ(r->GetFloat("train", "lr"), 0.01);
  EXPECT_FALSE(r->GetBool("train", "verbose"));
  EXPECT_EQ(r->GetStringList("train", "tags"), std::vector<std::string>{"a"});
  EXPECT_EQ(r->GetString("node", "key"), "node.key");  // no file: relative to the cwd
  EXPECT_FALSE(r->IsSet("train", "lr"));
  EXPECT_TRUE(r->IsSet("node", "id"));
  EXPECT_EQ(r->Origin("train", "lr"), "default");
}

TEST(ConfigLoader, FileValues) {
  TempDir dir;
  std::string path = dir.Write("c.toml", R"(
[node]
id = "site-1"
mode = "slow"
[train]
epochs = 5
lr = 1          # an integer is accepted for a float
verbose = true
tags = ["x", "y"]
)");
  auto r = LoadConfig(TestSchema(), path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->GetString("node", "id"), "site-1");
  EXPECT_EQ(r->GetString("node", "mode"), "slow");
  EXPECT_EQ(r->GetInt("train", "epochs"), 5);
  EXPECT_DOUBLE_EQ(r->GetFloat("train", "lr"), 1.0);
  EXPECT_TRUE(r->GetBool("train", "verbose"));
  EXPECT_EQ(r->GetStringList("train", "tags"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r->Origin("train", "epochs"), path + ":6:10");
  EXPECT_DOUBLE_EQ(r->GetFloat("train", "momentum"), 0.0);  // untouched default
}

TEST(ConfigLoader, SetOverridesFileAndIsParsedAsTheKeysType) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[node]\nid = \"a\"\n[train]\nlr = 0.5\nepochs = 2\n");
  auto r = LoadConfig(TestSchema(), path,
                      {"train.lr=0.02", "train.verbose=true", "train.tags=p, q,r", "node.id=b",
                       "train.epochs=3", "train.epochs=4", "node.mode=slow"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->GetFloat("train", "lr"), 0.02);
  EXPECT_TRUE(r->GetBool("train", "verbose"));
  EXPECT_EQ(r->GetStringList("train", "tags"), (std::vector<std::string>{"p", "q", "r"}));
  EXPECT_EQ(r->GetString("node", "id"), "b");
  EXPECT_EQ(r->GetInt("train", "epochs"), 4);  // the later --set wins
  EXPECT_EQ(r->Origin("train", "lr"), "--set train.lr=0.02");

  auto empty = LoadConfig(TestSchema(), path, {"train.tags="});
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->GetStringList("train", "tags").empty());
}

TEST(ConfigLoader, MissingFileIsNotFound) {
  Status s = LoadError("/nonexistent/dir/agg.toml");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("config file '/nonexistent/dir/agg.toml' does not exist"));
}

TEST(ConfigLoader, SyntaxErrorGivesLineAndColumn) {
  TempDir dir;
  std::string path = dir.Write("bad.toml", "[node]\nid = \"a\"\n[train]\nlr = = 0.1\n");
  Status s = LoadError(path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":4:"));
  EXPECT_THAT(s.message(), HasSubstr("TOML syntax error"));
}

TEST(ConfigLoader, UnknownSectionSuggestsClosest) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[node]\nid = \"a\"\n\n[trian]\nlr = 0.1\n");
  Status s = LoadError(path);
  EXPECT_THAT(s.message(), HasSubstr(path + ":4:2: unknown section [trian] (did you mean [train]?)"));
}

TEST(ConfigLoader, UnknownKeySuggestsClosest) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[train]\nlrr = 0.1\n");
  Status s = LoadError(path);
  EXPECT_THAT(s.message(), HasSubstr(path + ":2:1: unknown key 'lrr' in [train] (did you mean 'lr'?)"));
}

TEST(ConfigLoader, KeyInWrongSectionNamesItsSection) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[node]\nepochs = 3\n");
  Status s = LoadError(path);
  EXPECT_THAT(s.message(), HasSubstr("unknown key 'epochs' in [node] (did you mean [train] epochs?"));

  std::string top = dir.Write("top.toml", "lr = 0.1\n");
  EXPECT_THAT(LoadError(top).message(),
              HasSubstr("key 'lr' is outside any section; did you mean to put it under [train]?"));
}

TEST(ConfigLoader, UnknownKeyFarFromAnyListsTheSectionsKeys) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[train]\nzzzzzzzz = 1\n");
  EXPECT_THAT(LoadError(path).message(),
              HasSubstr("known keys in [train]: epochs, lr, momentum, verbose, tags"));
}

TEST(ConfigLoader, WrongTypeSaysExpectedAndGot) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[train]\nlr = \"fast\"\n");
  EXPECT_THAT(LoadError(path).message(),
              HasSubstr(path + ":2:6: [train] lr: expected float, got string \"fast\""));

  std::string p2 = dir.Write("c2.toml", "[train]\nepochs = 1.5\n");
  EXPECT_THAT(LoadError(p2).message(), HasSubstr("[train] epochs: expected integer, got float 1.5"));

  std::string p3 = dir.Write("c3.toml", "[train]\ntags = [\"a\", 2]\n");
  EXPECT_THAT(LoadError(p3).message(),
              HasSubstr("[train] tags: expected list of strings, got an array whose element 1 is a "
                        "integer 2"));

  std::string p4 = dir.Write("c4.toml", "[train]\nverbose = \"yes\"\n");
  EXPECT_THAT(LoadError(p4).message(), HasSubstr("[train] verbose: expected boolean, got string"));
}

TEST(ConfigLoader, OutOfRangeAndChoices) {
  TempDir dir;
  EXPECT_THAT(LoadError(dir.Write("a.toml", "[train]\nepochs = 0\n")).message(),
              HasSubstr(":2:10: [train] epochs: must be in [1, 100], got 0"));
  EXPECT_THAT(LoadError(dir.Write("b.toml", "[train]\nlr = 0.0\n")).message(),
              HasSubstr("[train] lr: must be > 0.0, got 0.0"));
  EXPECT_THAT(LoadError(dir.Write("c.toml", "[train]\nmomentum = 1.0\n")).message(),
              HasSubstr("[train] momentum: must be in [0.0, 1.0), got 1.0"));
  EXPECT_THAT(LoadError(dir.Write("d.toml", "[train]\nlr = nan\n")).message(),
              HasSubstr("[train] lr: must be a finite number"));
  EXPECT_THAT(LoadError(dir.Write("e.toml", "[node]\nmode = \"medium\"\n")).message(),
              HasSubstr("[node] mode: must be one of \"fast\", \"slow\"; got \"medium\""));
}

TEST(ConfigLoader, MissingRequiredKey) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[train]\nlr = 0.1\n");
  auto r = LoadConfig(TestSchema(), path, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr(path + ": missing required key [node] id (the id); add it under [node] or "
                               "pass --set node.id=..."));
}

TEST(ConfigLoader, MalformedSet) {
  EXPECT_THAT(LoadError("", {"train.lr"}).message(),
              HasSubstr("--set train.lr: expected section.key=value (no '=' found)"));
  EXPECT_THAT(LoadError("", {"lr=0.1"}).message(),
              HasSubstr("--set lr=0.1: the key 'lr' needs its section; did you mean --set "
                        "train.lr=0.1?"));
  EXPECT_THAT(LoadError("", {"=3"}).message(), HasSubstr("needs its section"));
  EXPECT_THAT(LoadError("", {"trian.lr=1"}).message(),
              HasSubstr("--set trian.lr=1: unknown section [trian] (did you mean [train]?)"));
  EXPECT_THAT(LoadError("", {"train.lrr=1"}).message(),
              HasSubstr("--set train.lrr=1: unknown key 'lrr' in [train] (did you mean 'lr'?)"));
  EXPECT_THAT(LoadError("", {"node.id=n", "train.lr=abc"}).message(),
              HasSubstr("--set train.lr=abc: [train] lr: expected float, got 'abc'"));
  EXPECT_THAT(LoadError("", {"node.id=n", "train.epochs=2x"}).message(),
              HasSubstr("[train] epochs: expected integer, got '2x'"));
  EXPECT_THAT(LoadError("", {"node.id=n", "train.verbose=yes"}).message(),
              HasSubstr("[train] verbose: expected boolean (true or false), got 'yes'"));
  EXPECT_THAT(LoadError("", {"node.id=n", "train.epochs=500"}).message(),
              HasSubstr("--set train.epochs=500: [train] epochs: must be in [1, 100], got 500"));
}

TEST(ConfigLoader, RelativePathsResolveAgainstTheConfigFilesDirectory) {
  TempDir dir;
  std::string path = dir.Write("site/c.toml", R"(
[node]
id = "a"
key = "keys/a.key"
[data]
dataset = "csv:data/train.csv"
)");
  const fs::path base = dir.path() / "site";
  auto r = LoadConfig(TestSchema(), path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->GetString("node", "key"), (base / "keys/a.key").string());
  EXPECT_EQ(r->GetString("data", "dataset"), "csv:" + (base / "data/train.csv").string());

  // Defaults follow the file too; named data sources and absolute paths are kept.
  std::string p2 = dir.Write("site/d.toml", "[node]\nid = \"a\"\n");
  auto d = LoadConfig(TestSchema(), p2, {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->GetString("node", "key"), (base / "node.key").string());
  EXPECT_EQ(d->GetString("data", "dataset"), "fashion-mnist");

  // --set values are command-line paths: relative to the working directory, kept as typed.
  auto s = LoadConfig(TestSchema(), path, {"node.key=mine.key", "data.dataset=csv:/abs/x.csv"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->GetString("node", "key"), "mine.key");
  EXPECT_EQ(s->GetString("data", "dataset"), "csv:/abs/x.csv");
}

TEST(ConfigSchema, EditDistanceAndRangeText) {
  EXPECT_EQ(EditDistance("lr", "lr"), 0u);
  EXPECT_EQ(EditDistance("lrr", "lr"), 1u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(TestSchema().Find("train", "momentum")->RangeText(), "in [0.0, 1.0)");
  EXPECT_EQ(TestSchema().Find("train", "lr")->RangeText(), "> 0.0");
  EXPECT_EQ(FormatDefault(*TestSchema().Find("train", "tags")), "[\"a\"]");
  EXPECT_EQ(FormatDefault(*TestSchema().Find("node", "id")), "(required)");
}

TEST(ConfigNode, LoadsTypedConfig) {
  TempDir dir;
  std::string path = dir.Write("node.toml", R"(
[federation]
id = "fed-1"
[node]
id = "site-2"
[aggregator]
endpoint = "tcp://agg:5555"
public_key = "/etc/fedmesh/agg.pub"
[data]
partition = "dirichlet"
alpha = 0.3
num_partitions = 8
index = 5
[model]
name = "cnn"
seed = 9
[train]
epochs = 3
batch = 64
lr = 0.1
momentum = 0.9
prox_mu = 0.01
threads = 2
device = "auto"
)");
  auto r = LoadNodeConfig(path, {"train.lr=0.2"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const NodeConfig& c = *r;
  EXPECT_EQ(c.federation_id, "fed-1");
  EXPECT_EQ(c.node_id, "site-2");
  EXPECT_EQ(c.training.node_id, "site-2");
  EXPECT_EQ(c.aggregator_endpoint, "tcp://agg:5555");
  EXPECT_EQ(c.aggregator_public_key_path, "/etc/fedmesh/agg.pub");
  EXPECT_EQ(c.key_path, (dir.path() / "node.key").string());
  EXPECT_EQ(c.db_path, (dir.path() / "node.db").string());
  EXPECT_EQ(c.training.data.train, "fashion-mnist");
  EXPECT_EQ(c.training.partition.scheme, "dirichlet");
  EXPECT_DOUBLE_EQ(c.training.partition.alpha, 0.3);
  EXPECT_EQ(c.training.partition.num_partitions, 8);
  EXPECT_EQ(c.training.index, 5);
  EXPECT_EQ(c.training.model.name, "cnn");
  EXPECT_EQ(c.training.seed, 9u);
  EXPECT_EQ(c.training.epochs, 3);
  EXPECT_EQ(c.training.trainer.batch_size, 64);
  EXPECT_FLOAT_EQ(c.training.trainer.sgd.lr, 0.2f);
  EXPECT_FLOAT_EQ(c.training.trainer.sgd.momentum, 0.9f);
  EXPECT_FLOAT_EQ(c.training.trainer.sgd.prox_mu, 0.01f);
  EXPECT_EQ(c.training.threads, 2);
  EXPECT_EQ(c.training.device, "auto");
}

// The site-data keys reach DataSourceSpec; npz:, npy: and images: paths resolve against the
// config file's directory like csv:.
TEST(ConfigNode, SiteDataKeys) {
  TempDir dir;
  std::string path = dir.Write("site/node.toml", R"([node]
id = "s"
[aggregator]
endpoint = "tcp://agg:5555"
public_key = "agg.pub"
[federation]
id = "f"
[data]
dataset = "csv:bank.csv"
test = "npy:x.npy,/abs/y.npy"
label_column = "risk"
label_values = ["good", "bad"]
features = ["purpose", "amount"]
categorical = ["purpose"]
categories = ["purpose=car,cash"]
missing = "drop"
image_size = [32, 24]
image_channels = 3
)");
  const fs::path base = dir.path() / "site";
  auto r = LoadNodeConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const DataSourceSpec& d = r->training.data;
  EXPECT_EQ(d.train, "csv:" + (base / "bank.csv").string());
  EXPECT_EQ(d.test, "npy:" + (base / "x.npy").string() + ",/abs/y.npy");
  EXPECT_EQ(d.label_values, (std::vector<std::string>{"good", "bad"}));
  EXPECT_EQ(d.features, (std::vector<std::string>{"purpose", "amount"}));
  EXPECT_EQ(d.categorical, (std::vector<std::string>{"purpose"}));
  EXPECT_EQ(d.categories, (std::vector<std::string>{"purpose=car,cash"}));
  EXPECT_EQ(d.missing, "drop");
  EXPECT_FALSE(d.regression);
  EXPECT_EQ(d.image_height, 32);
  EXPECT_EQ(d.image_width, 24);
  EXPECT_EQ(d.image_channels, 3);
  auto npz = LoadNodeConfig(path, {"data.dataset=npz:rel/t.npz", "data.regression=true"});
  ASSERT_TRUE(npz.ok()) << npz.status().ToString();
  EXPECT_EQ(npz->training.data.train, "npz:rel/t.npz");  // --set: as typed
  EXPECT_TRUE(npz->training.data.regression);
  auto size = LoadNodeConfig(path, {"data.image_size=32"});
  ASSERT_FALSE(size.ok());
  EXPECT_THAT(size.status().message(), HasSubstr("[data] image_size: image_size must be [height, width]"));
  auto missing = LoadNodeConfig(path, {"data.missing=mean"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("[data] missing"));
}

TEST(ConfigNode, ValidatorErrorNamesTheKey) {
  TempDir dir;
  std::string path = dir.Write("node.toml", R"([node]
id = "s"
[aggregator]
endpoint = "tcp://agg:5555"
public_key = "agg.pub"
[data]
num_partitions = 4
index = 4
[federation]
id = "f"
)");
  auto r = LoadNodeConfig(path, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ":8:9: [data] index: index 4 is outside [0, 4)"));

  auto m = LoadNodeConfig(path, {"data.index=1", "model.name=resnet"});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(),
              HasSubstr("--set model.name=resnet: [model] name: must be one of \"logreg\", \"mlp\", \"cnn\""));
}

TEST(ConfigGossip, GossipModeNeedsNoAggregatorAndParsesItsKeys) {
  TempDir dir;
  std::string path = dir.Write("site.toml", R"([federation]
id = "f"
[node]
id = "s"
[gossip]
listen = "tcp://127.0.0.1:7100"
seeds = ["site-1@tcp://10.0.0.1:7100", "site-2@tcp://10.0.0.2:7100"]
protocol = "choco"
topology = "ring"
period_ms = 250
fanout = 2
)");
  auto r = LoadNodeConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->gossip.enabled());
  EXPECT_EQ(r->gossip.seeds.size(), 2u);
  EXPECT_EQ(r->gossip.seeds[1], "site-2@tcp://10.0.0.2:7100");
  EXPECT_EQ(r->gossip.protocol, "choco");
  EXPECT_EQ(r->gossip.topology, "ring");
  EXPECT_EQ(r->gossip.period_ms, 250);
  EXPECT_EQ(r->gossip.fanout, 2);
  EXPECT_EQ(r->gossip.choco_gamma, 0.2);
  EXPECT_TRUE(r->aggregator_endpoint.empty());
}

TEST(ConfigGossip, BadGossipValuesAndAMissingModeNameTheKey) {
  TempDir dir;
  std::string path = dir.Write("site.toml", "[federation]\nid = \"f\"\n[node]\nid = \"s\"\n");
  // Neither an aggregator nor [gossip] listen: the aggregator keys are required.
  auto none = LoadNodeConfig(path, {});
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("[aggregator] endpoint: is required"));
  EXPECT_THAT(none.status().message(), HasSubstr("[gossip] listen"));
  auto seed = LoadNodeConfig(path, {"gossip.listen=tcp://127.0.0.1:*", "gossip.seeds=tcp://x:1"});
  ASSERT_FALSE(seed.ok());
  EXPECT_THAT(seed.status().message(), HasSubstr("[gossip] seeds"));
  EXPECT_THAT(seed.status().message(), HasSubstr("is not site-id@endpoint"));
  auto cosine = LoadNodeConfig(path, {"gossip.listen=tcp://127.0.0.1:*", "gossip.lr_decay=cosine"});
  ASSERT_FALSE(cosine.ok());
  EXPECT_THAT(cosine.status().message(), HasSubstr("[gossip] lr_decay: cosine needs [gossip] max_steps"));
  auto decay = LoadNodeConfig(path, {"gossip.listen=tcp://127.0.0.1:*", "gossip.lr_decay=cosine",
                                     "gossip.max_steps=100", "gossip.lr_min_fraction=0.2"});
  ASSERT_TRUE(decay.ok()) << decay.status().ToString();
  EXPECT_EQ(decay->gossip.lr_decay, "cosine");
  EXPECT_DOUBLE_EQ(decay->gossip.lr_min_fraction, 0.2);
  EXPECT_FALSE(LoadNodeConfig(path, {"gossip.listen=tcp://127.0.0.1:*", "gossip.lr_decay=step"}).ok());
  auto proto = LoadNodeConfig(path, {"gossip.listen=tcp://127.0.0.1:*", "gossip.protocol=flood"});
  ASSERT_FALSE(proto.ok());
  EXPECT_THAT(proto.status().message(), HasSubstr("[gossip] protocol: must be one of"));
  auto period = LoadNodeConfig(path, {"gossip.listen=tcp://127.0.0.1:*", "gossip.period_ms=0"});
  ASSERT_FALSE(period.ok());
  EXPECT_THAT(period.status().message(), HasSubstr("[gossip] period_ms"));
}

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

  std::string node = dir.Write("node.toml", R"([federation]
id = "f"
[node]
id = "s"
[aggregator]
endpoint = "tcp://agg:5555"
public_key = "agg.pub"
[secagg]
allow = "sites"
)");
  auto n = LoadNodeConfig(node, {});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->secagg_allow_dir, (dir.path() / "sites").string());
}

// Issue 4: [codec] keys are parsed into canonical chains, and a bad chain names its key.
TEST(ConfigCodec, ChainsAreCanonicalAndBadOnesNameTheKey) {
  TempDir dir;
  std::string node = dir.Write("node.toml", R"([federation]
id = "f"
[node]
id = "s"
[aggregator]
endpoint = "tcp://agg:5555"
public_key = "agg.pub"
[codec]
chain = "topk:0.01|int8|zstd"
error_feedback = "dgc"
dgc_momentum = 0.5
)");
  auto n = LoadNodeConfig(node, {});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->codec_chain, "topk:0.01|int8:256|zstd:3");
  EXPECT_EQ(n->error_feedback.mode, codec::FeedbackMode::kDgc);
  EXPECT_EQ(n->error_feedback.dgc_momentum, 0.5);
  auto bad = LoadNodeConfig(node, {"codec.chain=int8|topk:0.1"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("[codec] chain: codec chain \"int8|topk:0.1\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("must come before"));
  auto mode = LoadNodeConfig(node, {"codec.error_feedback=sometimes"});
  ASSERT_FALSE(mode.ok());
  EXPECT_THAT(mode.status().message(), HasSubstr("[codec] error_feedback"));

  std::string agg = dir.Write("agg.toml", "[federation]\nid = \"f\"\n[codec]\nupdate = \"fp16\"\n");
  auto a = LoadAggregatorConfig(agg, {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->rounds.update_codec, "fp16");
  EXPECT_EQ(a->rounds.downlink_codec, "none");
  auto down = LoadAggregatorConfig(agg, {"codec.downlink=topk:0.1"});
  ASSERT_FALSE(down.ok());
  EXPECT_THAT(down.status().message(), HasSubstr("[codec] downlink: downlink_codec \"topk:0.1\" sparsifies"));
  EXPECT_EQ(a->rounds.update_prediction, 0.0);  // off unless asked for
  auto pred = LoadAggregatorConfig(agg, {"rounds.update_prediction=0.9"});
  ASSERT_TRUE(pred.ok()) << pred.status().ToString();
  EXPECT_EQ(pred->rounds.update_prediction, 0.9);
  pred = LoadAggregatorConfig(agg, {"rounds.update_prediction=1.5"});
  ASSERT_FALSE(pred.ok());
  EXPECT_THAT(pred.status().message(), HasSubstr("[rounds] update_prediction"));
  pred = LoadAggregatorConfig(agg, {"rounds.update_prediction=0.5", "rounds.mode=buffered"});
  ASSERT_FALSE(pred.ok());
  EXPECT_THAT(pred.status().message(),
              HasSubstr("[rounds] update_prediction: update_prediction needs synchronous rounds"));
  auto up = LoadAggregatorConfig(agg, {"codec.update=zstd:99"});
  ASSERT_FALSE(up.ok());
  EXPECT_THAT(up.status().message(), HasSubstr("[codec] update"));
  EXPECT_THAT(up.status().message(), HasSubstr("level"));
}

const char* SourceDir() { return FEDMESH_SOURCE_DIR; }

TEST(ConfigExamples, FashionMnistConfigsLoad) {
  const fs::path dir = fs::path(SourceDir()) / "examples/fashion-mnist";
  auto agg = LoadAggregatorConfig((dir / "aggregator.toml").string(), {});
  ASSERT_TRUE(agg.ok()) << agg.status().ToString();
  EXPECT_EQ(agg->rounds.total_rounds, 10u);
  EXPECT_EQ(agg->model.name, "mlp");
  EXPECT_EQ(agg->strategy, "fedavg");
  for (int i = 1; i <= 4; ++i) {
    std::string path = (dir / ("node" + std::to_string(i) + ".toml")).string();
    auto n = LoadNodeConfig(path, {});
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(n->training.index, i - 1) << path;
    EXPECT_EQ(n->training.partition.scheme, "dirichlet");
    EXPECT_DOUBLE_EQ(n->training.partition.alpha, 0.5);
    EXPECT_EQ(n->training.partition.num_partitions, 4);
    EXPECT_EQ(n->training.model.name, agg->model.name);
    EXPECT_EQ(n->training.seed, agg->model_seed);
    EXPECT_EQ(n->aggregator_endpoint, "tcp://127.0.0.1:5555");
    EXPECT_EQ(n->node_id, "site-" + std::to_string(i));
  }
}

// examples/hospital (issue 8): the coordinator runs secure aggregation and every hospital
// can take part in it; run.sh sets each hospital's id, key, store and partition.
TEST(ConfigExamples, HospitalConfigsLoad) {
  const fs::path dir = fs::path(SourceDir()) / "examples/hospital";
  auto agg = LoadAggregatorConfig((dir / "aggregator.toml").string(), {});
  ASSERT_TRUE(agg.ok()) << agg.status().ToString();
  EXPECT_TRUE(agg->rounds.secagg.enabled);
  EXPECT_EQ(agg->rounds.clients_per_round, 5);
  for (int i = 1; i <= 5; ++i) {
    const std::string id = "hospital-" + std::to_string(i);
    auto n = LoadNodeConfig((dir / "hospital.toml").string(),
                            {"node.id=" + id, "node.key=keys/" + id + ".key",
                             "data.index=" + std::to_string(i - 1)});
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_FALSE(n->secagg_allow_dir.empty());
    EXPECT_EQ(n->training.partition.num_partitions, 5);
    EXPECT_EQ(n->federation_id, agg->federation_id);
    EXPECT_EQ(n->training.model.name, agg->model.name);
  }
}

// examples/breast_cancer (issue 19): the coordinator's ONNX model (one logit), loss,
// secure aggregation and federated evaluation without a central test set; the hospitals'
// text labels, held-out fraction and local BatchNorm.
TEST(ConfigExamples, BreastCancerConfigsLoad) {
  const fs::path dir = fs::path(SourceDir()) / "examples/breast_cancer";
  auto agg = LoadAggregatorConfig((dir / "aggregator.toml").string(), {});
  ASSERT_TRUE(agg.ok()) << agg.status().ToString();
  EXPECT_TRUE(agg->rounds.secagg.enabled);
  EXPECT_TRUE(agg->rounds.federated_eval.enabled);
  EXPECT_EQ(agg->eval_dataset, "");
  EXPECT_EQ(agg->model.name, (dir / "hospital_mlp.onnx").string());
  EXPECT_EQ(agg->rounds.loss, "bce_with_logits");
  auto n = LoadNodeConfig((dir / "hospital.toml").string(), {"node.id=hospital-2"});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->training.data.label_values, (std::vector<std::string>{"benign", "malignant"}));
  EXPECT_DOUBLE_EQ(n->training.data.test_fraction, 0.3);
  EXPECT_EQ(n->local_patterns, (std::vector<std::string>{"input_norm.*"}));
  EXPECT_EQ(n->federation_id, agg->federation_id);
}

// The bank example's [data] settings turn a bank's CSV into exactly the inputs of its
// model: 9 numbers and the 52 one-hot columns of the fixed category lists, whichever
// categories a bank's rows hold.
TEST(ConfigExamples, BankConfigsLoad) {
  const fs::path dir = fs::path(SourceDir()) / "examples/bank";
  auto agg = LoadAggregatorConfig((dir / "aggregator.toml").string(), {});
  ASSERT_TRUE(agg.ok()) << agg.status().ToString();
  EXPECT_TRUE(agg->rounds.secagg.enabled);
  EXPECT_TRUE(agg->rounds.federated_eval.enabled);
  EXPECT_EQ(agg->eval_dataset, "");
  EXPECT_EQ(agg->model.name, (dir / "bank_mlp.onnx").string());
  EXPECT_EQ(agg->rounds.loss, "bce_with_logits");
  EXPECT_GT(agg->rounds.pos_weight, 1.0);
  TempDir tmp;
  auto n = LoadNodeConfig((dir / "bank.toml").string(),
                          {"node.id=bank-2", "data.dataset=csv:" + tmp.path().string() + "/bank.csv"});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->federation_id, agg->federation_id);
  EXPECT_EQ(n->local_patterns, (std::vector<std::string>{"input_norm.*"}));
  DataSourceSpec data = n->training.data;
  EXPECT_EQ(data.label_values, (std::vector<std::string>{"Good", "Bad"}));
  EXPECT_EQ(data.categorical.size(), 11u);
  EXPECT_EQ(data.categories.size(), 11u);
  // Two applicants as export.R writes them (German credit rows 1 and 2).
  tmp.Write("bank.csv",
            "Duration,Amount,InstallmentRatePercentage,ResidenceDuration,Age,NumberExistingCredits,"
            "NumberPeopleMaintenance,Telephone,ForeignWorker,CheckingAccountStatus,CreditHistory,"
            "Purpose,SavingsAccountBonds,EmploymentDuration,Personal,OtherDebtorsGuarantors,Property,"
            "OtherInstallmentPlans,Housing,Job,Class\n"
            "6,1169,4,4,67,2,1,0,1,lt.0,Critical,Radio.Television,Unknown,gt.7,Male.Single,None,"
            "RealEstate,None,Own,SkilledEmployee,Good\n"
            "48,5951,2,2,22,1,1,1,1,0.to.200,PaidDuly,Radio.Television,lt.100,1.to.4,"
            "Female.NotSingle,None,RealEstate,None,Own,SkilledEmployee,Bad\n");
  auto ds = LoadDataSource(data, DataSplit::kTrain);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(ds->sample_size(), 61u);
  EXPECT_EQ(ds->feature_names[9], "CheckingAccountStatus=lt.0");
  EXPECT_EQ(ds->feature_names[60], "Job=Management.SelfEmp.HighlyQualified");
  auto model = onnx::ReadOnnxFile(agg->model.name);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(model->inputs.size(), 1u);
  EXPECT_EQ(model->inputs[0].dims.back(), 61);
}

// ConfigDocs.* (docs/config.md) live in tests/sim/config_docs_test.cc: the page covers
// fedmesh-sim's schema too.

}  // namespace
}  // namespace fedmesh
