// Helpers shared by the ZeroMQ transport tests: identities, a server on a loopback port
// the OS picks, clients, bounded waits for server events.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/wire/wire_codec.h"
#include "crypto/identity.h"
#include "transport/zmq/zmq_client.h"
#include "transport/zmq/zmq_server.h"

namespace fedmesh::zmqtest {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline constexpr char kFed[] = "fed-test";

inline Identity NewIdentity(const std::string& name) {
  auto id = Identity::Generate(name);
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return std::move(id).value();
}

inline wire::Message RegisterMsg(const std::string& node, uint64_t id) {
  return {{kFed, node, 0, 0, id}, wire::Register{node, 100, {"codec:fp16"}}};
}

inline wire::Message AckMsg(const std::string& node, uint64_t id) {
  return {{kFed, "aggregator", 0, 0, id}, wire::RegisterAck{node, 50}};
}

inline int PortOf(const std::string& endpoint) {
  return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
}

inline wire::WireLimits TestLimits() {
  wire::WireLimits l;
  l.max_header_bytes = 64 << 10;
  l.max_chunk_bytes = 4 << 20;  // 8M floats = 8 chunks
  return l;
}

// A server admitting `allowed`, bound on a loopback port the OS picks.
struct Server {
  std::unique_ptr<ZmqServer> server;
  std::string endpoint;
};

inline Server StartServer(const Identity& agg, const std::vector<PublicIdentity>& allowed,
                   ZmqServerOptions options = {}) {
  if (options.limits.max_chunk_bytes == wire::WireLimits{}.max_chunk_bytes) {
    options.limits = TestLimits();
  }
  auto server = ZmqServer::Create(options, options.curve ? &agg : nullptr, allowed);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  auto endpoint = (*server)->Bind("tcp://127.0.0.1:*");
  EXPECT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  EXPECT_NE(PortOf(*endpoint), 0);
  return {std::move(server).value(), *endpoint};
}

inline std::unique_ptr<ZmqClient> StartClient(const Identity* node, const Server& server,
                                       const Identity& agg, ZmqClientOptions options = {}) {
  options.federation_id = kFed;
  options.node_id = node ? node->name() : "plain-node";
  options.limits = TestLimits();
  options.reconnect_ivl_ms = 20;
  options.reconnect_ivl_max_ms = 100;
  auto client = ZmqClient::Create(options, node);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(
      (*client)->Connect(server.endpoint, agg.public_identity().curve_public).ok());
  return std::move(client).value();
}

// Polls until an event of type T arrives or `ms` pass; other events go to `others`.
template <typename T>
inline std::optional<T> AwaitEvent(ZmqServer& server, int ms, std::vector<ServerEvent>* others = nullptr) {
  const auto deadline = Clock::now() + milliseconds(ms);
  while (Clock::now() < deadline) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    auto event = server.Poll(static_cast<int>(std::max<int64_t>(left, 0)));
    EXPECT_TRUE(event.ok()) << event.status().ToString();
    if (!event.ok() || !event->has_value()) continue;
    if (auto* t = std::get_if<T>(&**event)) return std::move(*t);
    if (others) others->push_back(std::move(**event));
  }
  return std::nullopt;
}

// Sends Register from `client` (again every 100 ms, as a re-registering node would) until
// the server receives one or `ms` pass.
inline std::optional<Received> RegisterUntilReceived(ZmqClient& client, ZmqServer& server,
                                              const std::string& node, int ms) {
  const auto deadline = Clock::now() + milliseconds(ms);
  uint64_t id = 1;
  while (Clock::now() < deadline) {
    EXPECT_TRUE(client.Send(RegisterMsg(node, id++)).ok());
    if (auto r = AwaitEvent<Received>(server, 100)) return r;
  }
  return std::nullopt;
}

// Full Register -> RegisterAck exchange; returns the peer id the server saw.
inline std::string RoundTrip(ZmqClient& client, ZmqServer& server, const std::string& node) {
  auto got = RegisterUntilReceived(client, server, node, 3000);
  if (!got.has_value()) {
    ADD_FAILURE() << "server never received Register from " << node;
    return "";
  }
  EXPECT_EQ(wire::TypeOf(got->message.body), wire::MessageType::kRegister);
  EXPECT_EQ(got->message.header.sender_id, node);
  EXPECT_TRUE(server.Send(got->peer, AckMsg(node, 7)).ok());
  auto reply = client.Poll(3000);
  EXPECT_TRUE(reply.ok()) << reply.status().ToString();
  if (reply.ok()) {
    EXPECT_TRUE(reply->has_value());
    if (reply->has_value()) {
      EXPECT_EQ(**reply, AckMsg(node, 7));
    }
  }
  return got->peer;
}

}  // namespace fedmesh::zmqtest
