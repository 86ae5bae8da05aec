#include "collective/zmq_ring_transport.h"

#include <sodium.h>

#include <cstdlib>
#include <cstring>

#include "transport/zmq/multipart.h"
#include "transport/zmq/zmq_status.h"

namespace fedmesh::collective {
namespace {

constexpr uint32_t kMagic = 0x4C434D46;  // "FMCL"
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 48;
// CURVE's box adds this to each frame before libzmq's size check.
constexpr int64_t kCurveSlack = 64;

template <typename T>
void Put(std::string& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);  // little-endian hosts only (x86-64, aarch64)
}
template <typename T>
T Get(std::string_view in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

}  // namespace

const char* RingSecurityName(RingSecurity s) {
  switch (s) {
    case RingSecurity::kCurve:
      return "curve";
    case RingSecurity::kAes256Gcm:
      return "aes-256-gcm";
    case RingSecurity::kNone:
      return "none";
  }
  return "?";
}

const char* RingSecurityLabel(RingSecurity s) {
  switch (s) {
    case RingSecurity::kCurve:
      return "CurveZMQ";
    case RingSecurity::kAes256Gcm:
      return "AES-256-GCM sealed links";
    case RingSecurity::kNone:
      return "no encryption";
  }
  return "?";
}

Result<RingSecurity> ParseRingSecurity(std::string_view text) {
  for (RingSecurity s : {RingSecurity::kCurve, RingSecurity::kAes256Gcm, RingSecurity::kNone}) {
    if (text == RingSecurityName(s)) return s;
  }
  return Status::InvalidArgument("unknown ring security '" + std::string(text) + "': curve, aes-256-gcm or none");
}

std::string EncodeChunkHeader(const Chunk& c) {
  std::string h(kHeaderBytes, '\0');
  Put(h, 0, kMagic);
  Put(h, 4, kVersion);
  Put(h, 5, static_cast<uint8_t>(c.kind));
  Put(h, 6, c.phase);
  Put(h, 7, static_cast<uint8_t>(c.wire));
  Put(h, 8, c.generation);
  Put(h, 16, c.op);
  Put(h, 24, c.step);
  Put(h, 28, c.block);
  Put(h, 32, c.index);
  Put(h, 36, static_cast<uint64_t>(c.bytes.size()));
  return h;
}

Status DecodeChunkHeader(std::string_view h, Chunk* c) {
  if (h.size() != kHeaderBytes) return Status::InvalidArgument("chunk header of " + std::to_string(h.size()) + " bytes");
  if (Get<uint32_t>(h, 0) != kMagic || Get<uint8_t>(h, 4) != kVersion) {
    return Status::InvalidArgument("chunk header with a wrong magic or version");
  }
  const uint8_t kind = Get<uint8_t>(h, 5), phase = Get<uint8_t>(h, 6), wire = Get<uint8_t>(h, 7);
  if (kind > static_cast<uint8_t>(OpKind::kMessage) || phase > 1 || wire > static_cast<uint8_t>(WireType::kBFloat16)) {
    return Status::InvalidArgument("chunk header with an unknown kind, phase or wire type");
  }
  c->kind = static_cast<OpKind>(kind);
  c->phase = phase;
  c->wire = static_cast<WireType>(wire);
  c->generation = Get<uint64_t>(h, 8);
  c->op = Get<uint64_t>(h, 16);
  c->step = Get<uint32_t>(h, 24);
  c->block = Get<uint32_t>(h, 28);
  c->index = Get<uint32_t>(h, 32);
  return Status::OK();
}

ZmqRingTransport::~ZmqRingTransport() { DeliverPending(); }

void ZmqRingTransport::SetLinger(int ms) {
  options_.linger_ms = ms;
  for (auto& [rank, d] : dealers_) d.set(zmq::sockopt::linger, ms);
}

Result<std::unique_ptr<ZmqRingTransport>> ZmqRingTransport::Create(const Identity& me,
                                                                   const std::vector<RingMember>& group,
                                                                   const std::string& listen,
                                                                   const ZmqRingTransportOptions& options) {
  std::unique_ptr<ZmqRingTransport> t(new ZmqRingTransport());
  t->me_ = &me;
  t->group_ = group;
  t->options_ = options;
  t->rank_ = -1;
  std::vector<PublicIdentity> keys;
  for (size_t r = 0; r < group.size(); ++r) {
    const std::string z85 = group[r].identity.curve_public_z85();
    if (!t->rank_of_key_.emplace(z85, static_cast<int>(r)).second) {
      return Status::InvalidArgument("collective group: " + group[r].identity.name + "'s key is listed twice");
    }
    if (group[r].identity.curve_public == me.public_identity().curve_public) t->rank_ = static_cast<int>(r);
    keys.push_back(group[r].identity);
    t->member_keys_.push_back(group[r].identity.curve_public);
  }
  randombytes_buf(&t->incarnation_, sizeof t->incarnation_);
  if (t->rank_ < 0) {
    return Status::InvalidArgument("collective group: this site's key (" + me.name() + ") is not a member");
  }
  try {
    zmq::socket_t router(t->context_, zmq::socket_type::router);
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::rcvhwm, 0);
    router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_chunk_bytes) + kCurveSlack);
    if (options.security == RingSecurity::kCurve) {
      FM_ASSIGN_OR_RETURN(t->zap_, ZapHandler::Start(t->context_, keys));
      router.set(zmq::sockopt::curve_server, 1);
      if (zmq_setsockopt(router.handle(), ZMQ_CURVE_SECRETKEY, me.curve_secret().data(), me.curve_secret().size()) !=
          0) {
        return Status::Internal("collective transport: libzmq refused the CURVE secret key");
      }
    }
    t->router_monitor_ = t->Monitor(router);
    router.bind(listen);
    t->endpoint_ = router.get(zmq::sockopt::last_endpoint);
    t->router_ = std::move(router);
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "collective transport: binding " + listen);
  }
  return t;
}

