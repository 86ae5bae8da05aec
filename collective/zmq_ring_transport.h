// ZmqRingTransport: a CollectiveTransport between sites over CurveZMQ. Each rank binds a
// ROUTER socket (CURVE server with its own key) whose ZAP handler admits only the group's
// member keys, and dials each rank it sends to with a DEALER (CURVE client checking that
// rank's key), so every chunk is encrypted and its sender authenticated: the sender's rank
// is the rank of the key CurveZMQ authenticated, never a field of the message. A chunk
// travels as two frames: a fixed 48-byte little-endian header and its bytes, zero-copy.
// A frame that is not a well-formed chunk (wrong size, magic, enum values, or over
// max_chunk_bytes, which libzmq drops before allocating) is dropped and counted.
// Queues are not capped by count (ZMQ_SNDHWM/RCVHWM 0): what a ring operation queues is
// bounded by the operation (collective/ring_collective.h), and a capped queue could stall
// every rank of the ring at once.
// Thread-safety: one thread drives a transport.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "collective/collective_transport.h"
#include "crypto/identity.h"
#include "transport/zmq/zap_handler.h"

namespace fedmesh::collective {

struct RingMember {
  std::string endpoint;       // what the others dial, e.g. tcp://10.0.0.2:6000
  PublicIdentity identity;    // its key (name, curve and signing keys)
};

struct ZmqRingTransportOptions {
  // CurveZMQ authentication and encryption. Default: on. Off (plain TCP, the sender named by
  // the routing id it claims) only for benchmarks on a trusted network.
  bool curve = true;
  // Largest chunk payload accepted, in bytes. Default: 64 MiB.
  uint64_t max_chunk_bytes = uint64_t{64} << 20;
  // A send that cannot be queued within this fails (the peer's connection is gone).
  // Default: 30,000 ms.
  int send_timeout_ms = 30000;
  // How long closing the transport waits to deliver what is still queued. A rank's
  // operation completes when it has what it needs, not when its successor has: its last
  // chunks may still be queued when it closes (on a link with delay, or a successor slow to
  // read), and a close that dropped them would leave the successor waiting for ever. Set
  // it low (SetLinger) when a run failed and nobody waits for the rest. Default: 10,000 ms.
  int linger_ms = 10000;
};

class ZmqRingTransport final : public CollectiveTransport {
 public:
  // Binds `listen` as `me`, admitting `group`'s keys (every member, itself included, in
  // rank order); this rank is the member whose curve key is me's. InvalidArgument when `me`
  // is not in the group or a key appears twice; Unavailable when `listen` is in use.
  static Result<std::unique_ptr<ZmqRingTransport>> Create(const Identity& me, const std::vector<RingMember>& group,
                                                          const std::string& listen,
                                                          const ZmqRingTransportOptions& options = {});
  ~ZmqRingTransport() override;

  // The endpoint bound, with the real port.
  const std::string& endpoint() const { return endpoint_; }
  int rank() const { return rank_; }
  // Members' endpoints, once known (a test binds every rank first, then tells each the
  // real ports). Replaces the endpoints given to Create.
  void SetEndpoints(const std::vector<std::string>& endpoints);

  // How long closing waits for what is still queued, from now on (options.linger_ms at
  // first): 0 when a run failed and nobody waits for the rest, a short time when only an
  // error message should still reach live peers.
  void SetLinger(int ms);

  Status Send(int to, Chunk chunk) override;
  Result<std::optional<std::pair<int, Chunk>>> Receive(int timeout_ms) override;

  uint64_t malformed() const { return malformed_; }
  uint64_t refused_handshakes() const { return zap_ ? zap_->refused_count() : 0; }

 private:
  ZmqRingTransport() = default;
  zmq::socket_t& Dealer(int to);

  const Identity* me_ = nullptr;
  std::vector<RingMember> group_;
  ZmqRingTransportOptions options_;
  int rank_ = 0;
  std::map<std::string, int> rank_of_key_;  // Z85 curve key -> rank
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // after context_: stopped before it closes
  zmq::socket_t router_;
  std::map<int, zmq::socket_t> dealers_;  // declared last: closed first
  std::string endpoint_;
  uint64_t malformed_ = 0;
};

// The 48-byte chunk header (exposed for tests and fuzzing). Parse: InvalidArgument for a
// wrong size, magic or version, or an enum value out of range.
std::string EncodeChunkHeader(const Chunk& chunk);
Status DecodeChunkHeader(std::string_view header, Chunk* chunk);

}  // namespace fedmesh::collective
