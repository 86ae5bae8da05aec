// Transport: how the aggregator and node drivers move wire::Messages between processes,
// without knowing the sockets underneath. ServerTransport is the aggregator's side (one
// endpoint, many authenticated peers); ClientTransport is a node's side (one server).
// Implementations: transport/zmq/zmq_server.h and transport/zmq/zmq_client.h (ROUTER/DEALER over
// TCP with CurveZMQ); the simulator provides an in-process one. A driver sees only this
// header, so the sans-IO round engine can be run over either.
//
// Errors a peer or the network can cause are Status values or events, never exceptions:
// malformed input from a peer is a RejectedInput event (the transport keeps serving), a
// silent peer is a PeerDead event, a peer that is gone when sending is Unavailable.
// Thread-safety: a transport object is used from one driver thread at a time (Bind /
// Connect, Send and Poll are not safe to call concurrently on the same object). An
// implementation may run internal threads (ZAP handler, heartbeats) of its own.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "core/status.h"
#include "core/wire/messages.h"

namespace fedmesh {

// A whole message from an authenticated peer. `peer` is the transport's name for the
// connection's authenticated identity: with CurveZMQ, the peer's public key as 40 Z85
// characters (what PublicIdentity::curve_public_z85() returns); with authentication off
// (benchmarks only), the hex of the connection's routing id.
struct Received {
  std::string peer;
  wire::Message message;
};

// Input from `peer` that failed decoding (garbage, truncated or over-limit frames, a bad
// checksum). The input was dropped; `reason` says why. The peer stays connected: the
// driver decides whether to Reject it, count it or ignore it.
struct RejectedInput {
  std::string peer;
  Status reason;
};

// `peer` sent nothing (no message, no heartbeat) for longer than the transport's
// dead-peer timeout. Its half-received messages were discarded. A peer that later speaks
// again is reported with Received as usual (it re-registers at the application level).
struct PeerDead {
  std::string peer;
  int64_t silent_ms = 0;
};

using ServerEvent = std::variant<Received, RejectedInput, PeerDead>;

class ServerTransport {
 public:
  virtual ~ServerTransport() = default;

  // Starts listening on `endpoint` (e.g. "tcp://0.0.0.0:7000", or "tcp://127.0.0.1:*" for
  // a port the OS picks) and returns the endpoint actually bound, with the real port.
  // InvalidArgument for a malformed endpoint, Unavailable when the address is in use.
  virtual Result<std::string> Bind(const std::string& endpoint) = 0;

  // Sends `message` to `peer` (a name a Received event gave). InvalidArgument when it does
  // not encode within the transport's wire limits; Unavailable when the peer is not
  // connected or its queue stays full past the send timeout.
  virtual Status Send(const std::string& peer, const wire::Message& message) = 0;

  // Waits up to `timeout_ms` (0: do not wait, < 0: wait forever) for the next event.
  // std::nullopt when none arrived in time. Heartbeats are consumed here and never
  // returned. A non-OK Status only for a broken transport (closed, context terminated).
  virtual Result<std::optional<ServerEvent>> Poll(int timeout_ms) = 0;
};

class ClientTransport {
 public:
  virtual ~ClientTransport() = default;

  // Connects to the server at `endpoint`, which must present `server_public_key` (its
  // X25519 key; ignored with authentication off). Returns at once: the connection is made
  // (and remade after a loss) in the background, and messages sent meanwhile are queued.
  // FailedPrecondition when already connected.
  virtual Status Connect(const std::string& endpoint,
                         const std::array<uint8_t, 32>& server_public_key) = 0;

  // Sends `message` to the server. InvalidArgument when it does not encode within the
  // wire limits; FailedPrecondition before Connect; Unavailable when the queue stays full
  // past the send timeout.
  virtual Status Send(const wire::Message& message) = 0;

  // Waits up to `timeout_ms` (0: do not wait, < 0: wait forever) for the next whole
  // message from the server; std::nullopt when none arrived in time. A frame that fails
  // decoding is dropped and returned as its Status (Corruption, OutOfRange, ...); the
  // transport stays usable.
  virtual Result<std::optional<wire::Message>> Poll(int timeout_ms) = 0;
};

}  // namespace fedmesh
