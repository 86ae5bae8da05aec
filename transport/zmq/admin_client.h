// AdminCall: fedmesh-admin's side of the admin channel (transport/zmq/admin_server.h): one
// request over a fresh CURVE DEALER connection, one reply. A refused handshake (the key is
// not on the aggregator's admin lists) is told apart from silence through libzmq's socket
// monitor, so an unknown key gets a clear answer at once instead of a timeout.
// Thread-safety: a free function; each call has its own context.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "crypto/identity.h"

namespace fedmesh {

struct AdminCallOptions {
  // How long to wait for the handshake and the reply. Default: 10,000 ms.
  int timeout_ms = 10000;
  // Largest reply accepted (an exported model). Default: 4 GiB.
  int64_t max_reply_bytes = int64_t{4} << 30;
};

struct AdminReply {
  nlohmann::json reply;  // {"ok": ..., "result" | "error": ...}
  std::string payload;   // the binary frame, when the reply has one
};

// PermissionDenied when the aggregator refused this key in the CURVE handshake;
// Unavailable when nothing answered within timeout_ms; Corruption for a reply that is not
// JSON. A refusal by the aggregator (a role that may not, an unknown command) is a reply
// with "ok": false, not an error here.
Result<AdminReply> AdminCall(const Identity& me, const PublicIdentity& server,
                             const std::string& endpoint, const std::string& command,
                             const std::string& argument, const AdminCallOptions& options = {});

}  // namespace fedmesh
