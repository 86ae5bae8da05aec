#include "transport/zmq/zmq_status.h"

namespace fedmesh {

Status StatusFromZmq(const zmq::error_t& e, const std::string& what) {
  switch (e.num()) {
    case EADDRINUSE:
    case EHOSTUNREACH:
    case EAGAIN:
      return Status::Unavailable(what + ": " + e.what());
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENODEV:
      return Status::InvalidArgument(what + ": " + e.what());
    case ETERM:
      return Status::FailedPrecondition(what + ": the transport is closed");
    default:
      return Status::Internal(what + ": " + e.what());
  }
}

}  // namespace fedmesh
