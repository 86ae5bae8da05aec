// Tests of fedmesh-node's configuration and of every example's configs (node and
// aggregator). Every suite starts with "Config" so `--gtest_filter='Config*'` runs exactly
// these (node_tests also holds slow training tests).
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
#include "aggregator/aggregator_config.h"
#include "config/config_loader.h"
#include "node/node_config.h"
#include "tests/config/config_temp_dir.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using TempDir = testing_util::ConfigTempDir;

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
  EXPECT_EQ(c.training.engine, BuiltinEngine::kAuto);  // the default
}

// [train] engine picks how a built-in model runs; a value outside the three is refused
// naming the file, line and key.
TEST(ConfigNode, EngineKeyIsReadAndCheckedByName) {
  TempDir dir;
  auto config = [&](const std::string& name, const std::string& engine) {
    return dir.Write(name, "[node]\nid = \"s\"\n[aggregator]\nendpoint = \"tcp://agg:5555\"\n"
                           "public_key = \"agg.pub\"\n[federation]\nid = \"f\"\n[train]\nengine = \"" +
                               engine + "\"\n");
  };
  const std::string path = config("node.toml", "layers");
  auto r = LoadNodeConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->training.engine, BuiltinEngine::kLayers);
  auto g = LoadNodeConfig(path, {"train.engine=graph"});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->training.engine, BuiltinEngine::kGraph);
  const std::string bad = config("bad.toml", "graphs");
  auto b = LoadNodeConfig(bad, {});
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr(bad + ":9:"));
  EXPECT_THAT(b.status().message(), HasSubstr("[train] engine: must be one of \"auto\", \"graph\", \"layers\""));
}

// A [metrics] listen that is not HOST:PORT, an unknown device or data source form are refused
// when the file loads, naming the file, line and key (before, only when the exporter, the
// backend or the data loader met them, without the key).
TEST(ConfigNode, ListenDeviceAndDataSourceAreCheckedWithTheirKeys) {
  TempDir dir;
  const std::string path =
      dir.Write("node.toml", "[node]\nid = \"s\"\n[aggregator]\nendpoint = \"tcp://agg:5555\"\n"
                             "public_key = \"agg.pub\"\n[federation]\nid = \"f\"\n[metrics]\n"
                             "listen = \"127.0.0.1\"\n");
  auto r = LoadNodeConfig(path, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr(path + ":9:10: [metrics] listen: \"127.0.0.1\" is not HOST:PORT"));
  EXPECT_TRUE(LoadNodeConfig(path, {"metrics.listen=127.0.0.1:0"}).ok());
  // The device and the data source's form too (before, the error named neither file nor key).
  const std::string fixed = path;
  auto device = LoadNodeConfig(fixed, {"metrics.listen=127.0.0.1:0", "train.device=gpu9"});
  ASSERT_FALSE(device.ok());
  EXPECT_THAT(device.status().message(),
              HasSubstr("--set train.device=gpu9: [train] device: unknown device 'gpu9'"));
  auto index = LoadNodeConfig(fixed, {"metrics.listen=127.0.0.1:0", "train.device=cuda:x"});
  ASSERT_FALSE(index.ok());
  EXPECT_THAT(index.status().message(), HasSubstr("expected cuda:N with N >= 0"));
  EXPECT_TRUE(LoadNodeConfig(fixed, {"metrics.listen=127.0.0.1:0", "train.device=cuda:3"}).ok())
      << "a GPU that is absent here is the node's problem when it starts, not the file's";
  auto source = LoadNodeConfig(fixed, {"metrics.listen=127.0.0.1:0", "data.dataset=foo:bar"});
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(source.status().message(), HasSubstr("[data] dataset: unknown data source 'foo:bar'"));
  auto test = LoadNodeConfig(fixed, {"metrics.listen=127.0.0.1:0", "data.test=csv:"});
  ASSERT_FALSE(test.ok());
  EXPECT_THAT(test.status().message(), HasSubstr("[data] test: unknown data source 'csv:'"));
  // [aggregator] payload_digest: blake3 by default, sha256 for older aggregators, nothing else.
  auto blake3 = LoadNodeConfig(fixed, {"metrics.listen=127.0.0.1:0"});
  ASSERT_TRUE(blake3.ok()) << blake3.status().ToString();
  EXPECT_EQ(blake3->payload_digest, wire::DigestKind::kBlake3);
  auto sha = LoadNodeConfig(fixed, {"metrics.listen=127.0.0.1:0", "aggregator.payload_digest=sha256"});
  ASSERT_TRUE(sha.ok()) << sha.status().ToString();
  EXPECT_EQ(sha->payload_digest, wire::DigestKind::kSha256);
  auto md5 = LoadNodeConfig(fixed, {"metrics.listen=127.0.0.1:0", "aggregator.payload_digest=md5"});
  ASSERT_FALSE(md5.ok());
  EXPECT_THAT(md5.status().message(), HasSubstr("[aggregator] payload_digest"));
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

  // A mistyped endpoint is named at load with its line, not by libzmq after the data loaded.
  std::string typo = dir.Write("typo.toml", R"([node]
id = "s"
[aggregator]
endpoint = "htp://nowhere:5555"
public_key = "agg.pub"
[federation]
id = "f"
)");
  auto e = LoadNodeConfig(typo, {});
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr(typo + ":4:12: [aggregator] endpoint: \"htp://nowhere:5555\" is not a ZeroMQ endpoint"));
  auto c = LoadNodeConfig(typo, {"aggregator.endpoint=tcp://agg:5555", "train.mode=allreduce", "collective.listen=tcp://0.0.0.0:0"});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("[collective] listen: \"tcp://0.0.0.0:0\": the port must be a number"));
  // The site id goes into every log line: control characters and spaces are refused at load.
  for (const char* id : {"site 1", "site\x01x", "-site"}) {
    auto bad_id = LoadNodeConfig(path, {"data.index=1", std::string("node.id=") + id});
    ASSERT_FALSE(bad_id.ok()) << id;
    EXPECT_THAT(bad_id.status().message(), HasSubstr("[node] id: ")) << id;
  }
}

