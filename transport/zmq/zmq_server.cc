#include "transport/zmq/zmq_server.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <variant>

#include <spdlog/spdlog.h>

#include "transport/zmq/multipart.h"
#include "transport/zmq/zmq_status.h"

namespace fedmesh {
namespace {

// CURVE wraps each frame in a MESSAGE command (flags, nonce, MAC: about 40 bytes), and
// ZMQ_MAXMSGSIZE applies to the wrapped size; this slack keeps a maximal legal frame in.
constexpr int64_t kCurveFrameOverhead = 256;

// The remote address of socket `fd` as raw bytes ("" when it has none): with the fd it names
// one live connection, so a descriptor number reused by another connection is not taken
// for the one recorded.
std::string RemoteOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return {};
  return std::string(reinterpret_cast<const char*>(&addr), len);
}

// Ends the connection on `fd` if it is still the one to `remote`. shutdown, not close:
// libzmq owns the descriptor; its I/O thread sees the connection end and closes it.
bool ShutdownConnection(int fd, const std::string& remote) {
  if (fd < 0 || remote.empty() || RemoteOf(fd) != remote) return false;
  return ::shutdown(fd, SHUT_RDWR) == 0;
}

std::string Hex(const zmq::message_t& m) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(m.size() * 2);
  for (size_t i = 0; i < m.size(); ++i) {
    uint8_t b = m.data<uint8_t>()[i];
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

}  // namespace

ZmqServer::ZmqServer(const ZmqServerOptions& options)
    : options_(options), upload_budget_(options.max_pending_upload_bytes) {}

ZmqServer::~ZmqServer() = default;

Result<std::unique_ptr<ZmqServer>> ZmqServer::Create(
    const ZmqServerOptions& options, const Identity* identity,
    const std::vector<PublicIdentity>& allowlist) {
  FM_RETURN_IF_ERROR(wire::ValidateLimits(options.limits));
  if (options.heartbeat_interval_ms <= 0 || options.dead_after_intervals <= 0) {
    return Status::InvalidArgument(
        "ZmqServerOptions: heartbeat_interval_ms and dead_after_intervals must be > 0");
  }
  if (options.max_messages_per_poll <= 0 || options.recv_hwm <= 0 || options.send_hwm <= 0 ||
      options.upload_idle_timeout_ms <= 0 || options.max_queued_send_bytes == 0 ||
      options.max_pending_upload_bytes == 0) {
    return Status::InvalidArgument(
        "ZmqServerOptions: max_messages_per_poll, recv_hwm, send_hwm, upload_idle_timeout_ms, "
        "max_queued_send_bytes and max_pending_upload_bytes must be > 0");
  }
  if (options.curve && identity == nullptr) {
    return Status::InvalidArgument(
        "ZmqServer: CurveZMQ is on but no aggregator identity was given; pass the key from "
        "the aggregator's .key file");
  }
  std::unique_ptr<ZmqServer> server(new ZmqServer(options));
  try {
    if (options.curve) {
      FM_ASSIGN_OR_RETURN(server->zap_, ZapHandler::Start(server->context_, allowlist));
    }
    zmq::socket_t socket(server->context_, zmq::socket_type::router);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::router_mandatory, 1);
    socket.set(zmq::sockopt::sndtimeo, 0);  // Send never blocks: see FlushOutboxes
    socket.set(zmq::sockopt::rcvhwm, options.recv_hwm);
    socket.set(zmq::sockopt::handshake_ivl, options.handshake_timeout_ms);
    socket.set(zmq::sockopt::sndhwm, options.send_hwm);
    int64_t max_msg = static_cast<int64_t>(wire::MaxFrameBytes(options.limits)) +
                      (options.curve ? kCurveFrameOverhead : 0);
    socket.set(zmq::sockopt::maxmsgsize, max_msg);
    // ZMTP-level pings tear down half-open TCP connections, freeing their resources.
    socket.set(zmq::sockopt::heartbeat_ivl, options.heartbeat_interval_ms);
    socket.set(zmq::sockopt::heartbeat_timeout,
               options.heartbeat_interval_ms * options.dead_after_intervals);
    if (options.curve) {
      socket.set(zmq::sockopt::curve_server, 1);
      if (zmq_setsockopt(socket.handle(), ZMQ_CURVE_SECRETKEY, identity->curve_secret().data(),
                         identity->curve_secret().size()) != 0) {
        return Status::Internal("ZmqServer: libzmq refused the CURVE secret key (built "
                                "without CURVE support?)");
      }
    }
    server->socket_ = std::move(socket);
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "ZmqServer: creating the ROUTER socket");
  }
  return server;
}

Result<std::string> ZmqServer::Bind(const std::string& endpoint) {
  try {
    socket_.bind(endpoint);
    return socket_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "binding " + endpoint);
  }
}

void ZmqServer::Reload(const std::vector<PublicIdentity>& allowlist) {
  if (zap_) zap_->Reload(allowlist);
}

