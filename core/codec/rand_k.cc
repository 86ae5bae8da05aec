#include "core/codec/rand_k.h"

#include <cmath>

#include "core/codec/checks.h"
#include "core/codec/sparsify_ratio.h"
#include "core/rng.h"

namespace fedmesh::codec {

void RandomKIndices(uint64_t n, uint64_t k, uint64_t seed, std::vector<uint32_t>* indices) {
  indices->clear();
  if (k == 0) return;
  std::vector<uint64_t> taken((n + 63) / 64, 0);
  auto test_and_set = [&](uint64_t i) {
    const uint64_t bit = uint64_t{1} << (i & 63);
    const bool was = (taken[i >> 6] & bit) != 0;
    taken[i >> 6] |= bit;
    return was;
  };
  // Floyd: for j = n-k .. n-1 take a uniform t in [0, j]; if t is taken already, take j.
  // Every k-subset is equally likely, with exactly k draws.
  Rng rng(seed);
  for (uint64_t j = n - k; j < n; ++j) {
    const uint64_t t = rng.UniformInt(j + 1);
    if (test_and_set(t)) test_and_set(j);
  }
  indices->reserve(k);
  for (uint64_t w = 0; w < taken.size(); ++w) {
    uint64_t bits = taken[w];
    while (bits != 0) {
      indices->push_back(static_cast<uint32_t>(64 * w + static_cast<uint64_t>(__builtin_ctzll(bits))));
      bits &= bits - 1;
    }
  }
}

Status RandKSparsifier::Select(std::span<const float> x, uint64_t seed, ByteWriter* out,
                               std::vector<float>* values) const {
  // The dropped values are never read again, but a non-finite one is a bug upstream.
  FM_RETURN_IF_ERROR(CheckFinite(x, "randk"));
  const uint64_t n = x.size();
  const uint64_t k = KeptCount(n);
  std::vector<uint32_t> idx;
  RandomKIndices(n, k, seed, &idx);
  out->PutU64(seed);
  const float scale = k > 0 ? static_cast<float>(static_cast<double>(n) / k) : 1.0f;
  values->resize(k);
  for (uint64_t j = 0; j < k; ++j) (*values)[j] = x[idx[j]] * scale;
  if (!AllFinite(*values)) {
    return Status::InvalidArgument("randk: a kept value times n/k = " + std::to_string(scale) +
                                   " overflows float32; scale the update down");
  }
  return Status::OK();
}

Status RandKSparsifier::WriteIndices(std::span<const uint32_t> /*indices*/,
                                     ByteWriter* /*out*/) const {
  return Status::Unimplemented(
      "randk's index section is the seed its indices are drawn from, not the indices; "
      "encode randk chains with Chain::Encode");
}

Status RandKSparsifier::ReadIndices(ByteReader* in, uint64_t n,
                                    std::vector<uint32_t>* indices) const {
  uint64_t seed = 0;
  FM_RETURN_IF_ERROR(in->GetU64(&seed, "randk seed"));
  RandomKIndices(n, KeptCount(n), seed, indices);
  return Status::OK();
}

}  // namespace fedmesh::codec
