#include "transport/zmq/admin_server.h"

#include <spdlog/spdlog.h>

#include "transport/zmq/multipart.h"
#include "transport/zmq/zmq_status.h"

namespace fedmesh {

const char* AdminRoleName(AdminRole role) {
  return role == AdminRole::kAdmin ? "admin" : "observer";
}

AdminServer::~AdminServer() = default;

Result<std::unique_ptr<AdminServer>> AdminServer::Create(
    const Identity& identity, const std::vector<PublicIdentity>& admins,
    const std::vector<PublicIdentity>& observers, AdminServerOptions options) {
  if (options.max_request_bytes <= 0 || options.max_requests_per_poll <= 0) {
    return Status::InvalidArgument(
        "AdminServerOptions: max_request_bytes and max_requests_per_poll must be > 0");
  }
  std::unique_ptr<AdminServer> server(new AdminServer());
  server->options_ = options;
  FM_RETURN_IF_ERROR(server->Reload(admins, observers));
  std::vector<PublicIdentity> all = admins;
  all.insert(all.end(), observers.begin(), observers.end());
  try {
    FM_ASSIGN_OR_RETURN(server->zap_, ZapHandler::Start(server->context_, all));
    zmq::socket_t socket(server->context_, zmq::socket_type::router);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, 0);
    socket.set(zmq::sockopt::sndhwm, 16);
    socket.set(zmq::sockopt::rcvhwm, 16);
    socket.set(zmq::sockopt::handshake_ivl, 10000);
    // CURVE adds its box overhead to each frame before libzmq checks the size.
    socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_request_bytes) + 64);
    socket.set(zmq::sockopt::curve_server, 1);
    if (zmq_setsockopt(socket.handle(), ZMQ_CURVE_SECRETKEY, identity.curve_secret().data(),
                       identity.curve_secret().size()) != 0) {
      return Status::Internal("AdminServer: libzmq refused the CURVE secret key");
    }
    server->socket_ = std::move(socket);
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "AdminServer: creating the ROUTER socket");
  }
  return server;
}

Status AdminServer::Reload(const std::vector<PublicIdentity>& admins,
                           const std::vector<PublicIdentity>& observers) {
  std::map<std::string, std::pair<std::string, AdminRole>> roles;
  for (const PublicIdentity& p : admins) roles[p.curve_public_z85()] = {p.name, AdminRole::kAdmin};
  for (const PublicIdentity& p : observers) {
    auto [it, fresh] = roles.emplace(p.curve_public_z85(), std::make_pair(p.name, AdminRole::kObserver));
    if (!fresh) {
      return Status::InvalidArgument("admin key " + p.name + " (" + p.curve_public_z85() +
                                     ") is listed both as admin (" + it->second.first +
                                     ") and as observer; give each key one role");
    }
  }
  if (zap_) {
    std::vector<PublicIdentity> all = admins;
    all.insert(all.end(), observers.begin(), observers.end());
    zap_->Reload(all);
  }
  std::lock_guard<std::mutex> lock(mu_);
  roles_ = std::move(roles);
  return Status::OK();
}

Result<std::string> AdminServer::Bind(const std::string& endpoint) {
  try {
    socket_.bind(endpoint);
    return socket_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "binding the admin endpoint " + endpoint);
  }
}

Result<std::optional<AdminRequest>> AdminServer::Poll(int timeout_ms) {
  try {
    for (int i = 0; i < options_.max_requests_per_poll; ++i) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(i == 0 ? timeout_ms : 0)) == 0) {
        return std::optional<AdminRequest>();
      }
      std::vector<zmq::message_t> parts = RecvMultipart(socket_);
      if (parts.size() != 2) continue;  // a DEALER sends [request]; ROUTER prefixes the id
      AdminRequest req;
      req.routing_id = parts[0].to_string();
      const char* user_id = parts[1].gets("User-Id");
      std::pair<std::string, AdminRole> who;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = user_id ? roles_.find(user_id) : roles_.end();
        if (it == roles_.end()) {
          // Admitted before a reload removed it: refuse, and say so in the log.
          spdlog::warn("admin request from key {} that is no longer an admin: refused",
                       user_id ? user_id : "?");
          FM_RETURN_IF_ERROR(SendReply(req.routing_id,
                                       {{"ok", false}, {"error", "this key is not an admin key"}}, {}));
          continue;
        }
        who = it->second;
      }
      req.who = who.first;
      req.role = who.second;
      nlohmann::json j = nlohmann::json::parse(parts[1].to_string_view(), nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("command") ||
          !j["command"].is_string() || (j.contains("argument") && !j["argument"].is_string())) {
        spdlog::warn("admin {}: malformed request ({} bytes) refused", req.who, parts[1].size());
        FM_RETURN_IF_ERROR(SendReply(
            req.routing_id,
            {{"ok", false},
             {"error", "malformed request: want a JSON object {\"command\": str, \"argument\": str}"}},
            {}));
        continue;
      }
      req.command = j["command"].get<std::string>();
      if (j.contains("argument")) req.argument = j["argument"].get<std::string>();
      return std::optional<AdminRequest>(std::move(req));
    }
    return std::optional<AdminRequest>();
  } catch (const zmq::error_t& e) {
    return StatusFromZmq(e, "AdminServer: receiving");
  }
}

Status AdminServer::Reply(const AdminRequest& request, const nlohmann::json& reply,
                          const std::string& payload) {
  return SendReply(request.routing_id, reply, payload);
}

Status AdminServer::SendReply(const std::string& routing_id, const nlohmann::json& reply,
                              const std::string& payload) {
  try {
    const std::string text = reply.dump();
    if (!socket_.send(zmq::buffer(routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return Status::OK();  // the client is gone or not reading: nothing to answer
    }
    auto flags = payload.empty() ? zmq::send_flags::dontwait
                                 : zmq::send_flags::sndmore | zmq::send_flags::dontwait;
    (void)socket_.send(zmq::buffer(text), flags);
    if (!payload.empty()) (void)socket_.send(zmq::buffer(payload), zmq::send_flags::dontwait);
    return Status::OK();
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH || e.num() == EAGAIN) return Status::OK();
    return StatusFromZmq(e, "AdminServer: replying");
  }
}

}  // namespace fedmesh
