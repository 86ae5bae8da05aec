// Random-k sparsifier: keeps k = ceil(ratio * n) coordinates drawn uniformly without
// replacement (Floyd's algorithm on a seeded xoshiro256**), and scales the kept values by
// n / k so the decoded vector is unbiased: E[decoded] = x over the seed. The index section
// is just the 64-bit seed; the decoder draws the same indices from it.
// Thread-safety: immutable; RandomKIndices is a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/codec/sparsify_ratio.h"
#include "core/codec/stage.h"

namespace fedmesh::codec {

// k distinct indices in [0, n), increasing, drawn from `seed`. REQUIRES: k <= n < 2^32.
void RandomKIndices(uint64_t n, uint64_t k, uint64_t seed, std::vector<uint32_t>* indices);

class RandKSparsifier final : public RatioSparsifier {
 public:
  // REQUIRES: 0 < ratio <= 1 (Chain::Parse checks it).
  explicit RandKSparsifier(double ratio) : RatioSparsifier("randk", ratio) {}
  bool unbiased() const override { return true; }
  uint64_t MaxIndexBytes(uint64_t /*n*/) const override { return 8; }
  Status Select(std::span<const float> x, uint64_t seed, ByteWriter* out,
                std::vector<float>* values) const override;
  Status WriteIndices(std::span<const uint32_t> indices, ByteWriter* out) const override;
  Status ReadIndices(ByteReader* in, uint64_t n, std::vector<uint32_t>* indices) const override;
};

}  // namespace fedmesh::codec
