// Receives one whole ZeroMQ message (all its frames) without blocking: empty when none is
// waiting. libzmq delivers a multipart message atomically, so once the first frame is there
// the others are too. Thread-safety: as the socket (one thread).
#pragma once

#include <vector>

#include <zmq.hpp>

namespace fedmesh {

inline std::vector<zmq::message_t> RecvMultipart(zmq::socket_t& socket) {
  std::vector<zmq::message_t> parts;
  for (;;) {
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::dontwait)) break;
    const bool more = part.more();
    parts.push_back(std::move(part));
    if (!more) break;
  }
  return parts;
}

}  // namespace fedmesh
