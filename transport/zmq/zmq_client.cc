#include "transport/zmq/zmq_client.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "transport/zmq/multipart.h"
#include "transport/zmq/zmq_status.h"

namespace fedmesh {
namespace {

constexpr int64_t kCurveFrameOverhead = 256;  // as in zmq_server.cc
constexpr int kPollSliceMs = 10;  // longest the driver holds the socket from heartbeats

// Heartbeat message ids live in the top half of the id space, away from the driver's.
constexpr uint64_t kHeartbeatIdBase = uint64_t{1} << 63;
// TransferQuery ids: below the heartbeats', above any driver's.
constexpr uint64_t kQueryIdBase = uint64_t{3} << 61;

}  // namespace

std::chrono::milliseconds RegisterRetryDelay(int attempt, const ZmqClientOptions& options,
                                             double unit_random) {
  const double base = std::max(options.reconnect_ivl_ms, 1);
  const double cap = std::max<double>(options.reconnect_ivl_max_ms, base);
  const double backoff = std::min(cap, base * std::pow(2.0, std::clamp(attempt, 0, 62)));
  const double u = std::clamp(unit_random, 0.0, 1.0);
  return std::chrono::milliseconds(static_cast<int64_t>(backoff / 2 + u * backoff / 2));
}

ZmqClient::ZmqClient(const ZmqClientOptions& options)
    : options_(options), send_limits_(options.limits), reassembler_(options.limits),
      heartbeat_ms_(options.heartbeat_interval_ms) {
  if (options.send_chunk_bytes != 0) {
    send_limits_.max_chunk_bytes = std::min(options.send_chunk_bytes, options.limits.max_chunk_bytes);
  }
}

ZmqClient::~ZmqClient() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_.store(true);
  }
  stop_cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

Result<std::unique_ptr<ZmqClient>> ZmqClient::Create(const ZmqClientOptions& options,
                                                     const Identity* identity) {
  FM_RETURN_IF_ERROR(wire::ValidateLimits(options.limits));
  if (options.heartbeat_interval_ms < 0 || options.reconnect_ivl_ms <= 0 ||
      options.reconnect_ivl_max_ms < 0 || options.send_timeout_ms < 0) {
    return Status::InvalidArgument(
        "ZmqClientOptions: intervals must be >= 0 (reconnect_ivl_ms > 0)");
  }
  if (options.curve && identity == nullptr) {
    return Status::InvalidArgument(
        "ZmqClient: CurveZMQ is on but no node identity was given; pass the key from the "
        "node's .key file");
  }
  std::unique_ptr<ZmqClient> client(new ZmqClient(options));
  try {
    zmq::socket_t socket(client->context_, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, options.send_timeout_ms);
    socket.set(zmq::sockopt::reconnect_ivl, options.reconnect_ivl_ms);
    socket.set(zmq::sockopt::reconnect_ivl_max, options.reconnect_ivl_max_ms);
    socket.set(zmq::sockopt::maxmsgsize,
               static_cast<int64_t>(wire::MaxFrameBytes(options.limits)) +
                   (options.curve ? kCurveFrameOverhead : 0));
    if (options.send_hwm > 0) socket.set(zmq::sockopt::sndhwm, options.send_hwm);
    if (options.send_buffer_bytes > 0) socket.set(zmq::sockopt::sndbuf, options.send_buffer_bytes);
    if (options.heartbeat_interval_ms > 0) {
      // ZMTP pings find a half-open connection so that libzmq reconnects.
      socket.set(zmq::sockopt::heartbeat_ivl, options.heartbeat_interval_ms);
      socket.set(zmq::sockopt::heartbeat_timeout, options.heartbeat_interval_ms * 3);
    }
    if (options.curve) {
      const CurveKey& pub = identity->public_identity().curve_public;
      if (zmq_setsockopt(socket.handle(), ZMQ_CURVE_PUBLICKEY, pub.data(), pub.size()) != 0 ||
          zmq_setsockopt(socket.handle(), ZMQ_CURVE_SECRETKEY, identity->curve_secret().data(),
                         identity->curve_secret().size()) != 0) {
        return Status::Internal("ZmqClient: libzmq refused the CURVE keys (built without "
                                "CURVE support?)");
      }
    }
    client->socket_ = std::move(socket);
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "ZmqClient: creating the DEALER socket");
  }
  return client;
}

