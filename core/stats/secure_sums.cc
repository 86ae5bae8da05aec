#include "core/stats/secure_sums.h"

#include <cmath>
#include <string>

namespace fedmesh {
namespace {

using i128 = __int128;
using u128 = unsigned __int128;

constexpr long double kScale = static_cast<long double>(uint64_t{1} << kSecureFractionBits);
constexpr long double kMaxMagnitude = 9.6714065569170334e24L;  // 2^83

// The layout's values in order, as pointers into `s` (so encode and decode share the order).
template <typename Sums, typename F>
void ForEachValue(Sums& s, const SecureSumLayout& layout, F f) {
  for (size_t j = 0; j < layout.features; ++j) {
    f(s.count[j]);
    f(s.sum[j]);
    f(s.sum_sq[j]);
    f(s.histogram_rows[j]);
    for (uint32_t b = 0; b < layout.bins; ++b) f(s.histogram[j][b]);
  }
  for (size_t c = 0; c < layout.classes; ++c) f(s.label_counts[c]);
  f(s.rows);
}

Status CheckShape(const SecureSums& s, const SecureSumLayout& l) {
  bool ok = s.count.size() == l.features && s.sum.size() == l.features &&
            s.sum_sq.size() == l.features && s.histogram_rows.size() == l.features &&
            s.histogram.size() == l.features && s.label_counts.size() == l.classes;
  for (const auto& h : s.histogram) ok = ok && h.size() == l.bins;
  if (!ok) {
    return Status::InvalidArgument("secure statistics do not have the layout's shape (" +
                                   std::to_string(l.features) + " features, " +
                                   std::to_string(l.bins) + " bins, " + std::to_string(l.classes) +
                                   " classes)");
  }
  return Status::OK();
}

}  // namespace

SecureSums ZeroSums(const SecureSumLayout& l) {
  SecureSums s;
  s.count.assign(l.features, 0.0);
  s.sum.assign(l.features, 0.0);
  s.sum_sq.assign(l.features, 0.0);
  s.histogram_rows.assign(l.features, 0.0);
  s.histogram.assign(l.features, std::vector<double>(l.bins, 0.0));
  s.label_counts.assign(l.classes, 0.0);
  return s;
}

Result<std::vector<uint32_t>> EncodeSecureSums(const SecureSums& sums, const SecureSumLayout& layout) {
  FM_RETURN_IF_ERROR(CheckShape(sums, layout));
  std::vector<uint32_t> words;
  words.reserve(layout.words());
  Status bad = Status::OK();
  ForEachValue(sums, layout, [&](const double& v) {
    if (!std::isfinite(v) || std::fabs(static_cast<long double>(v)) >= kMaxMagnitude) {
      if (bad.ok()) {
        bad = Status::InvalidArgument("a statistic is " + std::to_string(v) +
                                      "; secure sums take finite values below 2^83 in magnitude");
      }
      words.insert(words.end(), kSecureLimbs, 0);
      return;
    }
    const i128 fixed = static_cast<i128>(std::roundl(static_cast<long double>(v) * kScale));
    const u128 bits = static_cast<u128>(fixed);  // two's complement mod 2^128
    for (size_t k = 0; k < kSecureLimbs; ++k) {
      words.push_back(static_cast<uint32_t>((bits >> (16 * k)) & 0xFFFF));
    }
  });
  FM_RETURN_IF_ERROR(bad);
  return words;
}

Result<SecureSums> DecodeSecureSums(std::span<const uint32_t> words, const SecureSumLayout& layout) {
  if (words.size() != layout.words()) {
    return Status::InvalidArgument("secure statistics have " + std::to_string(words.size()) +
                                   " words; the layout has " + std::to_string(layout.words()));
  }
  SecureSums s = ZeroSums(layout);
  size_t at = 0;
  ForEachValue(s, layout, [&](double& v) {
    u128 acc = 0;
    for (size_t k = 0; k < kSecureLimbs; ++k) acc += static_cast<u128>(words[at + k]) << (16 * k);
    at += kSecureLimbs;
    v = static_cast<double>(static_cast<long double>(static_cast<i128>(acc)) / kScale);
  });
  return s;
}

}  // namespace fedmesh
