// ZmqClient: a node's ClientTransport over a ZeroMQ DEALER socket on TCP. With CurveZMQ
// on (the default) it is a CURVE client holding the node's key and checking that the
// server holds `server_public_key`. libzmq connects in the background and, after a lost
// connection, reconnects with exponential backoff: the first retry after
// reconnect_ivl_ms, doubling up to reconnect_ivl_max_ms (ZMQ_RECONNECT_IVL / _MAX).
// libzmq adds no jitter; the jitter that spreads a fleet of nodes reconnecting after an
// aggregator restart is applied where it matters, at the application-level
// re-registration: the node driver waits RegisterRetryDelay(attempt, ...) before each
// Register it re-sends without an answer (see below).
//
// An authentication refusal is final in libzmq 4.3: after the server's ZAP handler says
// 400 (key not enrolled, yet), libzmq closes that connection and does not retry, and Send
// then blocks until send_timeout_ms and fails with Unavailable. The driver's
// re-registration loop therefore calls Reconnect() before each re-sent Register, after
// RegisterRetryDelay; that is how a node enrolled later (aggregator reloads its allowlist
// on SIGHUP) gets in without a restart.
//
// A heartbeat thread sends a wire::Heartbeat every heartbeat_interval_ms from Connect
// until destruction, even while the driver is busy training, so that the server can tell
// a slow node from a dead one. Heartbeats are queued like any message while disconnected.
//
// Resumed uploads (docs/wire.md): SendResumable keeps the frames of the message it sends
// (shared with ZeroMQ, no copy; each chunk's data as its own part when the server accepts
// that). When the server answers a lost connection with a TransferResume for it - offered
// on the new connection, or asked for with QueryRetained - Poll sends the chunks the
// server lacks (or the whole message when it has none of it) and does not return the
// TransferResume.
//
// curve = false gives plain TCP (benchmarks on a trusted network only).
// Thread-safety: as ClientTransport (one driver thread for Connect, Send and Poll). The
// heartbeat thread shares the socket under an internal mutex.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "core/status.h"
#include "core/wire/wire_codec.h"
#include "crypto/identity.h"
#include "transport/transport.h"

namespace fedmesh {

struct ZmqClientOptions {
  // CurveZMQ authentication + encryption. Default: on. Off only for benchmarks.
  bool curve = true;
  // Limits applied to every received frame and every sent message. Default: WireLimits{}.
  wire::WireLimits limits;
  // Heartbeat header fields: federation_id and sender_id (this node's id). Required
  // (printable ASCII ids, as wire::Header requires).
  std::string federation_id;
  std::string node_id;
  // Interval between heartbeats; must match the server's expectation. Default: 5,000 ms.
  // 0 disables heartbeats (tests of dead-peer detection).
  int heartbeat_interval_ms = 5000;
  // First reconnect delay and its cap (libzmq doubles it per failed attempt).
  // Defaults: 100 ms and 30,000 ms.
  int reconnect_ivl_ms = 100;
  int reconnect_ivl_max_ms = 30000;
  // How long Send waits for room in the queue. Default: 5,000 ms.
  int send_timeout_ms = 5000;
  // Payload bytes per chunk of the messages this client sends (what a resumed upload
  // counts in); received messages are held to `limits`. 0 = limits.max_chunk_bytes.
  // Default: 0.
  uint64_t send_chunk_bytes = 0;
  // libzmq's queue towards the server, in frames (ZMQ_SNDHWM), and the kernel's socket
  // send buffer in bytes (ZMQ_SNDBUF); 0 = libzmq's and the OS's defaults. A driver that
  // keeps its own priority queue (node/gossip_outbox.h) sets both small, so that
  // little waits where it cannot reorder. Defaults: 0, 0.
  int send_hwm = 0;
  int send_buffer_bytes = 0;
};

// The delay before re-sending Register for the `attempt`-th time (0-based) without an
// answer: exponential backoff from reconnect_ivl_ms, capped at reconnect_ivl_max_ms, with
// "equal jitter": a uniformly random point in [cap/2, cap], so nodes that lost the
// aggregator at the same moment do not come back in lockstep, yet none retries sooner
// than half the backoff. `unit_random` is a sample of U[0, 1) from the caller's Env (the
// function itself is deterministic, for the simulator and tests).
std::chrono::milliseconds RegisterRetryDelay(int attempt, const ZmqClientOptions& options,
                                             double unit_random);

class ZmqClient final : public ClientTransport {
 public:
  // A client that authenticates as `identity` (ignored, may be null, with curve off).
  // InvalidArgument for bad options or a null identity with curve on.
  static Result<std::unique_ptr<ZmqClient>> Create(const ZmqClientOptions& options,
                                                   const Identity* identity);
  ~ZmqClient() override;

