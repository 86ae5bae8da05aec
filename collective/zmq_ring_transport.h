// ZmqRingTransport: a CollectiveTransport between sites over ZeroMQ. Each rank binds a
// ROUTER socket and dials each rank it sends to with a DEALER. With CurveZMQ (the default)
// the ROUTER is a CURVE server whose ZAP handler admits only the group's member keys and each
// DEALER a CURVE client checking its rank's key; with AES-256-GCM the sockets are plain and
// each direction is a SealedLink (collective/sealed_link.h) agreed between the same keys.
// Either way every chunk is encrypted and its sender authenticated: the sender's rank is the
// rank of the key that proved itself, never a field of the message. A chunk travels as two
// frames: a fixed 48-byte little-endian header (sealed in an 80-byte frame with AES-256-GCM)
// and its bytes, zero-copy (sealed in place).
// A frame that is not a well-formed chunk (wrong size, magic, enum values, a seal that does
// not open, or over max_chunk_bytes, which libzmq drops before allocating) is dropped and
// counted.
// Queues are not capped by count (ZMQ_SNDHWM/RCVHWM 0): what a ring operation queues is
// bounded by the operation (collective/ring_collective.h), and a capped queue could stall
// every rank of the ring at once.
// Thread-safety: one thread drives a transport.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "collective/collective_transport.h"
#include "collective/sealed_link.h"
#include "crypto/identity.h"
#include "transport/zmq/zap_handler.h"

namespace fedmesh::collective {

struct RingMember {
  std::string endpoint;       // what the others dial, e.g. tcp://10.0.0.2:6000
  PublicIdentity identity;    // its key (name, curve and signing keys)
};

// How the links between members are secured.
enum class RingSecurity {
  kCurve,      // CurveZMQ (XSalsa20-Poly1305 in libzmq's I/O thread)
  kAes256Gcm,  // SealedLink: AES-256-GCM on the rank's thread, about 3x CurveZMQ's cipher speed
               // on CPUs with AES instructions (bench/RESULTS.md); same guarantees
  kNone,       // plain TCP, the sender named by the routing id it claims: benchmarks on a
               // trusted network only
};
// "curve", "aes-256-gcm", "none" (config files), and back.
const char* RingSecurityName(RingSecurity s);
Result<RingSecurity> ParseRingSecurity(std::string_view text);
// For log lines: "CurveZMQ", "AES-256-GCM sealed links", "no encryption".
const char* RingSecurityLabel(RingSecurity s);

struct ZmqRingTransportOptions {
  // Default: kCurve.
  RingSecurity security = RingSecurity::kCurve;
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
  // Told (each at most once per 30 s) when a connection offered another security mechanism
  // than this transport's (a member configured with another `security`), and when a member
  // refused this key. Such a member is never heard, so without these lines it looks like a
  // member that is down. Default: none.
  std::function<void(const std::string&)> log;
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
  RingSecurity security() const { return options_.security; }
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

  // Frames dropped: not well-formed, or (AES-256-GCM) a seal that did not open, a HELLO
  // refused, data on a connection without a link.
  uint64_t malformed() const { return malformed_; }
  uint64_t refused_handshakes() const { return zap_ ? zap_->refused_count() : 0; }
  // Connections refused because the two ends offered different security mechanisms (curve
  // against aes-256-gcm or none): a member configured differently, or a stranger. Counted
  // while Receive runs.
  uint64_t mechanism_mismatches() const { return mismatches_; }
  // CurveZMQ: handshakes this member dialled that a member's ZAP refused (this key is not in
  // its allow directory). libzmq never dials such a connection again; this transport does,
  // with a new socket, at the first send kRedialAfterRefusal after the refusal, and logs
  // the first refusal (then at most one line per 30 s). Counted while Receive runs.
  uint64_t key_refusals() const { return key_refusals_; }
  static constexpr std::chrono::milliseconds kRedialAfterRefusal{1000};

 private:
  ZmqRingTransport() = default;
  zmq::socket_t& Dealer(int to);
  // Sends a chunk's two frames, the payload without a copy.
  Status SendFrames(int to, const std::string& header, std::unique_ptr<std::string> payload);
  // One message from the router: a chunk (returned), or a handshake answered, or dropped.
  Result<std::optional<std::pair<int, Chunk>>> HandleRouterMessage(std::vector<zmq::message_t> parts);

