#include "config/zmq_endpoint.h"

#include <string>

namespace fedmesh {

Status CheckZmqEndpoint(std::string_view e, EndpointUse use) {
  const std::string quoted = "\"" + std::string(e) + "\"";
  const bool bind = use == EndpointUse::kBind;
  for (std::string_view other : {"ipc://", "inproc://"}) {
    if (e.starts_with(other)) {
      if (e.size() == other.size()) return Status::InvalidArgument(quoted + " names no " + std::string(other) + " path");
      return Status::OK();
    }
  }
  if (!e.starts_with("tcp://")) {
    return Status::InvalidArgument(quoted + " is not a ZeroMQ endpoint: it must start with tcp:// (e.g. " +
                                   (bind ? "tcp://0.0.0.0:5555" : "tcp://aggregator.example.org:5555") +
                                   "), ipc:// or inproc://");
  }
  const std::string_view rest = e.substr(6);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Status::InvalidArgument(quoted + " needs a host and a port, tcp://HOST:PORT");
  }
  const std::string_view host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host == "*" && !bind) return Status::InvalidArgument(quoted + ": host * is for binding; name the host to reach");
  if (port == "*") {
    if (bind) return Status::OK();
    return Status::InvalidArgument(quoted + ": port * is for binding; name the port to reach");
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoi(std::string(port)) < 1 || std::stoi(std::string(port)) > 65535) {
    return Status::InvalidArgument(quoted + ": the port must be a number from 1 to 65535" +
                                   (bind ? std::string(" (or * for any free one)") : std::string()));
  }
  return Status::OK();
}

}  // namespace fedmesh
