#include "core/wire/chunk_frame.h"

#include <cstring>

#include "core/check.h"

namespace fedmesh::wire {
namespace {

constexpr uint32_t kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5;

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

uint8_t* PutVarint(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

// Reads a varint at [*p, end); false when truncated or longer than 10 bytes.
bool GetVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  uint64_t out = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*p >= end) return false;
    const uint8_t b = *(*p)++;
    out |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *v = out;
      return true;
    }
  }
  return false;
}

// Skips one field of `wire_type`; false when malformed.
bool Skip(const uint8_t** p, const uint8_t* end, uint32_t wire_type) {
  uint64_t v = 0;
  switch (wire_type) {
    case kVarint:
      return GetVarint(p, end, &v);
    case kFixed64:
      if (end - *p < 8) return false;
      *p += 8;
      return true;
    case kLen:
      if (!GetVarint(p, end, &v) || v > static_cast<uint64_t>(end - *p)) return false;
      *p += v;
      return true;
    case kFixed32:
      if (end - *p < 4) return false;
      *p += 4;
      return true;
    default:
      return false;  // groups are not used by fedmesh.proto
  }
}

}  // namespace

std::vector<uint8_t> WriteChunkFrame(std::span<const uint8_t> header, uint64_t transfer_id,
                                     uint32_t index, uint32_t count,
                                     std::span<const uint8_t> data) {
  // proto3 leaves out scalar fields equal to 0 and empty bytes.
  size_t chunk = 0;
  if (transfer_id != 0) chunk += 1 + VarintSize(transfer_id);
  if (index != 0) chunk += 1 + VarintSize(index);
  if (count != 0) chunk += 1 + VarintSize(count);
  if (!data.empty()) chunk += 1 + VarintSize(data.size()) + data.size();
  const size_t size = 1 + VarintSize(header.size()) + header.size() + 2 + VarintSize(chunk) + chunk;
  // Everything but the data is written into `out` sized for it alone, then the data appended
  // into the reserved rest: no zero-fill of the data's (fresh) pages before the copy.
  std::vector<uint8_t> out;
  out.reserve(size);
  out.resize(size - data.size());
  uint8_t* p = out.data();
  *p++ = (1 << 3) | kLen;  // header = 1
  p = PutVarint(p, header.size());
  if (!header.empty()) std::memcpy(p, header.data(), header.size());
  p += header.size();
  p = PutVarint(p, (16 << 3) | kLen);  // chunk = 16: a two-byte tag
  p = PutVarint(p, chunk);
  if (transfer_id != 0) {
    *p++ = (1 << 3) | kVarint;
    p = PutVarint(p, transfer_id);
  }
  if (index != 0) {
    *p++ = (2 << 3) | kVarint;
    p = PutVarint(p, index);
  }
  if (count != 0) {
    *p++ = (3 << 3) | kVarint;
    p = PutVarint(p, count);
  }
  if (!data.empty()) {
    *p++ = (4 << 3) | kLen;
    p = PutVarint(p, data.size());
    FM_CHECK(p == out.data() + out.size());
    out.insert(out.end(), data.begin(), data.end());
  }
  FM_CHECK_EQ(out.size(), size);
  return out;
}

std::optional<ChunkFrameView> ParseChunkFrame(std::span<const uint8_t> frame) {
  ChunkFrameView v;
  const uint8_t* p = frame.data();
  const uint8_t* end = p + frame.size();
  while (p < end) {
    uint64_t tag = 0;
    if (!GetVarint(&p, end, &tag)) return std::nullopt;
    const uint32_t field = static_cast<uint32_t>(tag >> 3), type = static_cast<uint32_t>(tag & 7);
    if ((field == 1 || field == 16) && type == kLen) {
      uint64_t len = 0;
      if (!GetVarint(&p, end, &len) || len > static_cast<uint64_t>(end - p)) return std::nullopt;
      const uint8_t* sub = p;
      p += len;
      if (field == 1) {  // the last occurrence wins, as protobuf merges a repeated message
        v.header = {sub, static_cast<size_t>(len)};
        v.has_header = true;
        continue;
      }
      v.has_chunk = true;
      const uint8_t* q = sub;
      while (q < p) {
        uint64_t ctag = 0, value = 0;
        if (!GetVarint(&q, p, &ctag)) return std::nullopt;
        const uint32_t cf = static_cast<uint32_t>(ctag >> 3), ct = static_cast<uint32_t>(ctag & 7);
        if (((cf >= 1 && cf <= 3) || cf == 5) && ct == kVarint) {
          if (!GetVarint(&q, p, &value)) return std::nullopt;
          if (cf == 1) v.transfer_id = value;
          if (cf == 2) v.index = static_cast<uint32_t>(value);
          if (cf == 3) v.count = static_cast<uint32_t>(value);
          if (cf == 5) v.detached_bytes = value;
        } else if (cf == 4 && ct == kLen) {
          if (!GetVarint(&q, p, &value) || value > static_cast<uint64_t>(p - q)) return std::nullopt;
          v.data = {q, static_cast<size_t>(value)};
          q += value;
        } else if (!Skip(&q, p, ct)) {
          return std::nullopt;
        }
      }
      continue;
    }
    if (!Skip(&p, end, type)) return std::nullopt;
  }
  return v;
}

}  // namespace fedmesh::wire
