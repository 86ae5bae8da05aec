// ZmqServer: the aggregator's ServerTransport over a ZeroMQ ROUTER socket on TCP. With
// CurveZMQ on (the default) the socket is a CURVE server holding the aggregator's key,
// and a ZapHandler in the same (private) context admits only allowlisted client keys; the
// peer id of every event is the client's authenticated public key in Z85, read from the
// "User-Id" property libzmq attaches to each message. ZMQ_MAXMSGSIZE is set from the wire
// limits, so libzmq drops an oversized frame, and the connection carrying it, before
// allocating it. Each peer has its own wire::Reassembler; a frame it refuses becomes a
// RejectedInput event and is dropped, and the server keeps serving. Every message from a
// peer (heartbeats included) refreshes its last-seen time; a peer silent for more than
// dead_after_intervals heartbeat intervals is reported once as PeerDead and forgotten.
// Heartbeats are consumed and not returned by Poll unless deliver_heartbeats is set.
//
// curve = false gives plain TCP with no authentication and no encryption: for benchmarks
// on a trusted network only. The peer id is then the hex of the connection's routing id.
//
// Thread-safety: as ServerTransport (one driver thread), except Reload, refused_count and
// admitted_count, which may be called from any thread (e.g. a SIGHUP watcher).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "core/status.h"
#include "core/wire/wire_codec.h"
#include "crypto/identity.h"
#include "transport/transport.h"
#include "transport/zmq/zap_handler.h"

namespace fedmesh {

struct ZmqServerOptions {
  // CurveZMQ authentication + encryption. Default: on. Off only for benchmarks.
  bool curve = true;
  // Limits applied to every received frame and every sent message. Default: WireLimits{}.
  wire::WireLimits limits;
  // The interval at which clients send heartbeats. Default: 5,000 ms.
  int heartbeat_interval_ms = 5000;
  // A peer silent for more than this many intervals is reported dead. Default: 3.
  int dead_after_intervals = 3;
  // How long Send waits for room in a peer's queue. Default: 5,000 ms.
  int send_timeout_ms = 5000;
  // Also return heartbeats from Poll. The aggregator sets it: its round engine answers a
  // heartbeat from a node it does not know (e.g. after an aggregator restart) with a
  // Reject, and the node registers again at once instead of after a long silence.
  bool deliver_heartbeats = false;
};

class ZmqServer final : public ServerTransport {
 public:
  // A server that authenticates as `identity` and admits `allowlist` (both ignored when
  // options.curve is false; `identity` may then be null). InvalidArgument for bad options
  // (limits, intervals) or a null identity with curve on; Internal on libzmq failure.
  static Result<std::unique_ptr<ZmqServer>> Create(const ZmqServerOptions& options,
                                                   const Identity* identity,
                                                   const std::vector<PublicIdentity>& allowlist);
  ~ZmqServer() override;

  Result<std::string> Bind(const std::string& endpoint) override;
  Status Send(const std::string& peer, const wire::Message& message) override;
  Result<std::optional<ServerEvent>> Poll(int timeout_ms) override;

  // Replaces the allowlist (curve only; a no-op otherwise). Thread-safe.
  void Reload(const std::vector<PublicIdentity>& allowlist);
  // Handshakes the ZAP handler refused / admitted. 0 with curve off. Thread-safe.
  uint64_t refused_count() const;
  uint64_t admitted_count() const;
  // Peers currently tracked (heard from and not yet reported dead).
  size_t peer_count() const { return peers_.size(); }
  // Frame bytes received from authenticated peers (heartbeats included).
  uint64_t bytes_received() const { return bytes_received_; }

 private:
  struct Peer {
    std::string routing_id;
    wire::Reassembler reassembler;
    std::chrono::steady_clock::time_point last_seen;
  };
  using Clock = std::chrono::steady_clock;

  explicit ZmqServer(const ZmqServerOptions& options);
  // Receives every message waiting on the socket, without blocking, into events_.
  void Drain();
  void HandleMessage(std::vector<zmq::message_t>& parts);
  void ReportDeadPeers();

  ZmqServerOptions options_;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // declared after context_: stopped before it closes
  zmq::socket_t socket_;             // declared last: closed first
  std::map<std::string, Peer> peers_;
  std::deque<ServerEvent> events_;
  uint64_t bytes_received_ = 0;
};

}  // namespace fedmesh
