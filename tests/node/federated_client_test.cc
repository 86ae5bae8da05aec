// Tests of FederatedClient (node/federated_client.h) against a hand-played aggregator: a
// real ZmqServer with CurveZMQ and an allowlist on a loopback port the OS picks, the client
// on its own thread, a tiny synthetic CSV site and a logistic regression. Every wait has a
// deadline; the client is always stopped through its stop flag and joined.
#include "node/federated_client.h"

#include "core/codec/payload.h"
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "core/data/data_source.h"
#include "core/data/partition.h"
#include "core/sha256.h"
#include "core/wire/wire_codec.h"
#include "crypto/identity.h"
#include "crypto/update_signature.h"
#include "crypto/key_files.h"
#include "transport/zmq/zmq_server.h"
#include "storage/node_store.h"

namespace fedmesh {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kFed[] = "fed-fc-test";
constexpr char kSite[] = "site-a";
constexpr int kFeatures = 4;
constexpr int kClasses = 3;
constexpr size_t kParams = kFeatures * kClasses + kClasses;  // logreg: W + b

struct TempDir {
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fc_test_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

// 120 samples, 3 classes, 4 features that separate the classes: deterministic.
void WriteCsv(const std::string& path) {
  std::ofstream f(path);
  f << "f0,f1,f2,f3,label\n";
  for (int i = 0; i < 120; ++i) {
    const int label = i % kClasses;
    for (int j = 0; j < kFeatures; ++j) {
      const float v = (j == label ? 1.0f : 0.0f) + 0.05f * static_cast<float>((i * 7 + j * 3) % 11 - 5);
      f << v << ",";
    }
    f << label << "\n";
  }
}

class FederatedClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto agg = Identity::Generate("aggregator");
    ASSERT_TRUE(agg.ok()) << agg.status().ToString();
    agg_ = std::make_unique<Identity>(std::move(agg).value());
    auto node = Identity::Generate(kSite);
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    node_pub_ = node->public_identity();
    ASSERT_TRUE(WriteIdentity(dir_ / kSite, *node).ok());
    ASSERT_TRUE(WriteIdentity(dir_ / "aggregator", *agg_).ok());
    WriteCsv(dir_ / "site.csv");

    ZmqServerOptions so;
    auto server = ZmqServer::Create(so, agg_.get(), {node_pub_});
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    auto endpoint = server_->Bind("tcp://127.0.0.1:*");
    ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
    endpoint_ = *endpoint;
    ASSERT_NE(endpoint_.substr(endpoint_.rfind(':') + 1), "0");
  }

  void TearDown() override { StopClient(); }

  NodeConfig Config() const {
    NodeConfig c;
    c.node_id = kSite;
    c.key_path = SecretKeyPath(dir_ / kSite);
    c.db_path = dir_ / "node.db";
    c.aggregator_endpoint = endpoint_;
    c.aggregator_public_key_path = PublicKeyPath(dir_ / "aggregator");
    LocalTrainingOptions& t = c.training;
    t.node_id = kSite;
    t.model.name = "logreg";
    t.data.train = "csv:" + (dir_ / "site.csv");
    t.data.label_column = "label";
    t.data.num_classes = kClasses;
    t.partition.num_partitions = 2;
    t.index = 0;
    t.threads = 1;
    t.seed = 7;
    return c;
  }

  FederatedClientOptions Options() const {
    FederatedClientOptions o;
    o.federation_id = kFed;
    o.poll_interval_ms = 20;
    o.transport.reconnect_ivl_ms = 50;
    o.transport.reconnect_ivl_max_ms = 400;
    o.transport.send_timeout_ms = 2000;
    return o;
  }

  // This site's partition size, computed independently of the client: its partition of
  // the rows left after the held-out test rows ([data] test_fraction).
  size_t PartitionSize() const {
    const NodeConfig c = Config();
    auto site = LoadSiteData(c.training.data);
    EXPECT_TRUE(site.ok()) << site.status().ToString();
    auto full = std::optional<Dataset>(site->train);
    auto idx = PartitionFor(full->labels, full->num_classes, c.training.partition, c.training.index);
    EXPECT_TRUE(idx.ok()) << idx.status().ToString();
    return idx->size();
  }

  void StartClient(const NodeConfig& config, const FederatedClientOptions& options) {
    auto client = FederatedClient::Create(config, options, &env_, [this](const std::string& line) {
      std::lock_guard<std::mutex> l(log_mu_);
      log_.push_back(line);
    });
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
    stop_ = false;
    run_done_ = false;
    thread_ = std::thread([this] {
      run_status_ = client_->Run(&stop_);
      run_done_ = true;
    });
  }

  // Sets the stop flag and joins; the client must return within 5 s.
  void StopClient() {
    if (!thread_.joinable()) return;
    stop_ = true;
    const auto deadline = Clock::now() + milliseconds(5000);
    while (!run_done_ && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(5));
    EXPECT_TRUE(run_done_.load()) << "Run did not return within 5 s of the stop flag";
    thread_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  }

  // The next message of body type T from the node within `timeout_ms`; others are skipped.
  template <typename T>
  std::optional<std::pair<Received, T>> Next(int timeout_ms = 10000) {
    const auto deadline = Clock::now() + milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      auto ev = server_->Poll(50);
      EXPECT_TRUE(ev.ok()) << ev.status().ToString();
      if (!ev.ok() || !ev->has_value()) continue;
      if (auto* r = std::get_if<Received>(&**ev)) {
        if (auto* body = std::get_if<T>(&r->message.body)) return std::make_pair(*r, *body);
      }
    }
    return std::nullopt;
  }

  void Send(const std::string& peer, uint64_t round, wire::Body body) {
    wire::Message m{{kFed, "aggregator", round, round, next_id_++}, std::move(body)};
    Status s = server_->Send(peer, m);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Receives the Register and acks it; returns the peer.
  std::string Handshake() {
    auto reg = Next<wire::Register>();
    EXPECT_TRUE(reg.has_value()) << "no Register within 10 s";
    if (!reg) return "";
    EXPECT_EQ(reg->first.peer, node_pub_.curve_public_z85());
    Send(reg->first.peer, 0, wire::RegisterAck{kSite, 5000});
    return reg->first.peer;
  }

  static std::vector<float> Global() {
    std::vector<float> g(kParams);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i % 5) - 0.02f;
    return g;
  }

  static wire::FitTask Task(uint64_t round, const std::vector<float>& global) {
    wire::FitTask t;
    t.round = round;
    t.global_model = wire::FloatPayload(global);
    t.local_epochs = 2;
    t.batch_size = 16;
    t.learning_rate = 0.1;
    t.momentum = 0.5;
    return t;
  }

  // Starts the client with the default config, acks its Register (*peer: its peer id) and
  // sends it the round-1 task on Global(); its FitResult, or nullopt after 20 s.
  std::optional<std::pair<Received, wire::FitResult>> TrainRoundOne(std::string* peer) {
    StartClient(Config(), Options());
    *peer = Handshake();
    if (peer->empty()) return std::nullopt;
    Send(*peer, 1, Task(1, Global()));
    return Next<wire::FitResult>(20000);
  }

  bool Logged(const std::string& needle) {
    std::lock_guard<std::mutex> l(log_mu_);
    for (const auto& line : log_) {
      if (line.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  TempDir dir_;
  SystemEnv env_{1};
  std::unique_ptr<Identity> agg_;
  PublicIdentity node_pub_;
  std::unique_ptr<ZmqServer> server_;
  std::string endpoint_;
  std::unique_ptr<FederatedClient> client_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> run_done_{false};
  Status run_status_;
  std::thread thread_;
  uint64_t next_id_ = 1;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

TEST_F(FederatedClientTest, RegistersTrainsAndSendsItsChange) {
  const size_t partition = PartitionSize();
  ASSERT_GT(partition, 0u);
  StartClient(Config(), Options());
  ASSERT_EQ(client_->num_params(), kParams);

  auto reg = Next<wire::Register>();
  ASSERT_TRUE(reg.has_value()) << "no Register within 10 s";
  EXPECT_EQ(reg->second.node_id, kSite);
  EXPECT_EQ(reg->first.message.header.sender_id, kSite);
  EXPECT_EQ(reg->first.message.header.federation_id, kFed);
  EXPECT_EQ(reg->second.num_examples, partition);
  EXPECT_NE(std::find(reg->second.capabilities.begin(), reg->second.capabilities.end(), "codec:none"),
            reg->second.capabilities.end());
  const std::string peer = reg->first.peer;
  Send(peer, 0, wire::RegisterAck{kSite, 5000});

  const std::vector<float> global = Global();
  Send(peer, 1, Task(1, global));
  auto res = Next<wire::FitResult>(20000);
  ASSERT_TRUE(res.has_value()) << "no FitResult within 20 s";
  const wire::FitResult& r = res->second;
  EXPECT_EQ(r.round, 1u);
  EXPECT_EQ(res->first.message.header.round, 1u);
  EXPECT_EQ(res->first.message.header.sender_id, kSite);
  EXPECT_EQ(r.num_examples, partition);
  EXPECT_TRUE(std::isfinite(r.train_loss));
  EXPECT_GT(r.train_loss, 0.0);
  EXPECT_EQ(r.update.codec, "none");
  EXPECT_EQ(r.bytes_after_codec, r.update.bytes.size());
  EXPECT_EQ(r.bytes_before_codec, 4 * kParams);
  auto update = wire::PayloadFloats(r.update);
  ASSERT_TRUE(update.ok()) << update.status().ToString();
  ASSERT_EQ(update->size(), kParams);
  double moved = 0.0;
  for (size_t i = 0; i < kParams; ++i) {
    ASSERT_TRUE(std::isfinite((*update)[i])) << i;
    moved += std::abs((*update)[i]);  // the update is local - global
  }
  EXPECT_GT(moved, 1e-3) << "the update is zero: it did not train";

  // The checkpoint is written after the send; wait (bounded) for the client to record it.
  const auto deadline = Clock::now() + milliseconds(5000);
  while (client_->stats().rounds_served < 1 && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  StopClient();
  EXPECT_EQ(client_->stats().rounds_served, 1u);
  client_.reset();

  auto store = NodeStore::Open(dir_ / "node.db");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto cp = (*store)->LoadCheckpoint();
  ASSERT_TRUE(cp.ok()) << cp.status().ToString();
  ASSERT_TRUE(cp->has_value());
  ASSERT_TRUE((*cp)->last_round_served.has_value());
  EXPECT_EQ(*(*cp)->last_round_served, 1u);
  EXPECT_EQ((*cp)->model_version, 1u);
  EXPECT_EQ((*cp)->model, global);
  EXPECT_EQ((*cp)->velocity.size(), kParams);  // momentum 0.5: kept for the next round
}

// A site answers in the digest kind its task came with (crypto/update_signature.h): BLAKE3
// and a "v2" signature for a task with BLAKE3 (this build's aggregators), SHA-256 and a "v1"
// signature for one with SHA-256 (an aggregator built before BLAKE3, which reads only that).
TEST_F(FederatedClientTest, AnswersInTheDigestKindOfItsTask) {
  const std::vector<float> global = Global();
  std::string peer;
  auto first = TrainRoundOne(&peer);
  ASSERT_TRUE(first.has_value()) << "no FitResult within 20 s";
  ASSERT_TRUE(first->second.update.digest.has_value());
  EXPECT_EQ(first->second.update.digest->kind, wire::DigestKind::kBlake3);
  EXPECT_TRUE(VerifyUpdate(node_pub_, kFed, 1, first->second).ok());

  wire::FitTask old_style = Task(2, global);
  old_style.global_model.digest =
      wire::HashPayload(wire::DigestKind::kSha256, old_style.global_model.bytes);
  Send(peer, 2, old_style);
  auto second = Next<wire::FitResult>(20000);
  ASSERT_TRUE(second.has_value()) << "no FitResult within 20 s";
  ASSERT_TRUE(second->second.update.digest.has_value());
  EXPECT_EQ(second->second.update.digest->kind, wire::DigestKind::kSha256);
  EXPECT_EQ(second->second.update.digest->bytes, Sha256::Hash(second->second.update.bytes));
  EXPECT_TRUE(VerifyUpdate(node_pub_, kFed, 2, second->second).ok());
  const auto signed_bytes =
      UpdateSigningBytes(kFed, kSite, 2, second->second, *second->second.update.digest);
  const std::string v1 = "fedmesh/update/v1";
  EXPECT_EQ(std::string(signed_bytes.begin() + 8, signed_bytes.begin() + 8 + v1.size()), v1);
  StopClient();
}

// A node sends its update's chunk data as separate ZeroMQ parts (docs/wire.md, "Chunk data
// parts") only when its task says the aggregator accepts them; either way the update
// arrives whole and signed.
TEST_F(FederatedClientTest, SendsChunkDataPartsOnlyWhenItsTaskSaysSo) {
  const std::vector<float> global = Global();
  std::string peer;
  auto first = TrainRoundOne(&peer);
  ASSERT_TRUE(first.has_value()) << "no FitResult within 20 s";
  EXPECT_EQ(server_->data_parts_received(), 0u);

  wire::FitTask task = Task(2, global);
  task.chunk_data_parts = true;
  Send(peer, 2, task);
  auto second = Next<wire::FitResult>(20000);
  ASSERT_TRUE(second.has_value()) << "no FitResult within 20 s";
  EXPECT_TRUE(VerifyUpdate(node_pub_, kFed, 2, second->second).ok());
  const uint64_t chunk = uint64_t{8} << 20;  // [aggregator] upload_chunk_kb's default
  EXPECT_EQ(server_->data_parts_received(), (second->second.update.bytes.size() + chunk - 1) / chunk);
  EXPECT_GT(server_->data_parts_received(), 0u);
  StopClient();
}

// Resumed uploads: the aggregator sends the same task again (it lost the node's connection
// before it had the whole update). The node does not train again: it asks the transport
// what the server holds and sends the kept update - here the server's transport holds
// nothing of it (UNKNOWN), so the same message, same id and bytes, arrives whole.
TEST_F(FederatedClientTest, TheSameTaskAgainResumesTheKeptUpdateWithoutTraining) {
  const std::vector<float> global = Global();
  std::string peer;
  auto first = TrainRoundOne(&peer);
  ASSERT_TRUE(first.has_value()) << "no FitResult within 20 s";
  const uint64_t resumes_before = server_->resume_offers();

  Send(peer, 1, Task(1, global));
  auto again = Next<wire::FitResult>(20000);
  ASSERT_TRUE(again.has_value()) << "the kept update was not sent again";
  EXPECT_EQ(again->first.message.header, first->first.message.header);  // same message id
  EXPECT_EQ(*wire::PayloadFloats(again->second.update), *wire::PayloadFloats(first->second.update));
  EXPECT_EQ(server_->resume_offers(), resumes_before + 1);  // the query's answer
  EXPECT_TRUE(Logged("round 1: the task came again; resuming the upload"));
  // Logged at the driver's next poll.
  const auto deadline = Clock::now() + milliseconds(3000);
  while (!Logged("resumed an upload cut by a lost connection") && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(Logged("resumed an upload cut by a lost connection"));
  StopClient();
  EXPECT_EQ(client_->stats().rounds_served, 1u);  // trained once
}

TEST_F(FederatedClientTest, RefusesWrongSizeTaskAndServesTheNext) {
  StartClient(Config(), Options());
  const std::string peer = Handshake();
  ASSERT_FALSE(peer.empty());

  Send(peer, 1, Task(1, std::vector<float>(kParams + 3, 0.0f)));  // wrong size
  // (A non-finite global model cannot be sent at all: the wire codec refuses to encode it.)
  wire::FitTask bad_global = Task(2, Global());
  // fp16 of the right size whose first value is the infinity pattern: the wire passes it
  // (it does not decode codecs), the node's decoder refuses it.
  bad_global.global_model.codec = "fp16";
  bad_global.global_model.bytes.assign(2 * kParams, 0);
  bad_global.global_model.bytes[1] = 0x7C;
  Send(peer, 2, bad_global);
  wire::FitTask fp16 = Task(3, Global());
  fp16.update_codec = "fp16";  // prescribed: the node must use it
  Send(peer, 3, fp16);
  auto res = Next<wire::FitResult>(20000);
  ASSERT_TRUE(res.has_value()) << "no FitResult within 20 s";
  EXPECT_EQ(res->second.round, 3u) << "a refused task was answered";
  EXPECT_EQ(res->second.update.codec, "fp16");
  EXPECT_EQ(res->second.update.bytes.size(), 2 * kParams);
  EXPECT_EQ(res->second.bytes_before_codec, 4 * kParams);
  StopClient();
  EXPECT_EQ(client_->stats().tasks_refused, 2u);
  EXPECT_EQ(client_->stats().rounds_served, 1u);
  EXPECT_TRUE(Logged("refused the FitTask for round 1"));
  EXPECT_TRUE(Logged("refused the FitTask for round 2: global model:"));
}

// Issue 4: a lossy [codec] chain with error feedback. The update is sent in the chain, and
// what it dropped (the residual) is saved in the checkpoint and restored on restart.
TEST_F(FederatedClientTest, LossyChainKeepsItsResidualAcrossARestart) {
  NodeConfig config = Config();
  config.codec_chain = "topk:0.2|int8:256";  // keeps 3 of 15
  StartClient(config, Options());
  std::string peer = Handshake();
  ASSERT_FALSE(peer.empty());
  Send(peer, 1, Task(1, Global()));
  auto res = Next<wire::FitResult>(20000);
  ASSERT_TRUE(res.has_value()) << "no FitResult within 20 s";
  const wire::FitResult& r = res->second;
  EXPECT_EQ(r.update.codec, "topk:0.2|int8:256");
  EXPECT_LT(r.update.bytes.size(), 4 * kParams / 2);
  auto sent = codec::DecodePayload(r.update);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  size_t nonzero = 0;
  for (float v : *sent) nonzero += (v != 0.0f);
  EXPECT_LE(nonzero, 3u);
  const auto deadline = Clock::now() + milliseconds(5000);
  while (client_->stats().rounds_served < 1 && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  StopClient();
  const std::vector<float> residual = client_->residual();
  ASSERT_EQ(residual.size(), kParams);
  // The residual holds what was not sent: zero (or the int8 error) where top-k kept a value,
  // the whole change elsewhere; so it cannot be all zeros after a real training round.
  double dropped = 0;
  for (size_t i = 0; i < kParams; ++i) {
    if ((*sent)[i] == 0.0f) dropped += std::abs(residual[i]);
  }
  EXPECT_GT(dropped, 1e-4);
  client_.reset();

  auto store = NodeStore::Open(dir_ / "node.db");
  ASSERT_TRUE(store.ok());
  auto cp = (*store)->LoadCheckpoint();
  ASSERT_TRUE(cp.ok() && cp->has_value());
  ASSERT_EQ((*cp)->tensors.count("codec/residual"), 1u);
  EXPECT_EQ((*cp)->tensors.at("codec/residual"), residual);
  store->reset();

  // Restart from the same store: the residual is back.
  StartClient(config, Options());
  EXPECT_EQ(client_->residual(), residual);
  StopClient();
}

TEST_F(FederatedClientTest, CheckpointWithCodecStateOfAnotherSizeIsRefused) {
  {
    auto store = NodeStore::Open(dir_ / "node.db");
    ASSERT_TRUE(store.ok());
    NodeCheckpoint cp;
    cp.model = Global();
    cp.tensors["codec/residual"] = std::vector<float>(kParams + 1, 0.0f);
    ASSERT_TRUE((*store)->SaveCheckpoint(cp).ok());
  }
  std::vector<std::string> lines;
  auto client = FederatedClient::Create(Config(), Options(), &env_,
                                        [&](const std::string& l) { lines.push_back(l); });
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(client.status().message().find("codec state of 16 values"), std::string::npos)
      << client.status().message();
}

// A missing key file or aggregator public key names the config key behind it.
TEST_F(FederatedClientTest, AMissingKeyFileNamesItsConfigKey) {
  for (const auto& [key, expect] : {std::pair<std::string, std::string>{"node", "node.toml: [node] key: "},
                                    {"aggregator", "node.toml: [aggregator] public_key: "}}) {
    NodeConfig c = Config();
    c.config_path = "node.toml";
    (key == "node" ? c.key_path : c.aggregator_public_key_path) = dir_ / "nope.key";
    auto client = FederatedClient::Create(c, Options(), &env_, [](const std::string&) {});
    ASSERT_FALSE(client.ok()) << key;
    EXPECT_EQ(client.status().code(), StatusCode::kNotFound) << client.status().ToString();
    EXPECT_NE(client.status().message().find(expect), std::string::npos) << client.status().message();
  }
}

TEST_F(FederatedClientTest, ReSendsRegisterUntilAcked) {
  StartClient(Config(), Options());
  auto first = Next<wire::Register>();
  ASSERT_TRUE(first.has_value());
  // No answer: the client reconnects and registers again after a jittered backoff.
  auto second = Next<wire::Register>(5000);
  ASSERT_TRUE(second.has_value()) << "Register was not re-sent within 5 s";
  EXPECT_NE(second->first.message.header.message_id, first->first.message.header.message_id);
  Send(second->first.peer, 0, wire::RegisterAck{kSite, 5000});
  const auto deadline = Clock::now() + milliseconds(5000);
  while (client_->stats().registrations < 1 && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(client_->stats().registrations, 1u);
  StopClient();
}

TEST_F(FederatedClientTest, ResumesFromItsCheckpoint) {
  StartClient(Config(), Options());
  const std::string peer = Handshake();
  ASSERT_FALSE(peer.empty());
  Send(peer, 4, Task(4, Global()));
  ASSERT_TRUE(Next<wire::FitResult>(20000).has_value());
  const auto deadline = Clock::now() + milliseconds(5000);
  while (client_->stats().rounds_served < 1 && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  StopClient();
  client_.reset();

  auto again = FederatedClient::Create(Config(), Options(), &env_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE((*again)->last_round_served().has_value());
  EXPECT_EQ(*(*again)->last_round_served(), 4u);
}

TEST_F(FederatedClientTest, CreateRejectsBadKeysAndIds) {
  {
    NodeConfig c = Config();
    c.node_id = "site-b";  // not the key's name
    auto r = FederatedClient::Create(c, Options(), &env_);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("site-a"), std::string::npos) << r.status().message();
  }
  {
    FederatedClientOptions o = Options();
    o.federation_id = "";
    EXPECT_EQ(FederatedClient::Create(Config(), o, &env_).status().code(), StatusCode::kInvalidArgument);
  }
  {
    NodeConfig c = Config();
    c.aggregator_public_key_path = dir_ / "missing.pub";
    EXPECT_EQ(FederatedClient::Create(c, Options(), &env_).status().code(), StatusCode::kNotFound);
  }
  {
    ASSERT_EQ(chmod(SecretKeyPath(dir_ / kSite).c_str(), 0644), 0);
    auto r = FederatedClient::Create(Config(), Options(), &env_);
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
  }
}

}  // namespace
}  // namespace fedmesh