void ZmqRingTransport::SetEndpoints(const std::vector<std::string>& endpoints) {
  for (size_t r = 0; r < endpoints.size() && r < group_.size(); ++r) group_[r].endpoint = endpoints[r];
  out_.clear();
  dealers_.clear();
  dealer_monitors_.clear();
  refused_.clear();
  redial_at_.clear();
}

zmq::socket_t ZmqRingTransport::Monitor(zmq::socket_t& socket) {
  // Names are per context (this transport's) and never reused: a closed socket's monitor
  // may not have released its name yet.
  const std::string ep = "inproc://fedmesh-ring-monitor-" + std::to_string(monitors_made_++);
  if (zmq_socket_monitor(socket.handle(), ep.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0) {
    throw zmq::error_t();
  }
  zmq::socket_t m(context_, zmq::socket_type::pair);
  m.set(zmq::sockopt::linger, 0);
  m.connect(ep);
  return m;
}

zmq::socket_t& ZmqRingTransport::Dealer(int to) {
  auto it = dealers_.find(to);
  auto redial = redial_at_.find(to);
  if (it != dealers_.end() && redial != redial_at_.end() && std::chrono::steady_clock::now() >= redial->second) {
    // `to` refused this key: libzmq never dials that connection again, so a new socket does
    // (what was queued on the old one could never go).
    redial_at_.erase(redial);
    dealer_monitors_.erase(to);
    dealers_.erase(it);
    it = dealers_.end();
  }
  if (it != dealers_.end()) return it->second;
  zmq::socket_t d(context_, zmq::socket_type::dealer);
  d.set(zmq::sockopt::linger, options_.linger_ms);
  d.set(zmq::sockopt::sndhwm, 0);
  d.set(zmq::sockopt::sndtimeo, options_.send_timeout_ms);
  if (options_.security == RingSecurity::kCurve) {
    const CurveKey& pub = me_->public_identity().curve_public;
    const CurveKey& server = group_[to].identity.curve_public;
    zmq_setsockopt(d.handle(), ZMQ_CURVE_PUBLICKEY, pub.data(), pub.size());
    zmq_setsockopt(d.handle(), ZMQ_CURVE_SECRETKEY, me_->curve_secret().data(), me_->curve_secret().size());
    zmq_setsockopt(d.handle(), ZMQ_CURVE_SERVERKEY, server.data(), server.size());
  } else if (options_.security == RingSecurity::kNone) {
    d.set(zmq::sockopt::routing_id, "rank-" + std::to_string(rank_));  // claimed, not proven
  }
  dealer_monitors_[to] = Monitor(d);
  d.connect(group_[to].endpoint);
  return dealers_.emplace(to, std::move(d)).first->second;
}

Status ZmqRingTransport::Send(int to, Chunk chunk) {
  if (to < 0 || to >= static_cast<int>(group_.size())) {
    return Status::InvalidArgument("collective transport: no rank " + std::to_string(to));
  }
  if (chunk.bytes.size() > options_.max_chunk_bytes) {
    return Status::InvalidArgument("collective transport: a chunk of " + std::to_string(chunk.bytes.size()) +
                                   " bytes is over max_chunk_bytes");
  }
  if (refused_.count(to)) return Refused(to);
  try {
    std::string header = EncodeChunkHeader(chunk);
    auto payload = std::make_unique<std::string>(std::move(chunk.bytes).Release());
    if (options_.security == RingSecurity::kAes256Gcm) return SendSealed(to, std::move(header), std::move(payload));
    return SendFrames(to, header, std::move(payload));
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "collective transport: sending to rank " + std::to_string(to));
  }
}

