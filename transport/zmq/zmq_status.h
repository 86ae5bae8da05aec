// StatusFromZmq: the one mapping from cppzmq's exceptions (zmq::error_t) to fedmesh
// Status, so the server and the client classify socket errors the same way. cppzmq
// throws; fedmesh never lets an exception cross the transport boundary.
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <zmq.hpp>

#include "core/status.h"

namespace fedmesh {

// "<what>: <zmq's message>" under a code that says whether retrying can help:
// Unavailable (address in use, host unreachable, would block), InvalidArgument (bad
// endpoint or option), FailedPrecondition (the context is closing), Internal otherwise.
Status StatusFromZmq(const zmq::error_t& e, const std::string& what);

}  // namespace fedmesh
