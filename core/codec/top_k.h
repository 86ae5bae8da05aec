// Top-k sparsifier: keeps the k = ceil(ratio * n) coordinates of largest magnitude (ties:
// the lower index), exactly, and sends their indices as LEB128 varints of the gaps:
// the first index itself, then index[i] - index[i-1] (>= 1). With ratio 0.01 most gaps
// fit one byte. The decoder rejects a zero gap, an index >= n and a varint above 2^32 - 1.
//
// Selection is a radix select on the magnitude's bit pattern (for non-negative floats the
// bit pattern orders like the value): one pass builds a histogram of the top 16 bits,
// a second collects the indices above the threshold bucket and the candidates in it, and
// only those candidates are ordered. Two streaming passes, no sort of the whole vector.
// The CUDA encoder keeps the same set with a radix select of its own (top_k_radix.h) and
// writes the index section with WriteIndices.
// Thread-safety: immutable; SelectTopK is a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/codec/sparsify_ratio.h"
#include "core/codec/stage.h"

namespace fedmesh::codec {

// The indices of the k values of largest magnitude, in increasing order; ties broken
// toward the lower index. InvalidArgument when a value is not finite.
// REQUIRES: k <= x.size() < 2^32.
Status SelectTopK(std::span<const float> x, uint64_t k, std::vector<uint32_t>* indices);

class TopKSparsifier final : public RatioSparsifier {
 public:
  // REQUIRES: 0 < ratio <= 1 (Chain::Parse checks it).
  explicit TopKSparsifier(double ratio) : RatioSparsifier("topk", ratio) {}
  bool unbiased() const override { return false; }
  uint64_t MaxIndexBytes(uint64_t n) const override { return 5 * KeptCount(n); }
  Status Select(std::span<const float> x, uint64_t seed, ByteWriter* out,
                std::vector<float>* values) const override;
  Status WriteIndices(std::span<const uint32_t> indices, ByteWriter* out) const override;
  Status ReadIndices(ByteReader* in, uint64_t n, std::vector<uint32_t>* indices) const override;
};

}  // namespace fedmesh::codec
