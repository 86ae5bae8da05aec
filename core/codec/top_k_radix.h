// The steps of the radix select that the CUDA top-k (core/cuda/cuda_codec_kernels.cu) runs,
// written once so the host tests can run the same steps one element at a time and compare
// them with SelectTopK (core/codec/top_k.h) on ties, zeros and subnormals.
//
// The kept set is SelectTopK's: order the coordinates by (magnitude key descending, index
// ascending) and keep the first k. Equivalently, with T the k-th largest key (counting
// repeats) and m = k - #{key > T}: keep every key > T and the m lowest indices with key ==
// T. T is found digit by digit, most significant first, over the 31 key bits in three
// passes of 11, 10 and 10 bits; each pass histograms the keys that match the digits fixed
// so far and picks the digit where the count from the top reaches the number still needed.
// The output slot of a kept coordinate is then #{key > T before it} + min(#{key == T
// before it}, m): one prefix count over the vector, no sort.
//
// C++17 and no CUDA headers: nvcc compiles it as part of .cu files (CUDA_STANDARD 17).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "core/codec/float_bits.h"
#include "core/host_device.h"

namespace fedmesh::codec {

inline constexpr int kRadixPasses = 3;
// Digits of pass 0 at or above this hold only infinities and NaNs (kNonFiniteKey >> 20).
inline constexpr uint32_t kRadixNonFiniteDigit = kNonFiniteKey >> 20;

// Lowest key bit of the pass's digit: bits 20..30, 10..19, 0..9.
FM_HD constexpr int RadixShift(int pass) { return pass == 0 ? 20 : (pass == 1 ? 10 : 0); }
// Digits (histogram bins) of the pass: 2^11, 2^10, 2^10.
FM_HD constexpr uint32_t RadixDigits(int pass) { return pass == 0 ? 2048u : 1024u; }
FM_HD inline uint32_t RadixDigit(uint32_t key, int pass) {
  return (key >> RadixShift(pass)) & (RadixDigits(pass) - 1);
}
// Whether `key` has the digits the passes before `pass` fixed in `prefix`.
FM_HD inline bool RadixInPrefix(uint32_t key, uint32_t prefix, int pass) {
  if (pass == 0) return true;
  const int high = RadixShift(pass - 1);  // everything from the previous digit up is fixed
  return (key >> high) == (prefix >> high);
}

// The search's state between passes. Starts as {k, 0, 0, 1}; after the last pass prefix is
// T, need is m (1 <= m <= #{key == T}) and above is #{key > T} = k - m.
struct RadixState {
  uint64_t need;    // keys still to take among those matching prefix
  uint64_t above;   // keys known to be kept because a fixed digit is larger
  uint32_t prefix;  // the digits fixed so far, in place
  uint32_t ok;      // 0: the histogram held fewer than `need` keys (non-finite input)
};

FM_HD inline RadixState RadixStart(uint64_t k) { return RadixState{k, 0, 0, 1}; }

// Scanning a pass's digits from the largest down, with `before` keys (matching the prefix)
// in the digits above `digit` and `count` in it: whether the needed key lies in this digit.
// True for exactly one digit when the histogram holds at least `need` keys.
FM_HD inline bool RadixCrosses(uint64_t before, uint64_t count, uint64_t need) {
  return before < need && need <= before + count;
}
// Fixes `digit` for the pass (the one RadixCrosses chose).
FM_HD inline void RadixTake(RadixState* s, int pass, uint32_t digit, uint64_t before) {
  s->prefix |= digit << RadixShift(pass);
  s->need -= before;
  s->above += before;
}

// Prefix counts are packed two in a uint64: #{key > T} in the high half, #{key == T} in the
// low half; neither total exceeds n < 2^32 (a sparsifier's limit), so sums never carry.
FM_HD inline uint64_t TopKClassCount(uint32_t key, uint32_t t) {
  return key > t ? (uint64_t{1} << 32) : (key == t ? uint64_t{1} : uint64_t{0});
}

inline constexpr uint64_t kTopKNotKept = ~uint64_t{0};

// The output slot of a coordinate with `key`, given the packed counts of the coordinates
// before it (TopKClassCount summed over lower indices), or kTopKNotKept.
FM_HD inline uint64_t TopKSlot(uint32_t key, uint32_t t, uint64_t m, uint64_t before) {
  const uint64_t gt = before >> 32, eq = before & 0xFFFFFFFFu;
  if (key > t) return gt + (eq < m ? eq : m);
  if (key == t && eq < m) return gt + eq;
  return kTopKNotKept;
}

}  // namespace fedmesh::codec
