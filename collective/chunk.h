// What ring collectives send between neighbours (collective/ring_collective.h): one chunk of
// one step of one operation. The transport carries it as is (in process) or encoded in a
// wire message (over CurveZMQ). Thread-safety: values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace fedmesh::collective {

// How float values travel. fp16 / bf16 halve the bytes; the rounding they add is bounded in
// docs/collectives.md, and every rank ends with the same values all the same.
enum class WireType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
const char* WireTypeName(WireType w);
// Bytes per element on the wire: 4 or 2.
inline uint32_t WireBytes(WireType w) { return w == WireType::kFloat32 ? 4 : 2; }

// kMessage: not a ring operation but one message of another protocol between the group's
// members (private set intersection, split training), whole in `bytes`.
enum class OpKind : uint8_t { kAllreduce = 0, kAllgather = 1, kBroadcast = 2, kMessage = 3 };

// A chunk's bytes: a string it owns, or a view into a buffer that `owner` keeps alive (a
// received ZeroMQ frame), so a received chunk is read where it landed, not copied first.
// Copies share the bytes; they are never changed once made.
class Payload {
 public:
  Payload() = default;
  Payload(std::string text)  // NOLINT: implicit, a chunk's bytes are often made as text
      : owner_(std::make_shared<std::string>(std::move(text))) {
    const auto* s = static_cast<const std::string*>(owner_.get());
    data_ = s->data();
    size_ = s->size();
    owns_string_ = true;
  }
  Payload(const char* data, size_t size, std::shared_ptr<const void> owner)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_, size_}; }
  // The bytes as an owned string: moved out when this payload holds the only reference to
  // its own string (a chunk about to be sent), copied otherwise.
  std::string Release() && {
    if (owns_string_ && owner_.use_count() == 1) {
      std::string out = std::move(*static_cast<std::string*>(const_cast<void*>(owner_.get())));
      *this = Payload();
      return out;
    }
    return std::string(view());
  }
  friend bool operator==(const Payload& a, const Payload& b) { return a.view() == b.view(); }

 private:
  std::shared_ptr<const void> owner_;
  const char* data_ = nullptr;
  size_t size_ = 0;
  bool owns_string_ = false;
};

struct Chunk {
  uint64_t generation = 0;  // the ring's membership generation (elastic rings); 0 = first
  uint64_t op = 0;          // operation number: every rank numbers its calls alike (SPMD)
  OpKind kind = OpKind::kAllreduce;
  uint8_t phase = 0;    // all-reduce: 0 reduce-scatter, 1 all-gather; others 0
  uint32_t step = 0;    // ring step within the phase
  uint32_t block = 0;   // the segment (all-reduce) or the rank's block (all-gather) it is from
  uint32_t index = 0;   // chunk index within that segment or block
  WireType wire = WireType::kFloat32;
  Payload bytes;        // the chunk's elements in `wire` format
};

}  // namespace fedmesh::collective