uint64_t ZmqServer::refused_count() const { return zap_ ? zap_->refused_count() : 0; }
uint64_t ZmqServer::admitted_count() const { return zap_ ? zap_->admitted_count() : 0; }

bool ZmqServer::Disconnect(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return false;
  ShutdownConnection(it->second.fd, it->second.remote);
  peers_.erase(it);
  std::erase_if(events_, [&](const ServerEvent& e) {
    return std::visit([&](const auto& ev) { return ev.peer == peer; }, e);
  });
  return true;
}

Status ZmqServer::Send(const std::string& peer, const wire::Message& message) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return Status::Unavailable("peer " + peer + " is not connected");
  FM_ASSIGN_OR_RETURN(std::vector<wire::Frame> frames, wire::Encode(message, options_.limits));
  // Each frame is its own ZeroMQ message so that other traffic can interleave with the
  // chunks of a large model (docs/wire.md). The frames move into the messages: no copy.
  Peer& p = it->second;
  for (wire::Frame& frame : frames) {
    auto* owned = new wire::Frame(std::move(frame));
    p.outbox_bytes += owned->size();
    p.outbox.emplace_back(
        owned->data(), owned->size(),
        [](void*, void* hint) { delete static_cast<wire::Frame*>(hint); }, owned);
  }
  FlushOutboxes();
  if (peers_.find(peer) == peers_.end()) {
    return Status::Unavailable("peer " + peer + " stopped reading: its send queue passed " +
                               std::to_string(options_.max_queued_send_bytes) +
                               " bytes, so it was disconnected");
  }
  return Status::OK();
}