Status ZmqClient::Connect(const std::string& endpoint,
                          const std::array<uint8_t, 32>& server_public_key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (connected_) return Status::FailedPrecondition("ZmqClient: already connected");
    try {
      if (options_.curve &&
          zmq_setsockopt(socket_.handle(), ZMQ_CURVE_SERVERKEY, server_public_key.data(),
                         server_public_key.size()) != 0) {
        return Status::Internal("ZmqClient: libzmq refused the server's CURVE key");
      }
      socket_.connect(endpoint);
    } catch (const zmq::error_t& e) {
      return StatusFromZmq(e, "connecting to " + endpoint);
    }
    connected_ = true;
    endpoint_ = endpoint;
  }
  if (options_.heartbeat_interval_ms > 0) {
    // Fail here, not in every heartbeat, when the ids cannot make a valid header.
    wire::Message probe{{options_.federation_id, options_.node_id, 0, 0, kHeartbeatIdBase},
                        wire::Heartbeat{}};
    auto encoded = wire::Encode(probe, options_.limits);
    if (!encoded.ok()) return encoded.status().WithContext("ZmqClient heartbeat header");
    try {
      heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
    } catch (const std::system_error& e) {
      return Status::Internal(std::string("ZmqClient: starting the heartbeat thread: ") +
                              e.what());
    }
  }
  return Status::OK();
}

void ZmqClient::SetHeartbeatInterval(int interval_ms) {
  if (interval_ms <= 0 || !heartbeat_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (heartbeat_ms_ == interval_ms) return;
    heartbeat_ms_ = interval_ms;
    interval_changed_ = true;
  }
  stop_cv_.notify_all();
}

void ZmqClient::HeartbeatLoop() {
  uint64_t sequence = 0;
  std::unique_lock<std::mutex> stop_lock(stop_mu_);
  while (true) {
    interval_changed_ = false;
    const auto interval = std::chrono::milliseconds(heartbeat_ms_);
    if (stop_cv_.wait_for(stop_lock, interval, [this] { return stop_.load() || interval_changed_; })) {
      if (stop_.load()) return;
      continue;  // a new interval: the next beat is one new interval from now
    }
    ++sequence;
    wire::Message hb{
        {options_.federation_id, options_.node_id, 0, 0, kHeartbeatIdBase + sequence},
        wire::Heartbeat{sequence}};
    auto frames = wire::Encode(hb, options_.limits);
    if (!frames.ok()) return;  // checked in Connect; unreachable
    std::lock_guard<std::mutex> lock(mu_);
    // A failure (queue full) just skips this beat; the next one tries again.
    (void)SendFramesLocked(*frames);
  }
}

Status ZmqClient::SendFramesLocked(std::vector<wire::Frame>& frames) {
  if (!connected_) return Status::FailedPrecondition("ZmqClient: Send before Connect");
  try {
    for (wire::Frame& frame : frames) {
      const size_t size = frame.size();
      auto* owned = new wire::Frame(std::move(frame));
      zmq::message_t msg(
          owned->data(), size, [](void*, void* hint) { delete static_cast<wire::Frame*>(hint); },
          owned);
      if (!socket_.send(std::move(msg), zmq::send_flags::none)) {
        return Status::Unavailable("ZmqClient: send queue full past the send timeout");
      }
      bytes_sent_ += size;
    }
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "ZmqClient::Send");
  }
  return Status::OK();
}

