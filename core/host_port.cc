#include "core/host_port.h"

namespace fedmesh {

Result<HostPort> ParseHostPort(const std::string& text, const std::string& what) {
  const size_t colon = text.rfind(':');
  auto bad = [&] {
    return Status::InvalidArgument((what.empty() ? "" : what + " ") + "\"" + text +
                                   "\" is not HOST:PORT, e.g. 127.0.0.1:9464");
  };
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() ||
      text.find_first_not_of("0123456789", colon + 1) != std::string::npos ||
      text.size() - colon > 6) {
    return bad();
  }
  HostPort hp;
  hp.host = text.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  hp.port = std::stoi(text.substr(colon + 1));
  if (hp.port > 65535) return bad();
  return hp;
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool IsLoopbackHostPort(const std::string& text) {
  auto hp = ParseHostPort(text, "");
  return hp.ok() && IsLoopbackHost(hp->host);
}

}  // namespace fedmesh
