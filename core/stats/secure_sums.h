// The additive part of federated statistics as one vector of words for secure
// aggregation (SecAgg+ sums words in Z_2^32): under [secagg] the aggregator learns the
// federation's counts, sums, sums of squares, histograms and label counts, never one
// site's. Each value is a two's-complement fixed-point integer (kSecureFractionBits
// fractional bits, 128 bits in all) cut into 16-bit limbs, one per 32-bit word, so that the
// words of up to 65,536 sites add without carrying out of a word and the total decodes
// exactly: the sum of the sites' encodings is the encoding of their sum (to 2^-44, an
// exactness plain float coding with its per-value rounding and clipping cannot give).
// Values whose magnitude exceeds 2^83 (~1e25) cannot be encoded.
// Layout (SecureSumLayout): per feature count, sum, sum of squares, histogram rows, then
// `bins` histogram counts; then the label counts; then the rows.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace fedmesh {

inline constexpr int kSecureFractionBits = 44;
inline constexpr size_t kSecureLimbs = 8;                 // 16-bit limbs per value: 128 bits
inline constexpr uint64_t kMaxSecureSumSites = 65536;     // limbs of this many sites fit a word

struct SecureSumLayout {
  size_t features = 0;
  uint32_t bins = 0;
  size_t classes = 0;
  size_t values() const { return features * (4 + bins) + classes + 1; }
  size_t words() const { return values() * kSecureLimbs; }
};

// A site's (or, decoded, the federation's) additive statistics in the layout's shape.
struct SecureSums {
  std::vector<double> count, sum, sum_sq, histogram_rows;  // per feature
  std::vector<std::vector<double>> histogram;              // per feature, `bins` counts
  std::vector<double> label_counts;
  double rows = 0.0;
};

// Zeros of `layout`'s shape (a site that withholds contributes these).
SecureSums ZeroSums(const SecureSumLayout& layout);

// The words of `sums`. InvalidArgument when a shape differs from the layout or a value is
// not finite or too large to encode.
Result<std::vector<uint32_t>> EncodeSecureSums(const SecureSums& sums, const SecureSumLayout& layout);

// The values the summed `words` encode. InvalidArgument when their number is not the
// layout's.
Result<SecureSums> DecodeSecureSums(std::span<const uint32_t> words, const SecureSumLayout& layout);

}  // namespace fedmesh
