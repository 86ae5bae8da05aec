// What ring collectives send between neighbours (collective/ring_collective.h): one chunk of
// one step of one operation. The transport carries it as is (in process) or encoded in a
// wire message (over CurveZMQ). Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>

namespace fedmesh::collective {

// How float values travel. fp16 / bf16 halve the bytes; the rounding they add is bounded in
// docs/collectives.md, and every rank ends with the same values all the same.
enum class WireType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
const char* WireTypeName(WireType w);
// Bytes per element on the wire: 4 or 2.
inline uint32_t WireBytes(WireType w) { return w == WireType::kFloat32 ? 4 : 2; }

enum class OpKind : uint8_t { kAllreduce = 0, kAllgather = 1, kBroadcast = 2 };

struct Chunk {
  uint64_t generation = 0;  // the ring's membership generation (elastic rings); 0 = first
  uint64_t op = 0;          // operation number: every rank numbers its calls alike (SPMD)
  OpKind kind = OpKind::kAllreduce;
  uint8_t phase = 0;    // all-reduce: 0 reduce-scatter, 1 all-gather; others 0
  uint32_t step = 0;    // ring step within the phase
  uint32_t block = 0;   // the segment (all-reduce) or the rank's block (all-gather) it is from
  uint32_t index = 0;   // chunk index within that segment or block
  WireType wire = WireType::kFloat32;
  std::string bytes;    // the chunk's elements in `wire` format
};

}  // namespace fedmesh::collective
