// zstd compressor: the bytes of the earlier stages as one zstd frame (level 1 .. 19,
// default 3), with the content size in the frame header. Decompression requires exactly
// one frame that declares its size, and that size within the bound the chain allows for
// the element count, so a small frame cannot expand into a memory bomb.
// Thread-safety: immutable; compression contexts are per thread.
#pragma once

#include "core/codec/stage.h"

namespace fedmesh::codec {

class ZstdCompressor final : public Compressor {
 public:
  static constexpr int kDefaultLevel = 3;
  static constexpr int kMaxLevel = 19;  // 20+ ("ultra") need far more memory on both ends
  // REQUIRES: 1 <= level <= kMaxLevel (Chain::Parse checks it).
  explicit ZstdCompressor(int level = kDefaultLevel) : level_(level) {}
  std::string name() const override { return "zstd:" + std::to_string(level_); }
  uint64_t MaxCompressedBytes(uint64_t n) const override;
  Status Compress(std::span<const uint8_t> in, std::vector<uint8_t>* out) const override;
  Status Decompress(std::span<const uint8_t> in, uint64_t max_bytes,
                    std::vector<uint8_t>* out) const override;

 private:
  int level_;
};

}  // namespace fedmesh::codec
