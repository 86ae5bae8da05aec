// Chunk frames without copies through protobuf: a chunk frame is the protobuf message
// ChunkFrame {Header header = 1; Chunk chunk = 16} (fedmesh.proto), byte for byte what
// protobuf would serialize, but written straight from the payload into the frame (one
// copy) and read as a view of the data inside the received frame (no copy), because
// protobuf's own parse and serialize copy every chunk's bytes twice.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace fedmesh::wire {

// A chunk frame's fields; `header` is the serialized pb::Header, `data` points into the
// frame it was parsed from.
struct ChunkFrameView {
  bool has_header = false;  // field 1 present
  bool has_chunk = false;   // field 16 present
  std::span<const uint8_t> header;
  uint64_t transfer_id = 0;
  uint32_t index = 0;
  uint32_t count = 0;
  std::span<const uint8_t> data;
  uint64_t detached_bytes = 0;  // field 5: the data travels as the next part instead
};

// Appends to `out` the frame for `serialized_header` and the chunk (transfer_id, index,
// count, data), exactly as protobuf serializes a ChunkFrame.
std::vector<uint8_t> WriteChunkFrame(std::span<const uint8_t> serialized_header,
                                     uint64_t transfer_id, uint32_t index, uint32_t count,
                                     std::span<const uint8_t> data);

// Parses `frame` as a ChunkFrame. nullopt when its bytes are not a well-formed protobuf
// message (the caller reports it as corrupt); unknown fields are skipped, as protobuf would;
// a missing header or chunk is reported through has_header / has_chunk.
std::optional<ChunkFrameView> ParseChunkFrame(std::span<const uint8_t> frame);

}  // namespace fedmesh::wire
