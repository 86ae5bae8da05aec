#include "transport/zmq/admin_client.h"

#include <chrono>
#include <cstring>
#include <vector>

#include <zmq.hpp>

#include "transport/zmq/multipart.h"
#include "transport/zmq/zmq_status.h"

namespace fedmesh {

Result<AdminReply> AdminCall(const Identity& me, const PublicIdentity& server,
                             const std::string& endpoint, const std::string& command,
                             const std::string& argument, const AdminCallOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
  try {
    zmq::context_t context;
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::maxmsgsize, options.max_reply_bytes);
    const CurveKey& pub = me.public_identity().curve_public;
    if (zmq_setsockopt(socket.handle(), ZMQ_CURVE_PUBLICKEY, pub.data(), pub.size()) != 0 ||
        zmq_setsockopt(socket.handle(), ZMQ_CURVE_SECRETKEY, me.curve_secret().data(),
                       me.curve_secret().size()) != 0 ||
        zmq_setsockopt(socket.handle(), ZMQ_CURVE_SERVERKEY, server.curve_public.data(),
                       server.curve_public.size()) != 0) {
      return Status::Internal("fedmesh-admin: libzmq refused the CURVE keys");
    }
    // The monitor reports the handshake's outcome; a refused key otherwise looks like a
    // server that never answers.
    const std::string monitor_ep = "inproc://fedmesh-admin-monitor";
    if (zmq_socket_monitor(socket.handle(), monitor_ep.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
      return Status::Internal("fedmesh-admin: cannot monitor the admin socket");
    }
    zmq::socket_t monitor(context, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(monitor_ep);
    socket.connect(endpoint);
    nlohmann::json request = {{"command", command}, {"argument", argument}};
    const std::string text = request.dump();
    if (!socket.send(zmq::buffer(text), zmq::send_flags::dontwait)) {
      return Status::Unavailable("fedmesh-admin: cannot queue the request to " + endpoint);
    }
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        return Status::Unavailable("no answer from the aggregator's admin endpoint " + endpoint +
                                   " within " + std::to_string(options.timeout_ms) +
                                   " ms (is it running, with [admin] listen there?)");
      }
      zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                 {monitor.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, left);
      if (items[1].revents & ZMQ_POLLIN) {
        zmq::message_t event, addr;
        if (monitor.recv(event) && event.more()) (void)monitor.recv(addr);
        uint16_t id = 0;
        if (event.size() >= 2) std::memcpy(&id, event.data(), 2);
        if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
          return Status::PermissionDenied(
              "the aggregator at " + endpoint + " refused admin key " + me.name() +
              " (not on its admin or observer list)");
        }
        return Status::Unavailable("the CURVE handshake with " + endpoint +
                                   " failed (wrong aggregator.pub?)");
      }
      if (items[0].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> parts = RecvMultipart(socket);
        if (parts.empty()) continue;
        AdminReply out;
        out.reply = nlohmann::json::parse(parts[0].to_string_view(), nullptr, false);
        if (out.reply.is_discarded() || !out.reply.is_object()) {
          return Status::Corruption("the aggregator's admin reply is not a JSON object");
        }
        if (parts.size() > 1) out.payload = parts[1].to_string();
        return out;
      }
    }
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "fedmesh-admin: talking to " + endpoint);
  }
}

}  // namespace fedmesh
