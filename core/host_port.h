// HOST:PORT addresses of the HTTP endpoints ([metrics] listen, [status_page] listen).
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "core/status.h"

namespace fedmesh {

struct HostPort {
  std::string host;  // without IPv6 brackets
  int port = 0;      // 0 = any free port
};

// "127.0.0.1:9464", "[::1]:80", "localhost:0". InvalidArgument (quoting `text` and naming
// `what`, e.g. "[metrics] listen", unless empty) when it is not HOST:PORT with a port in
// [0, 65535].
Result<HostPort> ParseHostPort(const std::string& text, const std::string& what);

// True for 127.0.0.0/8, ::1 and "localhost": only this machine can reach the address.
bool IsLoopbackHost(const std::string& host);
// IsLoopbackHost of a HOST:PORT; false when it does not parse.
bool IsLoopbackHostPort(const std::string& text);

}  // namespace fedmesh
