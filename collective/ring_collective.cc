#include "collective/ring_collective.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "collective/wire_floats.h"
#include "core/codec/half_float_quantizer.h"

namespace fedmesh::collective {
namespace {

// Early chunks kept for the next operation, at most: a neighbour one operation ahead sends
// at most its first step's chunks before it must hear from this rank.
constexpr size_t kMaxEarlyChunks = size_t{1} << 16;

std::string Str(uint64_t v) { return std::to_string(v); }

uint64_t SeenKey(uint8_t phase, uint32_t step, uint32_t index) {
  return (uint64_t{phase} << 63) | (uint64_t{step} << 32) | index;
}

}  // namespace

const char* WireTypeName(WireType w) {
  switch (w) {
    case WireType::kFloat32: return "float32";
    case WireType::kFloat16: return "fp16";
    case WireType::kBFloat16: return "bf16";
  }
  return "?";
}

Result<RingCollective> RingCollective::Create(const RingOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return Status::InvalidArgument("RingOptions: rank " + std::to_string(o.rank) + " is not in [0, size = " +
                                   std::to_string(o.size) + ")");
  }
  if (o.chunk_bytes < 4) return Status::InvalidArgument("RingOptions: chunk_bytes must be >= 4");
  return RingCollective(o);
}

std::pair<uint64_t, uint64_t> RingCollective::Range(uint32_t block) const {
  return {starts_[block], starts_[block + 1]};
}

uint32_t RingCollective::ChunksIn(uint32_t block) const {
  const auto [b, e] = Range(block);
  return static_cast<uint32_t>((e - b + chunk_elems() - 1) / chunk_elems());
}

std::pair<uint64_t, uint64_t> RingCollective::ChunkRange(uint32_t block, uint32_t index) const {
  const auto [b, e] = Range(block);
  const uint64_t begin = b + uint64_t{index} * chunk_elems();
  return {begin, std::min(e, begin + chunk_elems())};
}

Result<std::vector<Send>> RingCollective::Begin(OpKind kind) {
  if (active_) {
    return Status::FailedPrecondition("collective operation " + Str(op_ - 1) +
                                      " is still running; every rank runs one operation at a time");
  }
  kind_ = kind;
  ++op_;
  active_ = true;
  received_ = 0;
  expected_ = 0;
  seen_.clear();
  return std::vector<Send>();
}

void RingCollective::Complete() {
  active_ = false;
  data_ = {};
  seen_.clear();
}

Status RingCollective::SendChunk(uint8_t phase, uint32_t step, uint32_t block, uint32_t index,
                                 std::vector<Send>& out) {
  const auto [b, e] = ChunkRange(block, index);
  Chunk c;
  c.generation = options_.generation;
  c.op = op_ - 1;
  c.kind = kind_;
  c.phase = phase;
  c.step = step;
  c.block = block;
  c.index = index;
  c.wire = wire_;
  std::string bytes;
  FM_RETURN_IF_ERROR(EncodeWireFloats(wire_, data_.subspan(b, e - b), bytes));
  bytes_sent_ += bytes.size();
  c.bytes = Payload(std::move(bytes));
  out.push_back({next(), std::move(c)});
  return Status::OK();
}

Status RingCollective::DrainEarly(std::vector<Send>& out) {
  std::vector<Chunk> early = std::move(early_);
  early_.clear();
  for (Chunk& c : early) {
    if (c.op != op_ - 1 || !active_) {
      ++stale_;
      continue;
    }
    FM_RETURN_IF_ERROR(Handle(c, out));
  }
  return Status::OK();
}