Status ZmqRingTransport::SendFrames(int to, const std::string& header, std::unique_ptr<std::string> payload) {
  zmq::socket_t& d = Dealer(to);
  // The payload frame owns the chunk's bytes: no copy into libzmq.
  std::string* bytes = payload.release();
  zmq::message_t frame(bytes->data(), bytes->size(), [](void*, void* hint) { delete static_cast<std::string*>(hint); },
                       bytes);
  zmq::socket_t* dealer = &d;
  if (!dealer->send(zmq::buffer(header), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
    // No connection to queue on: wait for one, but not for a link refused for its mechanism
    // (libzmq then never dials again), and with a new socket once one refused for its key
    // is due to be dialled again.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.send_timeout_ms);
    for (;;) {
      FM_ASSIGN_OR_RETURN(const bool writable, WaitWritable(to, *dealer, deadline));
      if (writable) break;
      dealer = &Dealer(to);
    }
    if (!dealer->send(zmq::buffer(header), zmq::send_flags::sndmore)) return TookNothing(to);
  }
  if (!dealer->send(frame, zmq::send_flags::none)) return TookNothing(to);  // a message's later parts always go
  return Status::OK();
}

Result<bool> ZmqRingTransport::WaitWritable(int to, zmq::socket_t& dealer,
                                            std::chrono::steady_clock::time_point deadline) {
  zmq::socket_t& monitor = dealer_monitors_.at(to);
  for (;;) {
    ReadMonitor(monitor, to);
    if (refused_.count(to)) return Refused(to);
    const auto now = std::chrono::steady_clock::now();
    auto redial = redial_at_.find(to);
    if (redial != redial_at_.end() && now >= redial->second) return false;
    auto until = deadline;
    if (redial != redial_at_.end()) until = std::min(until, redial->second);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
    if (now >= deadline) return TookNothing(to);
    zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLOUT, 0}, {monitor.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, std::max(left, std::chrono::milliseconds(1)));
    if (items[0].revents & ZMQ_POLLOUT) return true;
  }
}

Status ZmqRingTransport::TookNothing(int to) const {
  return Status::Unavailable("collective transport: rank " + std::to_string(to) + " took nothing for " +
                             std::to_string(options_.send_timeout_ms) + " ms");
}

Status ZmqRingTransport::Refused(int to) const {
  return Status::FailedPrecondition("collective transport: " + group_[to].identity.name + " (rank " +
                                    std::to_string(to) + ", " + group_[to].endpoint +
                                    ") refused this member's connection: it offered another security mechanism "
                                    "than this member's (" + RingSecurityName(options_.security) +
                                    "); every member of the group must set the same security");
}

Result<std::optional<std::pair<int, Chunk>>> ZmqRingTransport::HandleRouterMessage(
    std::vector<zmq::message_t> parts) {
  using Out = std::optional<std::pair<int, Chunk>>;
  if (options_.security == RingSecurity::kAes256Gcm) return HandleSealed(parts);
  Chunk c;
  int sender = -1;
  if (options_.security == RingSecurity::kCurve) {
    const char* user = parts.size() >= 2 ? parts[1].gets("User-Id") : nullptr;
    auto who = user ? rank_of_key_.find(user) : rank_of_key_.end();
    if (who != rank_of_key_.end()) sender = who->second;
  } else if (!parts.empty() && parts[0].to_string_view().starts_with("rank-")) {
    sender = std::atoi(parts[0].to_string().c_str() + 5);
    if (sender >= static_cast<int>(group_.size())) sender = -1;
  }
  if (parts.size() != 3 || sender < 0 || !DecodeChunkHeader(parts[1].to_string_view(), &c).ok() ||
      Get<uint64_t>(parts[1].to_string_view(), 36) != parts[2].size()) {
    ++malformed_;
    return Out();
  }
  // The chunk reads the frame where libzmq received it.
  auto frame = std::make_shared<zmq::message_t>(std::move(parts[2]));
  c.bytes = Payload(static_cast<const char*>(frame->data()), frame->size(), frame);
  return Out(std::make_pair(sender, std::move(c)));
}