TEST(ConfigNode, PrivacyKeysAndWhatDpSgdRefuses) {
  TempDir dir;
  std::string path = dir.Write("node.toml", R"([federation]
id = "f"
[node]
id = "s"
[aggregator]
endpoint = "tcp://agg:5555"
public_key = "agg.pub"
[privacy]
mode = "dp-sgd"
clip = 0.5
noise_multiplier = 1.3
delta = 1e-6
epsilon_budget = 4
)");
  auto r = LoadNodeConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const RecordPrivacyOptions& p = r->training.privacy;
  EXPECT_TRUE(p.enabled());
  EXPECT_DOUBLE_EQ(p.clip, 0.5);
  EXPECT_DOUBLE_EQ(p.noise_multiplier, 1.3);
  EXPECT_DOUBLE_EQ(p.delta, 1e-6);
  EXPECT_DOUBLE_EQ(p.epsilon_budget, 4);
  EXPECT_FALSE(LoadNodeConfig(path, {"privacy.mode=off"})->training.privacy.enabled());

  auto cnn = LoadNodeConfig(path, {"model.name=cnn"});  // Conv2d has per-example gradients
  ASSERT_TRUE(cnn.ok()) << cnn.status().ToString();
  auto cuda = LoadNodeConfig(path, {"train.device=cuda"});
  ASSERT_FALSE(cuda.ok());
  EXPECT_THAT(cuda.status().message(), HasSubstr("CPU backend"));
  auto ext = LoadNodeConfig(path, {"train.external=[\"python3\", \"t.py\"]"});
  ASSERT_FALSE(ext.ok());
  EXPECT_THAT(ext.status().message(), HasSubstr("external trainer"));
  auto delta = LoadNodeConfig(path, {"privacy.delta=1"});
  ASSERT_FALSE(delta.ok());
  EXPECT_THAT(delta.status().message(), HasSubstr("[privacy] delta"));
  auto mode = LoadNodeConfig(path, {"privacy.mode=opacus"});
  ASSERT_FALSE(mode.ok());
  EXPECT_THAT(mode.status().message(), HasSubstr("[privacy] mode: must be one of \"off\", \"dp-sgd\""));
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

TEST(ConfigNode, SecAggAllowResolvesAgainstTheConfigFolder) {
  TempDir dir;
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


// Issue 20: [train] external* keys, and every way to get them wrong (file, line, key).
TEST(ConfigNode, ExternalTrainerKeys) {
  TempDir dir;
  const std::string base = R"(
[federation]
id = "fed-1"
[node]
id = "site-2"
[aggregator]
endpoint = "tcp://agg:5555"
public_key = "agg.pub"
[train]
)";
  std::string path = dir.Write("node.toml", base + R"(external = ["python3", "train.py", "--site", "2"]
launch = "per_task"
external_timeout_s = 90
external_connect_timeout_s = 5
external_restart_backoff_s = 0.25
)");
  auto r = LoadNodeConfig(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->external.enabled());
  EXPECT_EQ(r->external.argv, (std::vector<std::string>{"python3", "train.py", "--site", "2"}));
  EXPECT_TRUE(r->external.per_task);
  EXPECT_EQ(r->external.timeout_ms, 90000);
  EXPECT_EQ(r->external.connect_timeout_ms, 5000);
  EXPECT_EQ(r->external.restart_backoff_ms, 250);
  EXPECT_EQ(fs::path(r->external.cwd), fs::path(path).parent_path());  // relative argv resolve here
  auto plain = LoadNodeConfig(dir.Write("plain.toml", base), {});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->external.enabled());

  struct Case {
    std::string body;
    std::vector<std::string> sets;
    std::string expect;
  };
  const Case cases[] = {
      {"external = [\"python3\"]\nexternal_endpoint = \"ipc:///run/t.sock\"\n", {},
       "[train] external_endpoint"},
      {"external_endpoint = \"tcp://127.0.0.1:5000\"\n", {}, "never TCP"},
      {"external_endpoint = \"ipc://relative.sock\"\n", {}, "absolute path"},
      {"external = [\"\", \"train.py\"]\n", {}, "empty program name"},
      {"launch = \"sometimes\"\n", {}, "[train] launch"},
      {"external = [\"python3\", 3]\n", {}, "[train] external"},
      {"external_connect_timeout_s = 0\n", {}, "[train] external_connect_timeout_s"},
      {"external_timeout_s = -1\n", {}, "[train] external_timeout_s"},
  };
  for (const Case& c : cases) {
    auto bad = LoadNodeConfig(dir.Write("bad.toml", base + c.body), c.sets);
    ASSERT_FALSE(bad.ok()) << c.body;
    EXPECT_THAT(bad.status().message(), HasSubstr(c.expect)) << c.body;
    EXPECT_THAT(bad.status().message(), HasSubstr("bad.toml")) << c.body;
  }
}

}  // namespace
}  // namespace fedmesh
