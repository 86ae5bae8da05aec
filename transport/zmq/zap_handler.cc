#include "transport/zmq/zap_handler.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "crypto/z85.h"

namespace fedmesh {
namespace {

constexpr int kStopCheckMs = 50;  // how often the thread looks at stop_
constexpr auto kLogEvery = std::chrono::seconds(10);
constexpr int kMaxLinesPerWindow = 20;  // refusal lines per kLogEvery over all keys

std::shared_ptr<const std::set<CurveKey>> MakeKeySet(const std::vector<PublicIdentity>& list) {
  auto keys = std::make_shared<std::set<CurveKey>>();
  for (const PublicIdentity& id : list) keys->insert(id.curve_public);
  return keys;
}

std::string ToString(const zmq::message_t& m) { return std::string(m.data<char>(), m.size()); }

}  // namespace

Result<std::unique_ptr<ZapHandler>> ZapHandler::Start(
    zmq::context_t& context, const std::vector<PublicIdentity>& allowlist) {
  try {
    zmq::socket_t socket(context, zmq::socket_type::rep);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(kEndpoint);
    std::unique_ptr<ZapHandler> handler(new ZapHandler(std::move(socket)));
    handler->Reload(allowlist);
    handler->thread_ = std::thread([h = handler.get()] { h->Run(); });
    return handler;
  } catch (const zmq::error_t& e) {
    if (e.num() == EADDRINUSE) {
      return Status::AlreadyExists("a ZAP handler is already bound in this ZeroMQ context");
    }
    return Status::Internal(std::string("starting the ZAP handler: ") + e.what());
  } catch (const std::system_error& e) {
    return Status::Internal(std::string("starting the ZAP handler thread: ") + e.what());
  }
}

ZapHandler::ZapHandler(zmq::socket_t socket) : socket_(std::move(socket)) {}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::Reload(const std::vector<PublicIdentity>& allowlist) {
  auto keys = MakeKeySet(allowlist);
  std::lock_guard<std::mutex> lock(mu_);
  allowlist_ = std::move(keys);
}

std::shared_ptr<const ZapHandler::KeySet> ZapHandler::allowlist() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allowlist_;
}

void ZapHandler::Run() {
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> last_logged;
  // A flood of handshakes from ever new keys is logged in bounded volume: at most
  // kMaxLinesPerWindow lines per window, then one line counting the rest.
  auto window_start = std::chrono::steady_clock::now();
  int lines = 0;
  uint64_t suppressed = 0;
  while (!stop_.load()) {
    try {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(kStopCheckMs)) == 0) continue;
      // Request (RFC 27): version, request id, domain, address, routing id, mechanism,
      // credentials... A REP socket must answer every request, well-formed or not.
      std::vector<zmq::message_t> parts;
      do {
        zmq::message_t part;
        if (!socket_.recv(part, zmq::recv_flags::none)) break;
        parts.push_back(std::move(part));
      } while (parts.back().more());

      std::string request_id = parts.size() > 1 ? ToString(parts[1]) : std::string();
      std::string address = parts.size() > 3 ? ToString(parts[3]) : std::string();
      std::string mechanism = parts.size() > 5 ? ToString(parts[5]) : std::string();
      bool curve_key_ok = parts.size() >= 7 && ToString(parts[0]) == "1.0" &&
                          mechanism == "CURVE" && parts[6].size() == kCurveKeySize;
      std::string z85;
      bool admit = false;
      if (curve_key_ok) {
        CurveKey key{};
        std::memcpy(key.data(), parts[6].data(), kCurveKeySize);
        z85 = Z85Encode(key);
        admit = allowlist()->count(key) > 0;
      }
      if (admit) {
        admitted_.fetch_add(1, std::memory_order_relaxed);
      } else {
        refused_.fetch_add(1, std::memory_order_relaxed);
        const std::string who = z85.empty() ? "mechanism " + mechanism : "key " + z85;
        auto now = std::chrono::steady_clock::now();
        auto it = last_logged.find(who);
        if (now - window_start >= kLogEvery) {
          if (suppressed > 0) {
            spdlog::warn("ZAP: {} more refused handshakes in the last {} s were not logged one "
                         "by one", suppressed,
                         std::chrono::duration_cast<std::chrono::seconds>(now - window_start).count());
          }
          window_start = now;
          lines = 0;
          suppressed = 0;
        }
        if (it == last_logged.end() || now - it->second >= kLogEvery) {
          if (last_logged.size() >= 4096) last_logged.clear();  // bounded under a key flood
          last_logged[who] = now;
          if (lines < kMaxLinesPerWindow) {
            ++lines;
            spdlog::warn("ZAP: refused connection from {} with {}: not in the allowlist",
                         address, who);
          } else {
            ++suppressed;
          }
        }
      }
      const std::string status = admit ? "200" : "400";
      const std::string text = admit ? "OK" : "not enrolled";
      socket_.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(status), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(admit ? z85 : std::string()), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(std::string_view()), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;  // context closing: nothing left to authenticate
      spdlog::error("ZAP handler: {}", e.what());
    }
  }
}

}  // namespace fedmesh