bool ZmqServer::FlushOutboxes() {
  bool left = false;
  for (auto it = peers_.begin(); it != peers_.end();) {
    Peer& p = it->second;
    try {
      while (!p.outbox.empty()) {
        // ROUTER checks the peer's pipe on the routing frame: EAGAIN there sends nothing.
        if (!socket_.send(zmq::buffer(p.routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          break;
        }
        const size_t n = p.outbox.front().size();
        (void)socket_.send(p.outbox.front(), zmq::send_flags::dontwait);
        p.outbox.pop_front();
        p.outbox_bytes -= n;
      }
    } catch (const zmq::error_t& e) {
      // EHOSTUNREACH: the connection is gone; its frames can never be delivered.
      spdlog::warn("ZmqServer: dropping {} queued bytes for {}: {}", p.outbox_bytes, it->first,
                   e.what());
      p.outbox.clear();
      p.outbox_bytes = 0;
    }
    if (p.outbox_bytes > options_.max_queued_send_bytes) {
      spdlog::warn("ZmqServer: peer {} stopped reading ({} bytes queued, limit {}): its queue "
                   "is dropped and its connection closed",
                   it->first, p.outbox_bytes, options_.max_queued_send_bytes);
      ++slow_peers_dropped_;
      const std::string peer = it->first;
      ++it;
      Disconnect(peer);
      continue;
    }
    left = left || !p.outbox.empty();
    ++it;
  }
  return left;
}

void ZmqServer::DropStalledUploads() {
  const auto now = Clock::now();
  if (now < next_stall_check_) return;
  next_stall_check_ = now + std::chrono::seconds(1);
  const auto cutoff = now - std::chrono::milliseconds(options_.upload_idle_timeout_ms);
  for (auto& [peer, p] : peers_) {
    if (size_t n = p.reassembler.DropStalled(cutoff); n > 0) {
      uploads_dropped_ += n;
      events_.push_back(RejectedInput{
          peer, Status::DeadlineExceeded(std::to_string(n) + " partial upload(s) received no chunk "
                                         "for " + std::to_string(options_.upload_idle_timeout_ms) +
                                         " ms and were dropped")});
    }
  }
}

void ZmqServer::HandleMessage(std::vector<zmq::message_t>& parts) {
  if (parts.size() < 2) return;  // ROUTER always prepends the routing id
  std::string peer;
  if (options_.curve) {
    try {
      const char* user_id = parts[1].gets("User-Id");
      if (user_id != nullptr) peer = user_id;
    } catch (const zmq::error_t&) {
    }
    if (peer.empty()) {  // cannot happen with a ZAP handler bound; refuse rather than guess
      spdlog::error("ZmqServer: a CURVE message without User-Id was dropped");
      return;
    }
  } else {
    peer = Hex(parts[0]);
  }
  std::string rid(parts[0].data<char>(), parts[0].size());
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    it = peers_.emplace(peer, Peer(rid, wire::Reassembler(options_.limits, nullptr, &upload_budget_)))
             .first;
  }
  std::vector<wire::Message> replies;
  if (it->second.routing_id != rid) {
    // A new connection from the same key: answer on it, and close the old one (one
    // connection per key). What the old one had half-sent stays, to be resumed: offer
    // each partial upload's next chunk.
    if (it->second.fd != parts[1].get(ZMQ_SRCFD) &&
        ShutdownConnection(it->second.fd, it->second.remote)) {
      ++duplicates_closed_;
    }
    it->second.routing_id = rid;
    it->second.reassembler.MarkResumable();
    it->second.outbox.clear();
    it->second.outbox_bytes = 0;
    for (const auto& pending : it->second.reassembler.PendingProgress()) {
      replies.push_back(
          ResumeFor(it->second, pending.federation_id, pending.sender_id, pending.message_id));
    }
  }
  Peer& p = it->second;
  p.last_seen = Clock::now();
  if (const int fd = parts[1].get(ZMQ_SRCFD); fd != p.fd) {
    p.fd = fd;
    p.remote = RemoteOf(fd);
  }
  for (size_t i = 1; i < parts.size(); ++i) bytes_received_ += parts[i].size();
  if (parts.size() == 3) ++data_parts_received_;
  auto added = AddParts(p.reassembler, std::span<const zmq::message_t>(parts).subspan(1));
  if (!added.ok()) {
    events_.push_back(RejectedInput{peer, added.status()});
  } else if (added->has_value()) {
    wire::Message& m = **added;
    if (const auto* q = std::get_if<wire::TransferQuery>(&m.body)) {
      replies.push_back(ResumeFor(p, m.header.federation_id, m.header.sender_id, q->message_id));
    } else if (!std::holds_alternative<wire::Heartbeat>(m.body) || options_.deliver_heartbeats) {
      events_.push_back(Received{peer, std::move(m)});
    }
  }
  // After the loop: Send may disconnect peers (a full queue), which would invalidate `p`.
  for (const wire::Message& reply : replies) {
    if (Status s = Send(peer, reply); !s.ok()) {
      spdlog::warn("ZmqServer: could not offer {} a resumed upload: {}", peer, s.message());
      break;
    }
    ++resume_offers_;
  }
}

wire::Message ZmqServer::ResumeFor(const Peer& peer, const std::string& federation_id,
                                   const std::string& sender_id, uint64_t message_id) const {
  wire::TransferResume r{message_id, wire::TransferState::kUnknown, 0};
  if (auto next = peer.reassembler.NextChunk(sender_id, message_id)) {
    r.state = wire::TransferState::kPartial;
    r.next_chunk = *next;
  }
  wire::Header h;
  h.federation_id = federation_id;
  h.sender_id = options_.sender_id;
  return wire::Message{std::move(h), r};
}

void ZmqServer::Drain() {
  for (int n = 0; n < options_.max_messages_per_poll; ++n) {
    std::vector<zmq::message_t> parts;
    zmq::message_t part;
    if (!socket_.recv(part, zmq::recv_flags::dontwait)) return;
    parts.push_back(std::move(part));
    while (parts.back().more()) {
      zmq::message_t next;
      if (!socket_.recv(next, zmq::recv_flags::none)) break;  // the rest is already here
      parts.push_back(std::move(next));
    }
    HandleMessage(parts);
  }
}


void ZmqServer::ReportDeadPeers() {
  const auto now = Clock::now();
  const auto limit = std::chrono::milliseconds(int64_t{options_.heartbeat_interval_ms} *
                                               options_.dead_after_intervals);
  for (auto it = peers_.begin(); it != peers_.end();) {
    auto silent = now - it->second.last_seen;
    // A peer cut off mid-upload may come back and resume it: it is dead only once its
    // partial uploads are dropped as stalled (DropStalledUploads).
    if (silent > limit && it->second.reassembler.pending_messages() == 0) {
      events_.push_back(PeerDead{
          it->first, std::chrono::duration_cast<std::chrono::milliseconds>(silent).count()});
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<std::optional<ServerEvent>> ZmqServer::Poll(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  try {
    for (;;) {
      const bool queued = FlushOutboxes();
      DropStalledUploads();
      if (events_.empty()) ReportDeadPeers();
      if (!events_.empty()) {
        ServerEvent e = std::move(events_.front());
        events_.pop_front();
        return std::optional<ServerEvent>(std::move(e));
      }
      // Wake at least once per heartbeat interval to look for dead peers.
      auto wait = std::chrono::milliseconds(options_.heartbeat_interval_ms);
      if (timeout_ms >= 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() < 0) left = std::chrono::milliseconds(0);
        wait = std::min(wait, left);
      }
      // Frames waiting for room: look again soon rather than after a whole timeout.
      if (queued) wait = std::min(wait, std::chrono::milliseconds(5));
      // Partial uploads pending: wake for the next stall check.
      if (upload_budget_.used() > 0) wait = std::min(wait, std::chrono::milliseconds(1000));
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, wait) > 0) Drain();
      if (events_.empty() && timeout_ms >= 0 && Clock::now() >= deadline) {
        ReportDeadPeers();
        if (events_.empty()) return std::optional<ServerEvent>();
      }
    }
  } catch (const zmq::error_t& e) {
    // A signal (SIGHUP, SIGTERM) interrupted the wait: no event; the caller looks at its
    // flags and polls again.
    if (e.num() == EINTR) return std::optional<ServerEvent>();
    return StatusFromZmq(e, "ZmqServer::Poll");
  }
}

}  // namespace fedmesh
