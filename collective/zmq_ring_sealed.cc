// ZmqRingTransport's AES-256-GCM security: the handshakes of its sealed links
// (collective/sealed_link.h) over the plain sockets, and the chunks that wait for them.
#include <algorithm>
#include <cstring>

#include "collective/zmq_ring_transport.h"
#include "transport/zmq/zmq_status.h"

namespace fedmesh::collective {
namespace {

using Clock = std::chrono::steady_clock;
// HELLO again after this long without a WELCOME.
constexpr auto kHelloRetry = std::chrono::milliseconds(1000);
// Links kept from other members' connections, per member of the group.
constexpr size_t kLinksPerMember = 4;

}  // namespace

bool ZmqRingTransport::Handshaking() const {
  for (const auto& [to, o] : out_) {
    if (o.link.has_value() && !o.link->ready()) return true;
  }
  return false;
}

Status ZmqRingTransport::StartHandshake(int to) {
  OutLink& o = out_[to];
  FM_ASSIGN_OR_RETURN(SealedSender link,
                      SealedSender::Start(*me_, rank_, incarnation_, group_[to].identity.curve_public));
  o.link = std::move(link);
  o.hello_at = Clock::now();
  // Never waits: a dealer with no connection to queue on (libzmq drops it after a handshake
  // that failed for the protocol, e.g. a member on another security) would hold this for
  // send_timeout_ms. A HELLO not queued is one not answered: said again in kHelloRetry.
  (void)Dealer(to).send(zmq::buffer(o.link->hello()), zmq::send_flags::dontwait);
  return Status::OK();
}

Status ZmqRingTransport::SealAndSend(int to, const std::string& header, std::unique_ptr<std::string> payload) {
  FM_ASSIGN_OR_RETURN(const std::string frame,
                      out_[to].link->Seal(header, std::span<uint8_t>(reinterpret_cast<uint8_t*>(payload->data()),
                                                                     payload->size())));
  return SendFrames(to, frame, std::move(payload));
}

Status ZmqRingTransport::SendSealed(int to, std::string header, std::unique_ptr<std::string> payload) {
  FM_RETURN_IF_ERROR(Pump(to));
  OutLink& o = out_[to];
  if (o.link.has_value() && o.link->ready() && o.pending.empty()) {
    return SealAndSend(to, header, std::move(payload));
  }
  if (!o.link.has_value()) FM_RETURN_IF_ERROR(StartHandshake(to));
  o.pending.emplace_back(std::move(header), std::move(payload));
  return Status::OK();
}

Status ZmqRingTransport::Pump(int to) {
  auto it = out_.find(to);
  auto d = dealers_.find(to);
  if (it == out_.end() || d == dealers_.end()) return Status::OK();
  OutLink& o = it->second;
  for (zmq::message_t m; d->second.recv(m, zmq::recv_flags::dontwait);) {
    const SealedFrameType type = m.more() ? SealedFrameType::kInvalid : SealedFrameTypeOf(m.to_string_view());
    if (type == SealedFrameType::kWelcome && o.link.has_value() && !o.link->ready()) {
      // A WELCOME to an earlier HELLO (said again) does not verify: passed over.
      if (!o.link->Accept(m.to_string_view()).ok()) ++malformed_;
    } else if (type == SealedFrameType::kUnknown) {
      // `to` restarted (or its end of the connection is new) and cannot open what this
      // link seals: agree anew. An UNKNOWN read while a HELLO waits answers data sent
      // before that HELLO, so it is passed over.
      if (o.link.has_value() && o.link->ready()) o.link.reset();
    } else {
      ++malformed_;
      while (m.more() && d->second.recv(m, zmq::recv_flags::dontwait)) {
      }
    }
  }
  if (o.link.has_value() && !o.link->ready() && Clock::now() - o.hello_at >= kHelloRetry) {
    FM_RETURN_IF_ERROR(StartHandshake(to));
  }
  if (!o.link.has_value() && !o.pending.empty()) FM_RETURN_IF_ERROR(StartHandshake(to));
  while (o.link.has_value() && o.link->ready() && !o.pending.empty()) {
    auto [header, payload] = std::move(o.pending.front());
    o.pending.pop_front();
    FM_RETURN_IF_ERROR(SealAndSend(to, header, std::move(payload)));
  }
  return Status::OK();
}

Status ZmqRingTransport::PumpAll() {
  for (auto& [to, o] : out_) {
    if ((o.link.has_value() && !o.link->ready()) || !o.pending.empty()) FM_RETURN_IF_ERROR(Pump(to));
  }
  return Status::OK();
}

Result<std::optional<std::pair<int, Chunk>>> ZmqRingTransport::HandleSealed(std::vector<zmq::message_t>& parts) {
  using Out = std::optional<std::pair<int, Chunk>>;
  if (parts.size() == 2 && SealedFrameTypeOf(parts[1].to_string_view()) == SealedFrameType::kHello) {
    auto link = SealedReceiver::Accept(*me_, member_keys_, parts[1].to_string_view());
    if (!link.ok()) {
      ++malformed_;
      return Out();
    }
    const std::string id = parts[0].to_string();
    router_.send(zmq::buffer(id), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(link->welcome()), zmq::send_flags::none);
    if (links_in_.insert_or_assign(id, std::move(link).value()).second) links_in_order_.push_back(id);
    while (links_in_.size() > kLinksPerMember * group_.size()) {
      // The oldest link no chunk has proven goes first (HELLOs cost a stranger nothing),
      // the oldest of all only when every one is proven.
      auto victim = std::find_if(links_in_order_.begin(), links_in_order_.end(),
                                 [&](const std::string& k) { return !links_in_.at(k).proven(); });
      if (victim == links_in_order_.end()) victim = links_in_order_.begin();
      links_in_.erase(*victim);
      links_in_order_.erase(victim);
    }
    return Out();
  }
  if (parts.size() != 3 || SealedFrameTypeOf(parts[1].to_string_view()) != SealedFrameType::kData) {
    ++malformed_;
    return Out();
  }
  auto link = links_in_.find(parts[0].to_string());
  if (link == links_in_.end()) {
    // A connection with no link: the sender knew this rank's previous process, or never
    // said HELLO. Tell it so; what it sent is lost either way.
    ++malformed_;
    router_.send(parts[0], zmq::send_flags::sndmore);
    router_.send(zmq::buffer(SealedUnknownFrame()), zmq::send_flags::none);
    return Out();
  }
  auto header = link->second.Open(parts[1].to_string_view(),
                                  std::span<uint8_t>(static_cast<uint8_t*>(parts[2].data()), parts[2].size()));
  Chunk c;
  uint64_t declared = 0;
  if (header.ok()) std::memcpy(&declared, header->data() + 36, sizeof declared);
  if (!header.ok() || !DecodeChunkHeader(*header, &c).ok() || declared != parts[2].size()) {
    ++malformed_;
    return Out();
  }
  const int sender = link->second.rank();
  // A chunk that opens proves its sender's incarnation: a new one means that member
  // restarted, and this rank's link to it reaches a process that no longer knows it.
  uint64_t& known = incarnation_of_[sender];
  if (known != 0 && known != link->second.incarnation()) {
    auto o = out_.find(sender);
    if (o != out_.end() && o->second.link.has_value() && o->second.link->ready()) o->second.link.reset();
  }
  known = link->second.incarnation();
  // The chunk reads the frame where libzmq received it (opened in place).
  auto frame = std::make_shared<zmq::message_t>(std::move(parts[2]));
  c.bytes = Payload(static_cast<const char*>(frame->data()), frame->size(), frame);
  return Out(std::make_pair(sender, std::move(c)));
}

void ZmqRingTransport::DeliverPending() {
  if (options_.security != RingSecurity::kAes256Gcm || options_.linger_ms <= 0) return;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.linger_ms);
  try {
    for (;;) {
      bool waiting = false;
      for (const auto& [to, o] : out_) waiting = waiting || !o.pending.empty();
      if (!waiting || Clock::now() >= deadline || !PumpAll().ok()) return;
      std::vector<zmq::pollitem_t> items;
      for (auto& [to, d] : dealers_) items.push_back({d.handle(), 0, ZMQ_POLLIN, 0});
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(20));
    }
  } catch (const zmq::error_t&) {
    // Closing: what could not be sent is lost, as with any close past its linger.
  }
}

}  // namespace fedmesh::collective
