// The ZeroMQ endpoints config files name (an aggregator's listen and a node's endpoint,
// admin, ring and split endpoints), checked when the file loads: a typo such as
// "htp://host:5555" or a missing port otherwise surfaces only when the socket is made, after
// the data has loaded, as libzmq's bare "Protocol not supported".
// Thread-safety: a pure function.
#pragma once

#include <string_view>

#include "core/status.h"

namespace fedmesh {

enum class EndpointUse { kBind, kConnect };

// OK for "tcp://HOST:PORT" (PORT 1-65535; "*" for either HOST or PORT only when binding;
// HOST may be a bracketed IPv6 address), "ipc://PATH" and "inproc://NAME"; InvalidArgument
// saying what is wrong otherwise.
Status CheckZmqEndpoint(std::string_view endpoint, EndpointUse use);

}  // namespace fedmesh
