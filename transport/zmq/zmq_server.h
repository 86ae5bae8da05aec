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
// Bounded by configuration, not by peers: each Poll reads at most max_messages_per_poll
// ZeroMQ messages; libzmq queues at most recv_hwm / send_hwm frames per connection; all
// peers' partial uploads share one byte budget (max_pending_upload_bytes) and one that
// received nothing for upload_idle_timeout_ms is dropped; Send never blocks: frames wait
// in the peer's own queue (zero-copy over the encoded frames) and a peer whose queue
// passes max_queued_send_bytes, because it stopped reading, is disconnected.
// Disconnect closes a peer's connection (a revoked key): libzmq tears it down and the
// peer's next handshake meets the ZAP allowlist again.
//
// Resumed uploads (docs/wire.md): a peer's partial uploads outlive its connection. When
// the same key comes back on a new connection, they are kept (Reassembler::MarkResumable)
// and the server offers each one's next chunk in a TransferResume; a TransferQuery from the
// peer is answered the same way (UNKNOWN when nothing of that message is pending). Both
// are handled here and never returned by Poll. A peer with a partial upload is not
// reported dead until the upload is dropped as stalled (upload_idle_timeout_ms).
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
  // ZeroMQ messages read per Poll before the loop yields (events beyond it wait in
  // libzmq, bounded by recv_hwm). Default: 256.
  int max_messages_per_poll = 256;
  // libzmq's per-connection queues, in frames (ZMQ_RCVHWM / ZMQ_SNDHWM); a frame is at
  // most max_chunk_bytes plus a header. Default: 16 each (128 MiB at 8 MiB chunks).
  int recv_hwm = 16;
  int send_hwm = 16;
  // Bytes a peer's own send queue may hold beyond libzmq's; past it the queue is dropped
  // and the peer disconnected (it stopped reading). Default: 1 GiB.
  uint64_t max_queued_send_bytes = uint64_t{1} << 30;
  // Declared payload bytes all peers' partial uploads may hold together; a header frame
  // that does not fit is refused. Default: 2 GiB.
  uint64_t max_pending_upload_bytes = uint64_t{2} << 30;
  // A partial upload that received no chunk for this long is dropped. Until then its
  // peer is not reported dead (a site cut off mid-upload resumes it when it comes back,
  // see "Resumed uploads" below). Default: 60,000 ms.
  int upload_idle_timeout_ms = 60000;
  // sender_id in the headers of the messages the transport sends itself (TransferResume).
  // Default: "aggregator".
  std::string sender_id = "aggregator";
  // A TCP connection that has not completed its ZMTP/CURVE handshake within this is closed
  // (ZMQ_HANDSHAKE_IVL), so idle half-open connections cannot pile up. Default: 10,000 ms.
  int handshake_timeout_ms = 10000;
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

  // Replaces the allowlist (curve only; a no-op otherwise). Thread-safe. Connections
  // already admitted stay up: the driver calls Disconnect for the keys it removed.
  void Reload(const std::vector<PublicIdentity>& allowlist);
  // Closes `peer`'s connection, forgets it (its queued frames, partial uploads and events
  // not yet returned) and returns whether it was connected. Driver thread only.
  bool Disconnect(const std::string& peer);
  // Peers disconnected because their send queue overflowed, and partial uploads dropped
  // as stalled or over the budget, since Create.
  uint64_t slow_peers_dropped() const { return slow_peers_dropped_; }
  uint64_t uploads_dropped() const { return uploads_dropped_; }
  // Older connections closed because the same key connected again: each key keeps one
  // connection, so an enrolled peer cannot open many.
  uint64_t duplicate_connections_closed() const { return duplicates_closed_; }
  const wire::PendingBudget& upload_budget() const { return upload_budget_; }
  // Handshakes the ZAP handler refused / admitted. 0 with curve off. Thread-safe.
  uint64_t refused_count() const;
  uint64_t admitted_count() const;
  // Peers currently tracked (heard from and not yet reported dead).
  size_t peer_count() const { return peers_.size(); }
  // Events read from the socket and not yet returned by Poll (at most
  // max_messages_per_poll frames' worth).
  size_t queued_events() const { return events_.size(); }
  // Frame bytes received from authenticated peers (heartbeats included).
  uint64_t bytes_received() const { return bytes_received_; }
  // TransferResume messages sent (offers on a new connection and answers to queries).
  uint64_t resume_offers() const { return resume_offers_; }
  // ZeroMQ messages that came as a chunk frame and its data part (docs/wire.md, "Chunk data
  // parts"), accepted or not.
  uint64_t data_parts_received() const { return data_parts_received_; }

 private:
  struct Peer {
    Peer(std::string rid, wire::Reassembler r)
        : routing_id(std::move(rid)), reassembler(std::move(r)) {}
    std::string routing_id;
    wire::Reassembler reassembler;
    std::chrono::steady_clock::time_point last_seen{};
    int fd = -1;         // the connection's socket (ZMQ_SRCFD of its latest message)
    std::string remote;  // its remote address when fd was recorded (getpeername bytes)
    std::deque<zmq::message_t> outbox;  // frames waiting for room in libzmq's queue
    uint64_t outbox_bytes = 0;
  };
  using Clock = std::chrono::steady_clock;

  explicit ZmqServer(const ZmqServerOptions& options);
  // Receives every message waiting on the socket, without blocking, into events_.
  void Drain();
  void HandleMessage(std::vector<zmq::message_t>& parts);
  void ReportDeadPeers();
  // The TransferResume for (sender_id, message_id) of `peer`'s partial uploads.
  wire::Message ResumeFor(const Peer& peer, const std::string& federation_id,
                          const std::string& sender_id, uint64_t message_id) const;
  // Moves queued frames into libzmq without blocking; disconnects peers whose queue
  // overflowed. Returns whether any frames are still queued.
  bool FlushOutboxes();
  // Drops partial uploads idle past upload_idle_timeout_ms (checked about once a second).
  void DropStalledUploads();

  ZmqServerOptions options_;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // declared after context_: stopped before it closes
  zmq::socket_t socket_;             // declared last: closed first
  wire::PendingBudget upload_budget_;  // declared before peers_: their Reassemblers use it
  std::map<std::string, Peer> peers_;
  std::deque<ServerEvent> events_;
  uint64_t bytes_received_ = 0;
  uint64_t slow_peers_dropped_ = 0;
  uint64_t uploads_dropped_ = 0;
  uint64_t duplicates_closed_ = 0;
  uint64_t resume_offers_ = 0;
  uint64_t data_parts_received_ = 0;
  std::chrono::steady_clock::time_point next_stall_check_{};
};

}  // namespace fedmesh