Result<std::vector<Send>> RingCollective::StartAllreduce(std::span<float> data, ReduceOp op, bool exact) {
  const int n = options_.size;
  if (options_.wire == WireType::kFloat16 && n > 1 && !exact) {
    // Checked before anything is sent: a value fp16 cannot hold fails the call, not the ring.
    std::string probe;
    FM_RETURN_IF_ERROR(EncodeWireFloats(WireType::kFloat16, data, probe).WithContext("all-reduce over an fp16 wire"));
  }
  FM_ASSIGN_OR_RETURN(std::vector<Send> out, Begin(OpKind::kAllreduce));
  wire_ = exact ? WireType::kFloat32 : options_.wire;
  reduce_ = op;
  data_ = data;
  starts_.assign(n + 1, 0);
  for (int b = 0; b <= n; ++b) starts_[b] = data.size() * static_cast<uint64_t>(b) / static_cast<uint64_t>(n);
  const int r = options_.rank;
  if (n == 1) {
    Complete();  // the sum of one; its average too
    return out;
  }
  for (int s = 0; s + 1 < n; ++s) {
    expected_ += ChunksIn(static_cast<uint32_t>((r - s - 1 + 2 * n) % n));  // reduce-scatter
    expected_ += ChunksIn(static_cast<uint32_t>((r - s + 2 * n) % n));      // all-gather
  }
  for (uint32_t k = 0; k < ChunksIn(static_cast<uint32_t>(r)); ++k) {
    FM_RETURN_IF_ERROR(SendChunk(0, 0, static_cast<uint32_t>(r), k, out));
  }
  if (expected_ == 0) Complete();
  FM_RETURN_IF_ERROR(DrainEarly(out));
  return out;
}

Result<std::vector<Send>> RingCollective::StartAllgather(std::span<const float> mine,
                                                         std::span<const uint64_t> counts, std::span<float> out_buf) {
  const int n = options_.size;
  const int r = options_.rank;
  if (counts.size() != static_cast<size_t>(n) || counts[r] != mine.size()) {
    return Status::InvalidArgument("allgather: counts must list every rank's length, this rank's being " +
                                   Str(mine.size()));
  }
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (out_buf.size() != total) {
    return Status::InvalidArgument("allgather: the output holds " + Str(out_buf.size()) + " values, not " + Str(total));
  }
  FM_ASSIGN_OR_RETURN(std::vector<Send> out, Begin(OpKind::kAllgather));
  wire_ = WireType::kFloat32;
  data_ = out_buf;
  starts_.assign(n + 1, 0);
  for (int b = 0; b < n; ++b) starts_[b + 1] = starts_[b] + counts[b];
  if (!mine.empty() && mine.data() != out_buf.data() + starts_[r]) {
    std::memmove(out_buf.data() + starts_[r], mine.data(), mine.size() * sizeof(float));
  }
  for (int b = 0; b < n; ++b) {
    if (b != r) expected_ += ChunksIn(static_cast<uint32_t>(b));
  }
  if (n > 1) {
    for (uint32_t k = 0; k < ChunksIn(static_cast<uint32_t>(r)); ++k) {
      FM_RETURN_IF_ERROR(SendChunk(0, 0, static_cast<uint32_t>(r), k, out));
    }
  }
  if (expected_ == 0) Complete();
  FM_RETURN_IF_ERROR(DrainEarly(out));
  return out;
}

Result<std::vector<Send>> RingCollective::StartBroadcast(std::span<float> data, int root) {
  const int n = options_.size;
  if (root < 0 || root >= n) return Status::InvalidArgument("broadcast: root " + std::to_string(root) + " is not a rank");
  FM_ASSIGN_OR_RETURN(std::vector<Send> out, Begin(OpKind::kBroadcast));
  wire_ = WireType::kFloat32;
  data_ = data;
  root_ = root;
  starts_.assign(n + 1, 0);
  for (int b = root + 1; b <= n; ++b) starts_[b] = data.size();  // block `root` is all of it
  if (options_.rank == root) {
    if (n > 1) {
      for (uint32_t k = 0; k < ChunksIn(static_cast<uint32_t>(root)); ++k) {
        FM_RETURN_IF_ERROR(SendChunk(0, 0, static_cast<uint32_t>(root), k, out));
      }
    }
  } else {
    expected_ = ChunksIn(static_cast<uint32_t>(root));
  }
  if (expected_ == 0) Complete();
  FM_RETURN_IF_ERROR(DrainEarly(out));
  return out;
}

