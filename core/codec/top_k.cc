#include "core/codec/top_k.h"

#include <algorithm>
#include <cstring>

#include "core/codec/checks.h"
#include "core/codec/float_bits.h"
#include "core/codec/sparsify_ratio.h"

namespace fedmesh::codec {
namespace {

constexpr uint32_t kBuckets = 1u << 15;  // top 16 bits of |x|'s pattern, sign cleared
constexpr uint32_t kNonFiniteBucket = kNonFiniteKey >> 16;  // exponent all ones: inf / NaN

// The index section: the first index, then the gaps, as LEB128 varints. `visit(j)` runs
// for each index in the same loop (Select gathers the values there: the loads of x then
// overlap the byte writing).
template <typename Visit>
void AppendIndexGaps(std::span<const uint32_t> idx, ByteWriter* out, const Visit& visit) {
  std::vector<uint8_t>* buf = out->buffer();
  const size_t start = buf->size();
  buf->resize(start + 5 * idx.size());
  uint8_t* p = buf->data() + start;
  uint32_t prev = 0;
  for (size_t j = 0; j < idx.size(); ++j) {
    uint32_t gap = idx[j] - prev;
    prev = idx[j];
    while (gap >= 0x80) {
      *p++ = static_cast<uint8_t>(gap | 0x80);
      gap >>= 7;
    }
    *p++ = static_cast<uint8_t>(gap);
    visit(j);
  }
  buf->resize(static_cast<size_t>(p - buf->data()));
}

}  // namespace

Status SelectTopK(std::span<const float> x, uint64_t k, std::vector<uint32_t>* indices) {
  const size_t n = x.size();
  indices->clear();
  if (k == 0) return CheckFinite(x, "topk");
  // Pass 1: histogram of the top bits. Four interleaved histograms: consecutive values
  // often share a bucket, and one histogram would serialise on its counter.
  std::vector<uint32_t> hist(4 * kBuckets, 0);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++hist[0 * kBuckets + (MagnitudeKey(x[i + 0]) >> 16)];
    ++hist[1 * kBuckets + (MagnitudeKey(x[i + 1]) >> 16)];
    ++hist[2 * kBuckets + (MagnitudeKey(x[i + 2]) >> 16)];
    ++hist[3 * kBuckets + (MagnitudeKey(x[i + 3]) >> 16)];
  }
  for (; i < n; ++i) ++hist[MagnitudeKey(x[i]) >> 16];
  for (uint32_t b = 0; b < kBuckets; ++b) {
    hist[b] += hist[kBuckets + b] + hist[2 * kBuckets + b] + hist[3 * kBuckets + b];
  }
  for (uint32_t b = kNonFiniteBucket; b < kBuckets; ++b) {
    if (hist[b] != 0) return CheckFinite(x, "topk");
  }
  if (k >= n) {
    indices->resize(n);
    for (size_t j = 0; j < n; ++j) (*indices)[j] = static_cast<uint32_t>(j);
    return Status::OK();
  }
  // The threshold bucket: everything above it is kept, `need` more come from inside it.
  uint64_t above = 0;
  uint32_t t = kNonFiniteBucket - 1;
  while (above + hist[t] < k) above += hist[t--];
  const uint64_t need = k - above;

  // Pass 2: indices above the threshold bucket (already in order) and candidates in it.
  std::vector<uint32_t> high(above);
  std::vector<uint64_t> cand(hist[t]);  // (low 16 bits of the key) << 32 | index
  size_t nh = 0, nc = 0;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t key = MagnitudeKey(x[j]);
    const uint32_t b = key >> 16;
    if (b >= t) {
      if (b > t) {
        high[nh++] = static_cast<uint32_t>(j);
      } else {
        cand[nc++] = (uint64_t{key & 0xFFFFu} << 32) | j;
      }
    }
  }
  // Largest low bits first; equal keys: lower index first.
  auto before = [](uint64_t a, uint64_t b) {
    const uint32_t ka = static_cast<uint32_t>(a >> 32), kb = static_cast<uint32_t>(b >> 32);
    return ka != kb ? ka > kb : static_cast<uint32_t>(a) < static_cast<uint32_t>(b);
  };
  if (need < cand.size()) {
    std::nth_element(cand.begin(), cand.begin() + static_cast<ptrdiff_t>(need), cand.end(),
                     before);
  }
  std::vector<uint32_t> chosen(need);
  for (uint64_t j = 0; j < need; ++j) chosen[j] = static_cast<uint32_t>(cand[j]);
  std::sort(chosen.begin(), chosen.end());
  indices->resize(k);
  std::merge(high.begin(), high.end(), chosen.begin(), chosen.end(), indices->begin());
  return Status::OK();
}

Status TopKSparsifier::Select(std::span<const float> x, uint64_t /*seed*/, ByteWriter* out,
                              std::vector<float>* values) const {
  std::vector<uint32_t> idx;
  FM_RETURN_IF_ERROR(SelectTopK(x, KeptCount(x.size()), &idx));
  values->resize(idx.size());
  float* v = values->data();
  AppendIndexGaps(idx, out, [&](size_t j) { v[j] = x[idx[j]]; });
  return Status::OK();
}

Status TopKSparsifier::WriteIndices(std::span<const uint32_t> indices, ByteWriter* out) const {
  AppendIndexGaps(indices, out, [](size_t) {});
  return Status::OK();
}

Status TopKSparsifier::ReadIndices(ByteReader* in, uint64_t n,
                                   std::vector<uint32_t>* indices) const {
  const uint64_t k = KeptCount(n);
  // Each index takes at least one byte: a short section fails before the allocation.
  if (in->remaining() < k) {
    return Status::Corruption("topk index section needs at least " + std::to_string(k) +
                              " bytes for " + std::to_string(k) + " indices but " +
                              std::to_string(in->remaining()) + " remain");
  }
  indices->resize(k);
  uint64_t pos = 0;
  for (uint64_t j = 0; j < k; ++j) {
    uint32_t gap;
    if (!in->GetVarint32(&gap)) {
      return Status::Corruption("topk index " + std::to_string(j) +
                                " is a truncated or oversized varint");
    }
    if (j > 0 && gap == 0) {
      return Status::Corruption("topk index " + std::to_string(j) +
                                " repeats the previous one; indices must be strictly increasing");
    }
    pos += gap;
    if (pos >= n) {
      return Status::Corruption("topk index " + std::to_string(j) + " is " +
                                std::to_string(pos) + " but the vector has " +
                                std::to_string(n) + " elements");
    }
    (*indices)[j] = static_cast<uint32_t>(pos);
  }
  return Status::OK();
}

}  // namespace fedmesh::codec
