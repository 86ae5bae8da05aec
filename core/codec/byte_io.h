// Little-endian byte writing and bounds-checked reading for codec sections, including
// LEB128 varints (7 bits per byte, low groups first, high bit = more follows).
// Thread-safety: value types; one thread per object.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace fedmesh::codec {

// Codec byte layouts are little-endian; the float loads below copy host bytes as they are.
static_assert(std::endian::native == std::endian::little, "fedmesh codecs assume a little-endian host");

// Appends to a byte vector the caller owns.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  void PutU64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    out_->insert(out_->end(), b, b + 8);
  }
  void PutVarint(uint64_t v) {
    while (v >= 0x80) {
      out_->push_back(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    out_->push_back(static_cast<uint8_t>(v));
  }
  // Grows the output by n bytes and returns where they start.
  uint8_t* Extend(size_t n) {
    const size_t at = out_->size();
    out_->resize(at + n);
    return out_->data() + at;
  }
  std::vector<uint8_t>* buffer() { return out_; }

 private:
  std::vector<uint8_t>* out_;
};

// Reads a byte span front to back; every read checks the remaining length first.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }
  std::span<const uint8_t> Rest() const { return in_.subspan(pos_); }

  Status GetU64(uint64_t* v, const char* what) {
    if (remaining() < 8) return Short(what, 8);
    uint64_t r = 0;
    for (int i = 0; i < 8; ++i) r |= uint64_t{in_[pos_ + i]} << (8 * i);
    pos_ += 8;
    *v = r;
    return Status::OK();
  }
  // A varint of at most 5 bytes holding a value < 2^32. Inline: top-k decoding calls it
  // once per kept index.
  bool GetVarint32(uint32_t* v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      if (pos_ >= in_.size()) return false;
      const uint8_t b = in_[pos_++];
      r |= uint64_t{b & 0x7Fu} << shift;
      if ((b & 0x80) == 0) {
        if (r > 0xFFFFFFFFu) return false;
        *v = static_cast<uint32_t>(r);
        return true;
      }
    }
    return false;
  }

 private:
  Status Short(const char* what, size_t need) const {
    return Status::Corruption(std::string(what) + " needs " + std::to_string(need) +
                              " bytes at offset " + std::to_string(pos_) + " but only " +
                              std::to_string(remaining()) + " remain");
  }

  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

inline void StoreF32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace fedmesh::codec