Result<std::vector<Send>> RingCollective::StartBarrier() {
  one_ = 0;
  return StartAllreduce(std::span<float>(&one_, 1), ReduceOp::kSum, /*exact=*/true);
}

Result<std::vector<Send>> RingCollective::OnChunk(int from, Chunk chunk) {
  std::vector<Send> out;
  if (from != prev()) {
    return Status::InvalidArgument("collective chunk from rank " + std::to_string(from) + "; only rank " +
                                   std::to_string(prev()) + " (the ring predecessor) sends to rank " +
                                   std::to_string(options_.rank));
  }
  if (chunk.generation != options_.generation) {
    return Status::InvalidArgument("collective chunk of ring generation " + Str(chunk.generation) +
                                   "; this ring is generation " + Str(options_.generation));
  }
  const uint64_t current = op_ == 0 ? 0 : op_ - 1;
  const bool next_op = chunk.op == op_;  // the operation after the one started last
  if (!next_op && (chunk.op < current || (chunk.op == current && !active_))) {
    ++stale_;
    return out;
  }
  if (next_op) {
    if (early_.size() >= kMaxEarlyChunks) {
      return Status::InvalidArgument("rank " + std::to_string(from) + " sent more than " + Str(kMaxEarlyChunks) +
                                     " chunks of an operation this rank has not started");
    }
    early_.push_back(std::move(chunk));
    return out;
  }
  if (chunk.op > op_) {
    return Status::InvalidArgument("collective chunk of operation " + Str(chunk.op) + " while this rank is at " +
                                   Str(current) + ": a neighbour cannot be two operations ahead");
  }
  FM_RETURN_IF_ERROR(Handle(chunk, out));
  return out;
}

Status RingCollective::Handle(Chunk& c, std::vector<Send>& out) {
  if (c.kind != kind_) {
    return Status::InvalidArgument("collective operation " + Str(c.op) + ": a chunk of another kind of operation");
  }
  const int n = options_.size;
  if (c.step + 1 >= static_cast<uint32_t>(n) || c.phase > (kind_ == OpKind::kAllreduce ? 1 : 0) ||
      c.block >= static_cast<uint32_t>(n) || c.index >= ChunksIn(c.block) || c.wire != wire_) {
    return Status::InvalidArgument("collective operation " + Str(c.op) + ": chunk (phase " + Str(c.phase) +
                                   ", step " + Str(c.step) + ", block " + Str(c.block) + ", index " + Str(c.index) +
                                   ", " + WireTypeName(c.wire) + ") does not fit the operation");
  }
  const auto [b, e] = ChunkRange(c.block, c.index);
  if (c.bytes.size() != (e - b) * WireBytes(wire_)) {
    return Status::InvalidArgument("collective operation " + Str(c.op) + ": chunk of " + Str(c.bytes.size()) +
                                   " bytes where " + Str((e - b) * WireBytes(wire_)) + " belong");
  }
  // The block each step carries to this rank is fixed by the ring: anything else is refused
  // before it is marked as received.
  const int r = options_.rank;
  uint32_t want = 0;
  switch (kind_) {
    case OpKind::kAllreduce:
      want = static_cast<uint32_t>((r - static_cast<int>(c.step) - (c.phase == 0 ? 1 : 0) + 2 * n) % n);
      break;
    case OpKind::kAllgather:
      want = static_cast<uint32_t>((r - static_cast<int>(c.step) - 1 + 2 * n) % n);
      break;
    case OpKind::kBroadcast:
      if (c.step != 0 || r == root_) {
        return Status::InvalidArgument("broadcast operation " + Str(c.op) + ": a chunk that is not the root's");
      }
      want = static_cast<uint32_t>(root_);
      break;
    case OpKind::kMessage:
      return Status::InvalidArgument("collective operation " + Str(c.op) + ": a protocol message, not a ring chunk");
  }
  if (c.block != want) {
    return Status::InvalidArgument("collective operation " + Str(c.op) + ": step " + Str(c.step) + " carries block " +
                                   Str(want) + " to this rank, not " + Str(c.block));
  }
  if (!seen_.insert(SeenKey(c.phase, c.step, c.index)).second) {
    return Status::InvalidArgument("collective operation " + Str(c.op) + ": chunk (phase " + Str(c.phase) +
                                   ", step " + Str(c.step) + ", index " + Str(c.index) + ") sent twice");
  }
  Status s;
  switch (kind_) {
    case OpKind::kAllreduce: s = HandleAllreduce(c, out); break;
    case OpKind::kAllgather: s = HandleAllgather(c, out); break;
    case OpKind::kBroadcast: s = HandleBroadcast(c, out); break;
    case OpKind::kMessage: break;  // refused above
  }
  FM_RETURN_IF_ERROR(s);
  if (++received_ == expected_) Complete();
  return Status::OK();
}

