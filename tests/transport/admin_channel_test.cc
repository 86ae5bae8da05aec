// The admin channel (transport/zmq/admin_server.h, admin_client.h) over real CurveZMQ on
// loopback: each key is named with its role, an unknown key is told it was refused, a
// malformed or oversized request is refused without stopping the server, and a key cannot
// hold two roles.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "crypto/identity.h"
#include "transport/zmq/admin_client.h"
#include "transport/zmq/admin_server.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

Identity Make(const std::string& name) {
  auto id = Identity::Generate(name);
  EXPECT_TRUE(id.ok());
  return std::move(id).value();
}

struct Channel {
  Identity agg = Make("aggregator");
  Identity alice = Make("alice");
  Identity bob = Make("bob");
  Identity mallory = Make("mallory");
  std::unique_ptr<AdminServer> server;
  std::string endpoint;

  Channel() {
    auto s = AdminServer::Create(agg, {alice.public_identity()}, {bob.public_identity()});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server = std::move(s).value();
    auto ep = server->Bind("tcp://127.0.0.1:*");
    EXPECT_TRUE(ep.ok());
    endpoint = *ep;
  }

  // Runs one call from `who` on another thread while this one serves; returns the request
  // the server saw (if any) and the client's result.
  std::pair<std::optional<AdminRequest>, Result<AdminReply>> Call(const Identity& who, const std::string& command,
                                                                  const std::string& argument = "",
                                                                  int timeout_ms = 5000) {
    AdminCallOptions o;
    o.timeout_ms = timeout_ms;
    auto client = std::async(std::launch::async, [&] {
      return AdminCall(who, agg.public_identity(), endpoint, command, argument, o);
    });
    std::optional<AdminRequest> seen;
    while (client.wait_for(0ms) != std::future_status::ready) {
      auto r = server->Poll(20);
      EXPECT_TRUE(r.ok());
      if (r.ok() && *r) {
        seen = **r;
        EXPECT_TRUE(server->Reply(**r, {{"ok", true}, {"result", "did " + (*r)->command}}, "PAYLOAD").ok());
      }
    }
    return {seen, client.get()};
  }
};

TEST(AdminChannel, EachKeyIsNamedWithItsRoleAndGetsTheReplyAndPayload) {
  Channel c;
  auto [seen, reply] = c.Call(c.alice, "pause", "now");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->who, "alice");
  EXPECT_EQ(seen->role, AdminRole::kAdmin);
  EXPECT_EQ(seen->command, "pause");
  EXPECT_EQ(seen->argument, "now");
  EXPECT_EQ(reply->reply["result"], "did pause");
  EXPECT_EQ(reply->payload, "PAYLOAD");
  auto [seen_bob, reply_bob] = c.Call(c.bob, "status");
  ASSERT_TRUE(reply_bob.ok());
  ASSERT_TRUE(seen_bob.has_value());
  EXPECT_EQ(seen_bob->who, "bob");
  EXPECT_EQ(seen_bob->role, AdminRole::kObserver);
}

TEST(AdminChannel, AnUnknownKeyIsToldItWasRefusedAtOnce) {
  Channel c;
  const auto start = std::chrono::steady_clock::now();
  auto [seen, reply] = c.Call(c.mallory, "abort", "", 8000);
  EXPECT_FALSE(seen.has_value());
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(reply.status().message(), HasSubstr("refused admin key mallory"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "refusal must not wait for the timeout";
  EXPECT_GE(c.server->refused_count(), 1u);
  // A site key is just as unknown here: the admin lists are the only ones this socket reads.
  Identity site = Make("site-1");
  auto [seen2, reply2] = c.Call(site, "status");
  EXPECT_EQ(reply2.status().code(), StatusCode::kPermissionDenied);
}

TEST(AdminChannel, AReloadThatDropsAKeyRefusesItsNextCall) {
  Channel c;
  ASSERT_TRUE(c.Call(c.bob, "status").second.ok());
  ASSERT_TRUE(c.server->Reload({c.alice.public_identity()}, {}).ok());
  auto [seen, reply] = c.Call(c.bob, "status");
  EXPECT_FALSE(seen.has_value());
  EXPECT_EQ(reply.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(c.Call(c.alice, "status").second.ok());
}

TEST(AdminChannel, MalformedAndOversizedRequestsAreRefusedAndTheServerKeepsServing) {
  Channel c;
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  const CurveKey& pub = c.alice.public_identity().curve_public;
  const CurveKey& srv = c.agg.public_identity().curve_public;
  ASSERT_EQ(zmq_setsockopt(raw.handle(), ZMQ_CURVE_PUBLICKEY, pub.data(), pub.size()), 0);
  ASSERT_EQ(zmq_setsockopt(raw.handle(), ZMQ_CURVE_SECRETKEY, c.alice.curve_secret().data(), 32), 0);
  ASSERT_EQ(zmq_setsockopt(raw.handle(), ZMQ_CURVE_SERVERKEY, srv.data(), srv.size()), 0);
  raw.connect(c.endpoint);
  for (const std::string& bad : {std::string("not json"), std::string("[1,2]"),
                                std::string("{\"command\": 3}"), std::string("{\"argument\": \"x\"}")}) {
    ASSERT_TRUE(raw.send(zmq::buffer(bad), zmq::send_flags::none));
    zmq::message_t answer;
    bool got = false;
    for (int i = 0; i < 100 && !got; ++i) {
      auto r = c.server->Poll(20);
      ASSERT_TRUE(r.ok());
      EXPECT_FALSE(r->has_value()) << "a malformed request must not reach the aggregator: " << bad;
      got = raw.recv(answer, zmq::recv_flags::dontwait).has_value();
    }
    ASSERT_TRUE(got) << bad;
    auto j = nlohmann::json::parse(answer.to_string());
    EXPECT_EQ(j["ok"], false);
    EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("malformed request")) << bad;
  }
  // Past max_request_bytes: libzmq drops the frame and the connection unread.
  const std::string big(64 * 1024, 'x');
  ASSERT_TRUE(raw.send(zmq::buffer(big), zmq::send_flags::none));
  for (int i = 0; i < 20; ++i) {
    auto r = c.server->Poll(10);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->has_value());
  }
  auto [seen, reply] = c.Call(c.alice, "status");
  EXPECT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_TRUE(seen.has_value());
}

TEST(AdminChannel, AKeyCannotHoldBothRoles) {
  Identity agg = Make("aggregator"), alice = Make("alice");
  auto s = AdminServer::Create(agg, {alice.public_identity()}, {alice.public_identity()});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("both as admin"));
}

}  // namespace
}  // namespace fedmesh
