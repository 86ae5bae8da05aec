// UpstreamLink against a real ZmqServer (CurveZMQ on loopback) playing the top aggregator:
// registration, a task it serves (decoded model, the top's settings), its signed answer
// (the change, the examples), and every task a region refuses with Reject(kTaskFailed).
#include "aggregator/upstream_link.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "core/wire/wire_codec.h"
#include "crypto/update_signature.h"
#include "transport/zmq/zmq_server.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;

constexpr char kTopFed[] = "national";

Identity NewIdentity(const std::string& name) {
  auto id = Identity::Generate(name);
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return std::move(id).value();
}

class TestEnv final : public Env {
 public:
  double NowSeconds() const override { return 0; }
  Rng& rng() override { return rng_; }

 private:
  Rng rng_{3};
};

class UpstreamLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    region_pub_ = region_.public_identity();
    auto server = ZmqServer::Create({}, &top_, {region_pub_});
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    auto endpoint = server_->Bind("tcp://127.0.0.1:*");
    ASSERT_TRUE(endpoint.ok());
    UpstreamLinkOptions o;
    o.endpoint = *endpoint;
    o.federation_id = kTopFed;
    o.num_params = 3;
    auto link = UpstreamLink::Create(o, std::move(region_), top_.public_identity().curve_public, &env_);
    ASSERT_TRUE(link.ok()) << link.status().ToString();
    link_ = std::move(link).value();
    // Register -> RegisterAck.
    auto reg = ServerReceive();
    ASSERT_TRUE(reg.has_value());
    ASSERT_TRUE(std::holds_alternative<wire::Register>(reg->message.body));
    EXPECT_EQ(std::get<wire::Register>(reg->message.body).num_examples, 0u);
    peer_ = reg->peer;
    ASSERT_TRUE(server_->Send(peer_, {{kTopFed, "aggregator", 0, 0, next_id_++}, wire::RegisterAck{"region-a", 5000}}).ok());
    for (int i = 0; i < 50 && !link_->registered(); ++i) ASSERT_TRUE(link_->Poll(20).ok());
    ASSERT_TRUE(link_->registered());
  }

  // The next message the top receives (polling the link meanwhile), or nullopt after 5 s.
  std::optional<Received> ServerReceive() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      auto polled = link_ ? link_->Poll(10) : Result<std::optional<UpstreamTask>>(std::optional<UpstreamTask>());
      EXPECT_TRUE(polled.ok());
      if (polled.ok() && polled->has_value()) pending_ = std::move(**polled);
      auto ev = server_->Poll(10);
      if (!ev.ok() || !ev->has_value()) continue;
      if (auto* r = std::get_if<Received>(&**ev)) {
        if (std::holds_alternative<wire::Heartbeat>(r->message.body)) continue;
        return std::move(*r);
      }
    }
    return std::nullopt;
  }

  wire::FitTask Task(uint64_t round, std::vector<float> model) {
    wire::FitTask t;
    t.round = round;
    t.global_model = wire::FloatPayload(model);
    t.local_epochs = 2;
    t.batch_size = 64;
    t.learning_rate = 0.03;
    t.momentum = 0.5;
    return t;
  }

  // Sends `task` (header round `header_round`, or the task's) and returns the task the link
  // hands over, if any, after up to 2 s.
  std::optional<UpstreamTask> SendTask(const wire::FitTask& task, std::optional<uint64_t> header_round = {}) {
    pending_.reset();
    wire::Message m{{kTopFed, "aggregator", header_round.value_or(task.round), 7, next_id_++}, task};
    EXPECT_TRUE(server_->Send(peer_, m).ok());
    for (int i = 0; i < 100 && !pending_; ++i) {
      auto polled = link_->Poll(20);
      EXPECT_TRUE(polled.ok());
      if (polled.ok() && polled->has_value()) pending_ = std::move(**polled);
    }
    return pending_;
  }

  // Sends a task the region must refuse; returns the Reject's text.
  std::string Refused(const wire::FitTask& task, std::optional<uint64_t> header_round = {}) {
    const uint64_t id = next_id_++;
    pending_.reset();
    EXPECT_TRUE(server_->Send(peer_, {{kTopFed, "aggregator", header_round.value_or(task.round), 7, id}, task}).ok());
    auto reply = ServerReceive();  // polls the link meanwhile
    EXPECT_FALSE(pending_.has_value());
    EXPECT_TRUE(reply.has_value());
    if (!reply) return "";
    const auto* rej = std::get_if<wire::Reject>(&reply->message.body);
    EXPECT_NE(rej, nullptr);
    if (!rej) return "";
    EXPECT_EQ(rej->reason, wire::RejectReason::kTaskFailed);
    EXPECT_EQ(rej->rejected_message_id, id);
    return rej->text;
  }

  TestEnv env_;
  Identity top_ = NewIdentity("top");
  Identity region_ = NewIdentity("region-a");
  PublicIdentity region_pub_;
  std::unique_ptr<ZmqServer> server_;
  std::unique_ptr<UpstreamLink> link_;
  std::string peer_;
  uint64_t next_id_ = 1;
  std::optional<UpstreamTask> pending_;
};