Status RingCollective::HandleAllreduce(Chunk& c, std::vector<Send>& out) {
  const int n = options_.size;
  const auto [b, e] = ChunkRange(c.block, c.index);
  std::span<float> dst = data_.subspan(b, e - b);
  if (c.phase == 1) {  // all-gather: the owner's final values, forwarded unchanged
    FM_RETURN_IF_ERROR(DecodeWireFloats(wire_, c.bytes.view(), dst));
    if (c.step + 2 < static_cast<uint32_t>(n)) {
      ++c.step;
      bytes_sent_ += c.bytes.size();
      out.push_back({next(), std::move(c)});
    }
    return Status::OK();
  }
  if (wire_ == WireType::kFloat32) {  // add straight from where the chunk landed
    const char* src = c.bytes.data();
    for (size_t i = 0; i < dst.size(); ++i) {
      float v;
      std::memcpy(&v, src + 4 * i, 4);
      dst[i] += v;
    }
  } else {
    scratch_.resize(dst.size());
    FM_RETURN_IF_ERROR(DecodeWireFloats(wire_, c.bytes.view(), scratch_));
    for (size_t i = 0; i < dst.size(); ++i) dst[i] += scratch_[i];
  }
  if (c.step + 2 < static_cast<uint32_t>(n)) return SendChunk(0, c.step + 1, c.block, c.index, out);
  // This rank owns the segment: finish it, then start it round the ring.
  if (reduce_ == ReduceOp::kAverage) {
    const float count = static_cast<float>(n);
    for (float& v : dst) v /= count;
  }
  FM_RETURN_IF_ERROR(SendChunk(1, 0, c.block, c.index, out));
  if (wire_ != WireType::kFloat32) {  // keep what the others will have
    FM_RETURN_IF_ERROR(DecodeWireFloats(wire_, out.back().chunk.bytes.view(), dst));
  }
  return Status::OK();
}

Status RingCollective::HandleAllgather(Chunk& c, std::vector<Send>& out) {
  const int n = options_.size;
  const auto [b, e] = ChunkRange(c.block, c.index);
  FM_RETURN_IF_ERROR(DecodeWireFloats(wire_, c.bytes.view(), data_.subspan(b, e - b)));
  if (c.step + 2 < static_cast<uint32_t>(n)) {
    ++c.step;
    bytes_sent_ += c.bytes.size();
    out.push_back({next(), std::move(c)});
  }
  return Status::OK();
}

Status RingCollective::HandleBroadcast(Chunk& c, std::vector<Send>& out) {
  const auto [b, e] = ChunkRange(c.block, c.index);
  FM_RETURN_IF_ERROR(DecodeWireFloats(wire_, c.bytes.view(), data_.subspan(b, e - b)));
  if (next() != root_) {
    bytes_sent_ += c.bytes.size();
    out.push_back({next(), std::move(c)});
  }
  return Status::OK();
}

}  // namespace fedmesh::collective