  Status Connect(const std::string& endpoint,
                 const std::array<uint8_t, 32>& server_public_key) override;
  Status Send(const wire::Message& message) override;
  // Drops the current connection attempt, and whatever is queued or half-received on it,
  // and connects to the same endpoint again. FailedPrecondition before Connect.
  Status Reconnect();
  Result<std::optional<wire::Message>> Poll(int timeout_ms) override;

  // Frame bytes handed to the socket (queued or sent), heartbeats included.
  uint64_t bytes_sent() const { return bytes_sent_.load(); }

  // Sends frames already made by wire::Encode (e.g. one encoding sent again), moving them
  // into ZeroMQ without a copy.
  Status SendEncoded(std::vector<wire::Frame> frames);

  // Sends `message` and keeps its frames, replacing the one kept before, so that a
  // transfer cut by a lost connection resumes where the server's copy stops. With
  // `data_parts` (only to a server that accepts them: FitTask::chunk_data_parts) each
  // chunk's data leaves as its own part, straight from the payload moved in here, not
  // copied into chunk frames (wire::EncodeParted).
  Status SendResumable(wire::Message message, bool data_parts = false);
  // Asks the server what it holds of the kept message (a TransferQuery); its answer, read
  // by Poll, sends the rest. FailedPrecondition when no message is kept.
  Status QueryRetained();
  // The header message_id of the kept message, if any.
  std::optional<uint64_t> retained_message_id() const;
  // Resumptions served (TransferResume answers acted on) and the frame bytes they sent;
  // offers ignored because they name a message this client does not keep (it restarted,
  // or has sent a newer one).
  uint64_t resumes() const { return resumes_.load(); }
  uint64_t resume_offers_ignored() const { return resume_offers_ignored_.load(); }
  uint64_t bytes_resent() const { return bytes_resent_.load(); }
  // As SendResumable, but hands only the first `frames_to_send` frames to the socket (a
  // connection cut mid-upload): for tests only.
  Status SendResumableForTesting(wire::Message message, size_t frames_to_send,
                                 bool data_parts = false);

  // Hands one frame (as Encode made it) to the socket if its queue has room now: true when
  // it did, false when the queue is full (nothing sent; try again later). Never blocks.
  Result<bool> TrySendFrame(const wire::Frame& frame);

  // Sends raw frames, bypassing the codec: for fault-injection tests only.
  Status SendRawFrameForTesting(const std::vector<uint8_t>& frame);
  // Sends `parts` as one multipart ZeroMQ message, bypassing the codec: tests only.
  Status SendRawPartsForTesting(const std::vector<std::vector<uint8_t>>& parts);
  // Beats every `interval_ms` from now on: the interval the server asks for in its
  // RegisterAck (a server that expects beats more often than this client was configured
  // for would otherwise take an idle client for dead). No-op for interval_ms <= 0 or when
  // heartbeats are off (heartbeat_interval_ms = 0). Thread-safe.
  void SetHeartbeatInterval(int interval_ms);

  // Stops the heartbeat thread: for dead-peer tests only.
  void StopHeartbeatsForTesting();

 private:
  explicit ZmqClient(const ZmqClientOptions& options);
  void HeartbeatLoop();
  // Moves each frame into its ZeroMQ message (no copy); `frames` is left empty.
  Status SendFramesLocked(std::vector<wire::Frame>& frames);
  // Hands frames [begin, end) of the kept message to ZeroMQ, sharing their bytes.
  Status SendRetainedLocked(size_t begin, size_t end, uint64_t* bytes);
  // Acts on a TransferResume: sends what the server lacks of the kept message; ignores
  // one that names another message. InvalidArgument for a chunk past its end.
  Status ResumeLocked(const wire::TransferResume& r);
  Status KeepAndSend(wire::Message message, bool data_parts,
                     std::optional<size_t> frames_to_send);

  ZmqClientOptions options_;
  wire::WireLimits send_limits_;  // options_.limits, chunks cut at send_chunk_bytes
  zmq::context_t context_;
  mutable std::mutex mu_;
  zmq::socket_t socket_;  // GUARDED_BY(mu_)
  bool connected_ = false;
  std::string endpoint_;  // GUARDED_BY(mu_)
  wire::Reassembler reassembler_;  // GUARDED_BY(mu_)
  // The message SendResumable sent last (header frame, then its chunks, with or without
  // data parts).
  struct Retained {
    uint64_t message_id = 0;
    std::shared_ptr<const wire::PartedMessage> parted;
  };
  std::optional<Retained> retained_;  // GUARDED_BY(mu_)
  std::atomic<uint64_t> resumes_{0};
  std::atomic<uint64_t> bytes_resent_{0};
  std::atomic<uint64_t> resume_offers_ignored_{0};
  std::atomic<bool> stop_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  int heartbeat_ms_ = 0;           // GUARDED_BY(stop_mu_)
  bool interval_changed_ = false;  // GUARDED_BY(stop_mu_)
  std::thread heartbeat_thread_;
  std::atomic<uint64_t> bytes_sent_{0};
};

}  // namespace fedmesh