TEST_F(UpstreamLinkTest, ServesATaskAndAnswersWithTheSignedChangeAndExamples) {
  auto task = SendTask(Task(4, {1.0f, 2.0f, 3.0f}));
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->round, 4u);
  EXPECT_EQ(task->model_version, 7u);
  EXPECT_EQ(task->global, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(task->settings.local_epochs, 2);
  EXPECT_EQ(task->settings.batch_size, 64);
  EXPECT_EQ(task->settings.learning_rate, 0.03);
  EXPECT_EQ(task->settings.momentum, 0.5);

  const std::vector<float> regional = {2.0f, 2.0f, 5.5f};
  ASSERT_TRUE(link_->SendResult(*task, regional, 1234, 0.25).ok());
  auto reply = ServerReceive();
  ASSERT_TRUE(reply.has_value());
  const auto* r = std::get_if<wire::FitResult>(&reply->message.body);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->round, 4u);
  EXPECT_EQ(r->num_examples, 1234u);
  EXPECT_EQ(r->train_loss, 0.25);
  EXPECT_EQ(wire::PayloadFloats(r->update).value(), (std::vector<float>{1.0f, 0.0f, 2.5f}));
  EXPECT_EQ(reply->message.header.model_version, 7u);
  EXPECT_TRUE(VerifyUpdate(region_pub_, kTopFed, 7, *r).ok());
  EXPECT_FALSE(VerifyUpdate(top_.public_identity(), kTopFed, 7, *r).ok());
  EXPECT_EQ(link_->stats().results_sent, 1u);
  // A result of another size is an error, not a message.
  EXPECT_FALSE(link_->SendResult(*task, std::vector<float>{1.0f}, 1, 0).ok());
}

TEST_F(UpstreamLinkTest, TasksARegionCannotServeAreRefusedWithAReason) {
  wire::FitTask eval = Task(1, {0, 0, 0});
  eval.evaluate_only = true;
  EXPECT_THAT(Refused(eval), HasSubstr("holds no data"));

  wire::FitTask secure = Task(1, {0, 0, 0});
  secure.secagg = wire::SecAggParameters{};
  secure.secagg->min_clients = 3;
  secure.secagg->max_clients = 10;
  EXPECT_THAT(Refused(secure), HasSubstr("secure aggregation"));

  EXPECT_THAT(Refused(Task(1, {0, 0})), HasSubstr("2 parameters"));

  wire::FitTask other = Task(1, {0, 0, 0});
  other.model_sha256 = std::string(64, 'a');
  other.model_graph = "x";
  EXPECT_THAT(Refused(other), HasSubstr("graph sha256"));

  wire::FitTask prox = Task(1, {0, 0, 0});
  prox.prox_mu = 0.1;
  EXPECT_THAT(Refused(prox), HasSubstr("FedProx"));

  // A header round that differs, a prediction without its second half and an unknown codec
  // never reach the link: the wire's own checks refuse to encode or decode them
  // (tests/core/wire_hostile_test.cc).
  EXPECT_EQ(link_->stats().tasks_refused, 5u);
  EXPECT_EQ(link_->stats().tasks, 0u);
}

TEST(UpstreamLinkCreate, MissingSettingsAreInvalid) {
  TestEnv env;
  UpstreamLinkOptions o;
  o.federation_id = kTopFed;
  o.num_params = 3;
  EXPECT_EQ(UpstreamLink::Create(o, NewIdentity("region-a"), {}, &env).status().code(),
            StatusCode::kInvalidArgument);
  o.endpoint = "tcp://127.0.0.1:1";
  o.num_params = 0;
  EXPECT_EQ(UpstreamLink::Create(o, NewIdentity("region-a"), {}, &env).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedmesh
