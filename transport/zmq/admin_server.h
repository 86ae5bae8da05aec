// AdminServer: the aggregator's admin channel (fedmesh-admin; docs/operations.md). A ZeroMQ
// ROUTER socket, CURVE server with the aggregator's key, in its own context with its own
// ZapHandler that admits only admin and observer keys: the site allowlist and the admin
// lists never mix, so a site key cannot reach this socket and an admin key cannot join a
// round. Each request is one frame of JSON, {"command": "...", "argument": "..."}, at most
// max_request_bytes (libzmq drops a larger frame, and its connection, before allocating
// it); Poll returns it with who sent it (the key's name) and that key's role. A frame that
// is not such an object is answered with an error here and never returned. Replies are one
// JSON frame ({"ok": true, "result": ...} or {"ok": false, "error": "..."}) and an
// optional binary frame (an exported model).
//
// Thread-safety: one driver thread for Bind, Poll and Reply; Reload from any thread.
#pragma once

#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "core/status.h"
#include "crypto/identity.h"
#include "transport/zmq/zap_handler.h"

namespace fedmesh {

enum class AdminRole { kObserver, kAdmin };
const char* AdminRoleName(AdminRole role);

struct AdminRequest {
  std::string routing_id;  // the connection to answer (opaque)
  std::string who;         // the admin key's name
  AdminRole role = AdminRole::kObserver;
  std::string command;
  std::string argument;
};

struct AdminServerOptions {
  // Largest request frame accepted. Default: 4,096 bytes (a command and a site name).
  int max_request_bytes = 4096;
  // Requests read per Poll. Default: 16.
  int max_requests_per_poll = 16;
};

class AdminServer {
 public:
  // A server with `identity`'s key admitting `admins` (may change) and `observers` (may
  // only read). InvalidArgument when a key is in both lists; Internal on libzmq failure.
  static Result<std::unique_ptr<AdminServer>> Create(const Identity& identity,
                                                     const std::vector<PublicIdentity>& admins,
                                                     const std::vector<PublicIdentity>& observers,
                                                     AdminServerOptions options = {});
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Binds `endpoint`; returns the endpoint bound (the real port). Unavailable when in use.
  Result<std::string> Bind(const std::string& endpoint);
  // The next well-formed request, waiting up to timeout_ms; nullopt when none came.
  Result<std::optional<AdminRequest>> Poll(int timeout_ms);
  // Answers `request` with `reply` (and `payload` as a second frame when not empty). A
  // client that went away is not an error.
  Status Reply(const AdminRequest& request, const nlohmann::json& reply,
               const std::string& payload = {});
  // Replaces both lists (a key admitted before stays connected until it sends again: its
  // request is then refused as from an unknown key). Thread-safe.
  Status Reload(const std::vector<PublicIdentity>& admins,
                const std::vector<PublicIdentity>& observers);
  // Handshakes refused by the ZAP handler (unknown keys).
  uint64_t refused_count() const { return zap_->refused_count(); }

 private:
  AdminServer() = default;
  Status SendReply(const std::string& routing_id, const nlohmann::json& reply,
                   const std::string& payload);

  AdminServerOptions options_;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // after context_: stopped before it closes
  zmq::socket_t socket_;             // last: closed first
  mutable std::mutex mu_;
  std::map<std::string, std::pair<std::string, AdminRole>> roles_;  // Z85 key -> name, role
};

}  // namespace fedmesh
