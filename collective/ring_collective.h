// RingCollective: one rank's side of the ring collectives, as a sans-IO state machine (like
// the round engine): the caller starts an operation, hands it every chunk its ring
// predecessor sends, and moves the chunks it returns to its successor. Data only ever flows
// from rank r - 1 to rank r (mod size), so one link per neighbour carries everything and both
// directions of every link are busy at once.
//
//   allreduce  ring reduce-scatter then all-gather (Horovod / Baidu ring): 2 (N - 1) steps,
//              each moving 1/N of the buffer, the bandwidth-optimal 2 (N - 1) / N x bytes
//              per rank. Each segment is cut into chunks of about chunk_bytes, and a chunk
//              is reduced and sent on as soon as it arrives, so the steps pipeline.
//   allgather  every rank's block, any length (counts known to all), around the ring.
//   broadcast  the root's buffer along the ring, chunk by chunk (pipelined).
//   barrier    an all-reduce of one value: nobody leaves before everybody came.
//
// Every rank ends an all-reduce with bit-identical values: each segment is reduced once, by
// its owner, and the others copy its bytes. With an fp16 / bf16 wire the owner rounds its own
// copy to the wire format before sending it, so its values equal everybody else's. Average
// divides in the owner, before that rounding.
//
// Operations are numbered in call order; every rank must call the same operations in the
// same order with the same lengths (the SPMD contract Horovod and MPI have). A chunk of the
// next operation that arrives early is kept until that operation starts (a neighbour is
// never more than one operation ahead); one of an earlier operation is dropped and
// counted. A chunk from a rank that is not the predecessor, or whose step, block, index or
// size is not what this operation expects there, is refused with InvalidArgument and
// changes nothing.
//
// Thread-safety: one thread drives a RingCollective. The buffers handed to Start* must
// stay valid until done().
#pragma once

#include <cstdint>
#include <algorithm>
#include <map>
#include <span>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "collective/chunk.h"
#include "core/status.h"

namespace fedmesh::collective {

enum class ReduceOp : uint8_t { kSum = 0, kAverage = 1 };

struct RingOptions {
  int size = 1;  // ranks in the ring
  int rank = 0;  // this rank, in [0, size)
  // Wire bytes per chunk: the pipelining grain. Default: 1 MiB.
  uint64_t chunk_bytes = uint64_t{1} << 20;
  // How all-reduce values travel. All-gather and broadcast always send float32 (they copy
  // data; rounding it would change it). Default: float32.
  WireType wire = WireType::kFloat32;
  // The membership generation stamped on every chunk; chunks of another generation are
  // refused (an elastic ring re-forms with a new generation). Default: 0.
  uint64_t generation = 0;
};

struct Send {
  int to = 0;  // the successor rank
  Chunk chunk;
};

class RingCollective {
 public:
  // InvalidArgument for size < 1, a rank outside [0, size), or chunk_bytes < 4.
  static Result<RingCollective> Create(const RingOptions& options);

  // Each Start* begins the next operation and returns its first chunks. FailedPrecondition
  // while an operation is still running. An all-reduce over an fp16 wire fails with
  // InvalidArgument when a value does not fit fp16 (nothing is sent).
  // `exact` sends float32 whatever the ring's wire (lengths, counters).
  Result<std::vector<Send>> StartAllreduce(std::span<float> data, ReduceOp op = ReduceOp::kSum,
                                           bool exact = false);
  // `out` receives every rank's block in rank order; counts[i] is rank i's length
  // (counts[rank] == mine.size(), out.size() == sum of counts).
  Result<std::vector<Send>> StartAllgather(std::span<const float> mine, std::span<const uint64_t> counts,
                                           std::span<float> out);
  // `data` is the root's buffer at the root and is overwritten everywhere else.
  Result<std::vector<Send>> StartBroadcast(std::span<float> data, int root);
  Result<std::vector<Send>> StartBarrier();

  // A chunk from rank `from`: what to send on (possibly nothing).
  Result<std::vector<Send>> OnChunk(int from, Chunk chunk);

  // The operation started last has completed (true before the first).
  bool done() const { return !active_; }
  uint64_t ops_completed() const { return op_ - (active_ ? 1 : 0); }
  int size() const { return options_.size; }
  int rank() const { return options_.rank; }
  const RingOptions& options() const { return options_; }
  uint64_t stale_chunks() const { return stale_; }  // of finished operations, dropped
  uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  explicit RingCollective(const RingOptions& o) : options_(o) {}
  int next() const { return (options_.rank + 1) % options_.size; }
  int prev() const { return (options_.rank + options_.size - 1) % options_.size; }
  // [begin, end) of all-reduce segment `block`, or of all-gather block `block`.
  std::pair<uint64_t, uint64_t> Range(uint32_t block) const;
  uint32_t ChunksIn(uint32_t block) const;
  std::pair<uint64_t, uint64_t> ChunkRange(uint32_t block, uint32_t index) const;
  uint64_t chunk_elems() const { return std::max<uint64_t>(1, options_.chunk_bytes / WireBytes(wire_)); }
  Result<std::vector<Send>> Begin(OpKind kind);
  // Sends chunk `index` of `block` for (phase, step), encoding data_ there.
  Status SendChunk(uint8_t phase, uint32_t step, uint32_t block, uint32_t index, std::vector<Send>& out);
  Status Handle(Chunk& chunk, std::vector<Send>& out);
  Status HandleAllreduce(Chunk& chunk, std::vector<Send>& out);
  Status HandleAllgather(Chunk& chunk, std::vector<Send>& out);
  Status HandleBroadcast(Chunk& chunk, std::vector<Send>& out);
  // Sends the chunks that were waiting for this operation to start.
  Status DrainEarly(std::vector<Send>& out);
  void Complete();

  RingOptions options_;
  uint64_t op_ = 0;  // operations started; the current one is op_ - 1
  bool active_ = false;
  OpKind kind_ = OpKind::kAllreduce;
  WireType wire_ = WireType::kFloat32;  // of the current operation
  ReduceOp reduce_ = ReduceOp::kSum;
  std::span<float> data_;                // all-reduce / broadcast buffer, all-gather output
  std::vector<uint64_t> starts_;         // block b is [starts_[b], starts_[b + 1])
  int root_ = 0;
  uint64_t expected_ = 0;  // chunks this rank must receive to complete
  uint64_t received_ = 0;
  float one_ = 0;          // the barrier's buffer
  std::unordered_set<uint64_t> seen_;  // (phase, step, index) of the chunks received
  std::vector<Chunk> early_;  // chunks of the next operation (at most one op ahead)
  uint64_t stale_ = 0;
  uint64_t bytes_sent_ = 0;
  std::vector<float> scratch_;
};

}  // namespace fedmesh::collective