Status ZmqClient::SendRetainedLocked(size_t begin, size_t end, uint64_t* bytes) {
  if (!connected_) return Status::FailedPrecondition("ZmqClient: Send before Connect");
  using Shared = std::shared_ptr<const wire::PartedMessage>;
  const Shared& kept = retained_->parted;
  // Each ZeroMQ part holds a reference to the kept message until libzmq is done with it.
  auto shared_part = [&kept](std::span<const uint8_t> b) {
    return zmq::message_t(
        const_cast<uint8_t*>(b.data()), b.size(),
        [](void*, void* hint) { delete static_cast<Shared*>(hint); }, new Shared(kept));
  };
  try {
    for (size_t i = begin; i < end; ++i) {
      const wire::Frame& frame = kept->frames[i];
      const std::span<const uint8_t> data = kept->DataPart(i);
      // A chunk and its data part leave as one two-part message: libzmq checks the queue's
      // room at the first part and then takes the second with it.
      if (!socket_.send(shared_part(frame),
                        data.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore)) {
        return Status::Unavailable("ZmqClient: send queue full past the send timeout");
      }
      if (!data.empty() && !socket_.send(shared_part(data), zmq::send_flags::none)) {
        return Status::Unavailable("ZmqClient: send queue full past the send timeout");
      }
      const uint64_t n = frame.size() + data.size();
      bytes_sent_ += n;
      if (bytes != nullptr) *bytes += n;
    }
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "ZmqClient::Send");
  }
  return Status::OK();
}

Status ZmqClient::KeepAndSend(wire::Message message, bool data_parts,
                              std::optional<size_t> frames_to_send) {
  const uint64_t id = message.header.message_id;
  auto parted = std::make_shared<wire::PartedMessage>();
  if (data_parts) {
    FM_ASSIGN_OR_RETURN(*parted, wire::EncodeParted(std::move(message), send_limits_));
  } else {
    FM_ASSIGN_OR_RETURN(parted->frames, wire::Encode(message, send_limits_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = std::min(parted->frames.size(), frames_to_send.value_or(parted->frames.size()));
  retained_ = Retained{id, std::move(parted)};
  return SendRetainedLocked(0, n, nullptr);
}

Status ZmqClient::SendResumable(wire::Message message, bool data_parts) {
  return KeepAndSend(std::move(message), data_parts, std::nullopt);
}

Status ZmqClient::SendResumableForTesting(wire::Message message, size_t frames_to_send,
                                          bool data_parts) {
  return KeepAndSend(std::move(message), data_parts, frames_to_send);
}

std::optional<uint64_t> ZmqClient::retained_message_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!retained_) return std::nullopt;
  return retained_->message_id;
}

Status ZmqClient::QueryRetained() {
  std::optional<uint64_t> id = retained_message_id();
  if (!id) return Status::FailedPrecondition("ZmqClient: no sent message is kept to resume");
  wire::Message query{{options_.federation_id, options_.node_id, 0, 0, kQueryIdBase + *id},
                      wire::TransferQuery{*id}};
  return Send(query);
}

Status ZmqClient::ResumeLocked(const wire::TransferResume& r) {
  if (!retained_ || retained_->message_id != r.message_id) {
    // A message this client no longer has (it restarted, or sent a newer one since): the
    // server's partial copy is replaced or expires. Nothing to send, nothing wrong.
    ++resume_offers_ignored_;
    return Status::OK();
  }
  const size_t count = retained_->parted->frames.size();  // the header frame, then the chunks
  size_t begin = 0;  // UNKNOWN: the whole message again
  if (r.state == wire::TransferState::kPartial) {
    if (count < 2 || r.next_chunk >= count - 1) {
      return Status::InvalidArgument(
          "the server asks message " + std::to_string(r.message_id) + " to resume from chunk " +
          std::to_string(r.next_chunk) + ", but it has " + std::to_string(count - 1) + " chunks");
    }
    begin = 1 + size_t{r.next_chunk};
  }
  uint64_t bytes = 0;
  Status s = SendRetainedLocked(begin, count, &bytes);
  bytes_resent_ += bytes;
  ++resumes_;
  return s;
}

Status ZmqClient::Send(const wire::Message& message) {
  FM_ASSIGN_OR_RETURN(std::vector<wire::Frame> frames, wire::Encode(message, send_limits_));
  std::lock_guard<std::mutex> lock(mu_);
  return SendFramesLocked(frames);
}

Status ZmqClient::Reconnect() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!connected_) return Status::FailedPrecondition("ZmqClient: Reconnect before Connect");
  try {
    try {
      socket_.disconnect(endpoint_);
    } catch (const zmq::error_t& e) {
      if (e.num() != ENOENT) throw;  // the refused session is already gone: fine
    }
    socket_.connect(endpoint_);
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "reconnecting to " + endpoint_);
  }
  reassembler_ = wire::Reassembler(options_.limits);
  return Status::OK();
}

