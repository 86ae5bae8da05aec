// Receiving whole ZeroMQ messages: RecvMultipart, and AddParts, which hands one message's
// parts to a wire::Reassembler. Thread-safety: as the socket (one thread).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "core/status.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {

// Receives one whole ZeroMQ message (all its frames) without blocking: empty when none is
// waiting. libzmq delivers a multipart message atomically, so once the first frame is there
// the others are too.
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

// Hands the parts of one ZeroMQ message (after any routing id) to `reassembler`: one frame,
// or a chunk frame and its data part (docs/wire.md, "Chunk data parts"). Corruption for
// none or more than two parts.
inline Result<std::optional<wire::Message>> AddParts(wire::Reassembler& reassembler,
                                                     std::span<const zmq::message_t> parts) {
  auto bytes = [](const zmq::message_t& m) {
    return std::span<const uint8_t>(m.data<uint8_t>(), m.size());
  };
  if (parts.size() == 1) return reassembler.Add(bytes(parts[0]));
  if (parts.size() == 2) return reassembler.Add(bytes(parts[0]), bytes(parts[1]));
  return Status::Corruption("a ZeroMQ message of " + std::to_string(parts.size()) +
                            " parts; fedmesh sends one frame per message, or a chunk frame "
                            "and its data part");
}

}  // namespace fedmesh