bool ZmqRingTransport::ShouldLog(std::chrono::steady_clock::time_point& logged_at, uint64_t count,
                                 std::chrono::steady_clock::time_point now) const {
  if (!options_.log || (count > 1 && now - logged_at < std::chrono::seconds(30))) return false;
  logged_at = now;
  return true;
}

void ZmqRingTransport::ReadMonitor(zmq::socket_t& monitor, int to) {
  for (;;) {
    zmq::message_t event, address;
    if (!monitor.recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more()) (void)monitor.recv(address, zmq::recv_flags::dontwait);
    if (event.size() < 6) continue;
    uint16_t id;
    uint32_t value;
    std::memcpy(&id, event.data(), 2);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
    const auto now = std::chrono::steady_clock::now();
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && to >= 0) {
      ++key_refusals_;
      redial_at_[to] = now + kRedialAfterRefusal;
      if (!ShouldLog(refusal_logged_at_, key_refusals_, now)) continue;
      options_.log(group_[to].identity.name + " (rank " + std::to_string(to) + ", " + group_[to].endpoint +
                   ") refused this member's key (ZAP status " + std::to_string(value) +
                   "): is this member's public key in its allow directory? Dialling again every " +
                   std::to_string(kRedialAfterRefusal.count()) + " ms while sending (" +
                   std::to_string(key_refusals_) + " refusal" + (key_refusals_ == 1 ? "" : "s") + " so far)");
      continue;
    }
    if (id != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || value != ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) continue;
    ++mismatches_;
    if (to >= 0) refused_.insert(to);
    if (!ShouldLog(mismatch_logged_at_, mismatches_, now)) continue;
    const std::string which =
        to < 0 ? "a connection accepted on " + address.to_string()  // libzmq names the listener, not the peer
               : "the connection to " + group_[to].identity.name + " (rank " + std::to_string(to) + ", " +
                     group_[to].endpoint + ")";
    options_.log(which + " was refused: it offered another security mechanism than this member's (" +
                 RingSecurityName(options_.security) + "); every member of the group must set the same security (" +
                 std::to_string(mismatches_) + " such connection" + (mismatches_ == 1 ? "" : "s") + " so far)");
  }
}

Result<std::optional<std::pair<int, Chunk>>> ZmqRingTransport::Receive(int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  try {
    for (;;) {
      std::chrono::milliseconds wait =
          std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                   std::chrono::milliseconds(0));
      if (options_.security == RingSecurity::kAes256Gcm) {
        FM_RETURN_IF_ERROR(PumpAll());
        // A WELCOME may come while this waits: look again soon to send what waits for it.
        if (Handshaking()) wait = std::min(wait, std::chrono::milliseconds(20));
      }
      std::vector<zmq::pollitem_t>& items = poll_items_;  // kept: no allocation per call
      items.assign({{router_.handle(), 0, ZMQ_POLLIN, 0}, {router_monitor_.handle(), 0, ZMQ_POLLIN, 0}});
      for (auto& [to, m] : dealer_monitors_) items.push_back({m.handle(), 0, ZMQ_POLLIN, 0});
      zmq::poll(items, wait);
      if (items[1].revents & ZMQ_POLLIN) ReadMonitor(router_monitor_, -1);
      size_t k = 2;
      for (auto& [to, m] : dealer_monitors_) {
        if (items[k++].revents & ZMQ_POLLIN) ReadMonitor(m, to);
      }
      if (!(items[0].revents & ZMQ_POLLIN)) {
        if (Clock::now() >= deadline) return std::optional<std::pair<int, Chunk>>();
        continue;
      }
      FM_ASSIGN_OR_RETURN(auto chunk, HandleRouterMessage(RecvMultipart(router_)));
      if (chunk.has_value()) return chunk;
    }
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "collective transport: receiving");
  }
}

}  // namespace fedmesh::collective