  // Until `dealer` can queue a message (true), or a new socket is due because `to` refused
  // this key (false): Unavailable at `deadline`, FailedPrecondition (Refused) once the
  // connection to `to` failed for its mechanism.
  Result<bool> WaitWritable(int to, zmq::socket_t& dealer, std::chrono::steady_clock::time_point deadline);
  Status TookNothing(int to) const;
  Status Refused(int to) const;
  // A PAIR socket told of `socket`'s handshakes that failed for the protocol or the key.
  zmq::socket_t Monitor(zmq::socket_t& socket);
  // Reads a monitor (the router's: to = -1; else the dealer's to `to`): counts, and logs
  // (bounded), mechanism mismatches. libzmq reports a mismatch at whichever end reads the
  // other's greeting first (a dealer redials until its own end does), so each attempt is
  // seen by at least one of the two members, nearly always by both.
  void ReadMonitor(zmq::socket_t& monitor, int to);
  // Whether the `count`th event of a kind is logged (the first, then one per 30 s).
  bool ShouldLog(std::chrono::steady_clock::time_point& logged_at, uint64_t count,
                 std::chrono::steady_clock::time_point now) const;

  // AES-256-GCM (collective/zmq_ring_sealed.cc). A handshake never blocks: a chunk for a rank
  // whose link is not agreed yet waits in its OutLink, and is sealed and sent, in order, once
  // the WELCOME is read (by a later Send or Receive, or the close). HELLO is said again,
  // with a fresh key, every kHelloRetryMs without an answer (the member was down, or died
  // before answering).
  struct OutLink {
    std::optional<SealedSender> link;  // agreed (ready) or waiting for its WELCOME
    std::chrono::steady_clock::time_point hello_at{};
    std::deque<std::pair<std::string, std::unique_ptr<std::string>>> pending;  // header, payload
  };
  Status SendSealed(int to, std::string header, std::unique_ptr<std::string> payload);
  Status SealAndSend(int to, const std::string& header, std::unique_ptr<std::string> payload);
  Status StartHandshake(int to);
  // Reads what the dealer to `to` received (WELCOME; UNKNOWN, which drops an agreed link:
  // `to` restarted), says HELLO again when due, and sends what waited once agreed.
  Status Pump(int to);
  Status PumpAll();
  // Whether some link waits for its WELCOME.
  bool Handshaking() const;
  // The router's side: a HELLO answered, or a DATA frame opened (nullopt when dropped).
  Result<std::optional<std::pair<int, Chunk>>> HandleSealed(std::vector<zmq::message_t>& parts);
  // At the close: up to linger_ms for waiting chunks to be agreed and sent.
  void DeliverPending();

  const Identity* me_ = nullptr;
  std::vector<RingMember> group_;
  ZmqRingTransportOptions options_;
  int rank_ = 0;
  std::map<std::string, int> rank_of_key_;  // Z85 curve key -> rank
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // after context_: stopped before it closes
  zmq::socket_t router_;
  zmq::socket_t router_monitor_;
  std::map<int, zmq::socket_t> dealer_monitors_;
  uint64_t monitors_made_ = 0;
  uint64_t mismatches_ = 0;
  std::set<int> refused_;  // members whose end refused the connection this one dialed (mechanism)
  uint64_t key_refusals_ = 0;
  std::chrono::steady_clock::time_point refusal_logged_at_{};
  std::map<int, std::chrono::steady_clock::time_point> redial_at_;  // members that refused this key
  std::chrono::steady_clock::time_point mismatch_logged_at_{};
  std::vector<zmq::pollitem_t> poll_items_;  // Receive's, reused
  // AES-256-GCM: this transport's random incarnation; links to others; theirs to it by the
  // router's id of their connection (at most 4 per member: HELLOs from strangers cannot grow
  // it, and they evict links no chunk has proven first); the incarnation each rank last
  // proved.
  uint64_t incarnation_ = 0;
  std::vector<CurveKey> member_keys_;
  std::map<int, OutLink> out_;
  std::map<std::string, SealedReceiver> links_in_;
  std::deque<std::string> links_in_order_;
  std::map<int, uint64_t> incarnation_of_;
  std::map<int, zmq::socket_t> dealers_;  // declared last: closed first
  std::string endpoint_;
  uint64_t malformed_ = 0;
};

// The 48-byte chunk header (exposed for tests and fuzzing). Parse: InvalidArgument for a
// wrong size, magic or version, or an enum value out of range.
std::string EncodeChunkHeader(const Chunk& chunk);
Status DecodeChunkHeader(std::string_view header, Chunk* chunk);

}  // namespace fedmesh::collective