Status ZmqClient::SendEncoded(std::vector<wire::Frame> frames) {
  std::lock_guard<std::mutex> lock(mu_);
  return SendFramesLocked(frames);
}

Result<bool> ZmqClient::TrySendFrame(const wire::Frame& frame) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!connected_) return Status::FailedPrecondition("ZmqClient: Send before Connect");
  try {
    zmq::message_t msg(frame.data(), frame.size());
    if (!socket_.send(msg, zmq::send_flags::dontwait)) return false;
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "ZmqClient::TrySendFrame");
  }
  bytes_sent_ += frame.size();
  return true;
}

Status ZmqClient::SendRawFrameForTesting(const std::vector<uint8_t>& frame) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<wire::Frame> frames{frame};
  return SendFramesLocked(frames);
}

Status ZmqClient::SendRawPartsForTesting(const std::vector<std::vector<uint8_t>>& parts) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!connected_) return Status::FailedPrecondition("ZmqClient: Send before Connect");
  try {
    for (size_t i = 0; i < parts.size(); ++i) {
      const bool last = i + 1 == parts.size();
      if (!socket_.send(zmq::buffer(parts[i]), last ? zmq::send_flags::none : zmq::send_flags::sndmore)) {
        return Status::Unavailable("ZmqClient: send queue full past the send timeout");
      }
    }
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "ZmqClient::SendRawPartsForTesting");
  }
  return Status::OK();
}

void ZmqClient::StopHeartbeatsForTesting() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_.store(true);
  }
  stop_cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

Result<std::optional<wire::Message>> ZmqClient::Poll(int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!connected_) return Status::FailedPrecondition("ZmqClient: Poll before Connect");
      int wait = kPollSliceMs;
      if (timeout_ms >= 0) {
        auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        wait = static_cast<int>(std::clamp<int64_t>(left.count(), 0, kPollSliceMs));
      }
      try {
        zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, std::chrono::milliseconds(wait)) > 0) {
          for (std::vector<zmq::message_t> parts = RecvMultipart(socket_); !parts.empty();
               parts = RecvMultipart(socket_)) {
            auto added = AddParts(reassembler_, parts);
            if (!added.ok()) return added.status();
            if (!added->has_value()) continue;
            if (const auto* r = std::get_if<wire::TransferResume>(&(*added)->body)) {
              FM_RETURN_IF_ERROR(ResumeLocked(*r));
              continue;  // handled here: not the driver's business
            }
            return std::move(*added);
          }
        }
      } catch (const zmq::error_t& e) {
        // A signal (SIGHUP, SIGTERM) interrupted the wait: nothing arrived; the caller looks
        // at its flags and polls again.
        if (e.num() == EINTR) return std::optional<wire::Message>();
        return StatusFromZmq(e, "ZmqClient::Poll");
      }
    }
    if (timeout_ms >= 0 && Clock::now() >= deadline) return std::optional<wire::Message>();
  }
}

}  // namespace fedmesh
