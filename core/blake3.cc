#include "core/blake3.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

#include "core/check.h"

namespace fedmesh {
namespace {

static_assert(std::endian::native == std::endian::little,
              "BLAKE3 words are little-endian; the lane kernel loads them as host words");

constexpr size_t kBlockLen = 64;
constexpr size_t kChunkLen = 1024;
constexpr size_t kBlocksPerChunk = kChunkLen / kBlockLen;
// Largest subtree hashed in one go (chunks, a power of two): its parents are then compressed
// 16 at a time in lanes too, and only one parent per subtree is left to the scalar loop.
constexpr size_t kMaxSubtreeChunks = 256;

// Domain flags of the specification, section 2.1.
constexpr uint32_t kChunkStart = 1, kChunkEnd = 2, kParent = 4, kRoot = 8;

constexpr uint32_t kIv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

// The quarter-round and the seven-round compression, written once for any word type: a
// uint32_t (the scalar path: chunk tails, parents above a subtree) or a GCC vector of lanes
// (one chunk or one parent per lane). `always_inline` so each kernel below compiles them
// with its own instruction set.
// x = (x ^ y) rotated right by n. Through references: a vector returned by value outside
// its instruction set would change the ABI (-Wpsabi), even when always inlined.
template <typename W>
[[gnu::always_inline]] inline void XorRotr(W& x, const W& y, int n) {
  const W t = x ^ y;
  x = (t >> n) | (t << (32 - n));
}

template <typename W>
[[gnu::always_inline]] inline void G(W* v, int a, int b, int c, int d, const W& mx, const W& my) {
  v[a] = v[a] + v[b] + mx;
  XorRotr<W>(v[d], v[a], 16);
  v[c] = v[c] + v[d];
  XorRotr<W>(v[b], v[c], 12);
  v[a] = v[a] + v[b] + my;
  XorRotr<W>(v[d], v[a], 8);
  v[c] = v[c] + v[d];
  XorRotr<W>(v[b], v[c], 7);
}

// Message word order of each round: the permutation applied r times, so no words move.
constexpr int kSchedule[7][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8},
    {3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1},
    {10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6},
    {12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4},
    {9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7},
    {11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13},
};

// v: the 16-word state, set up by the caller; m: the block's 16 words.
template <typename W>
[[gnu::always_inline]] inline void Rounds(W* v, const W* m) {
#pragma GCC unroll 7
  for (int r = 0; r < 7; ++r) {
    const int* s = kSchedule[r];
    G<W>(v, 0, 4, 8, 12, m[s[0]], m[s[1]]);
    G<W>(v, 1, 5, 9, 13, m[s[2]], m[s[3]]);
    G<W>(v, 2, 6, 10, 14, m[s[4]], m[s[5]]);
    G<W>(v, 3, 7, 11, 15, m[s[6]], m[s[7]]);
    G<W>(v, 0, 5, 10, 15, m[s[8]], m[s[9]]);
    G<W>(v, 1, 6, 11, 12, m[s[10]], m[s[11]]);
    G<W>(v, 2, 7, 8, 13, m[s[12]], m[s[13]]);
    G<W>(v, 3, 4, 9, 14, m[s[14]], m[s[15]]);
  }
}

// The compression function on one block, keeping the first 8 output words (all that a
// chaining value or a 32-byte digest needs).
void Compress(const uint32_t cv[8], const uint8_t block[kBlockLen], uint32_t block_len,
              uint64_t counter, uint32_t flags, uint32_t out[8]) {
  uint32_t m[16];
  std::memcpy(m, block, kBlockLen);
  uint32_t v[16] = {cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7],
                    kIv[0], kIv[1], kIv[2], kIv[3], static_cast<uint32_t>(counter),
                    static_cast<uint32_t>(counter >> 32), block_len, flags};
  Rounds<uint32_t>(v, m);
  for (int i = 0; i < 8; ++i) out[i] = v[i] ^ v[i + 8];
}

void ParentCv(const uint32_t left[8], const uint32_t right[8], uint32_t flags, uint32_t out[8]) {
  uint8_t block[kBlockLen];
  std::memcpy(block, left, 32);
  std::memcpy(block + 32, right, 32);
  Compress(kIv, block, kBlockLen, 0, kParent | flags, out);
}

// GCC/Clang vectors of 32-bit lanes (an alias template cannot carry vector_size).
template <int kLanes>
struct LaneVector;
template <>
struct LaneVector<4> {
  typedef uint32_t Type __attribute__((vector_size(16)));
};
template <>
struct LaneVector<8> {
  typedef uint32_t Type __attribute__((vector_size(32)));
};
template <>
struct LaneVector<16> {
  typedef uint32_t Type __attribute__((vector_size(64)));
};

// Transposes 16 rows of 16 words in place (r[i][c] <-> r[c][i]): for each bit b, rows i and
// j = i | 2^b swap their column blocks of width 2^b, which swaps bit b of the row and
// column indices; four bits, 64 two-vector shuffles (vpermt2d with AVX-512).
#define FM_B3_SWAP(V0, V1, LO, HI)                      \
  {                                                     \
    const auto t0 = __builtin_shufflevector(V0, V1, LO); \
    const auto t1 = __builtin_shufflevector(V0, V1, HI); \
    V0 = t0;                                            \
    V1 = t1;                                            \
  }
#define FM_B3_B0_LO 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define FM_B3_B0_HI 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define FM_B3_B1_LO 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define FM_B3_B1_HI 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define FM_B3_B2_LO 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define FM_B3_B2_HI 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define FM_B3_B3_LO 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define FM_B3_B3_HI 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
template <typename V>
[[gnu::always_inline]] inline void Transpose16(V* r) {
  for (int i = 0; i < 16; ++i) {
    if ((i & 1) == 0) FM_B3_SWAP(r[i], r[i | 1], FM_B3_B0_LO, FM_B3_B0_HI);
  }
  for (int i = 0; i < 16; ++i) {
    if ((i & 2) == 0) FM_B3_SWAP(r[i], r[i | 2], FM_B3_B1_LO, FM_B3_B1_HI);
  }
  for (int i = 0; i < 16; ++i) {
    if ((i & 4) == 0) FM_B3_SWAP(r[i], r[i | 4], FM_B3_B2_LO, FM_B3_B2_HI);
  }
  for (int i = 0; i < 16; ++i) {
    if ((i & 8) == 0) FM_B3_SWAP(r[i], r[i | 8], FM_B3_B3_LO, FM_B3_B3_HI);
  }
}
// The same for 8 rows of 8 words (the AVX2 kernel: a block is two such halves).
#define FM_B3_8_B0_LO 0, 8, 2, 10, 4, 12, 6, 14
#define FM_B3_8_B0_HI 1, 9, 3, 11, 5, 13, 7, 15
#define FM_B3_8_B1_LO 0, 1, 8, 9, 4, 5, 12, 13
#define FM_B3_8_B1_HI 2, 3, 10, 11, 6, 7, 14, 15
#define FM_B3_8_B2_LO 0, 1, 2, 3, 8, 9, 10, 11
#define FM_B3_8_B2_HI 4, 5, 6, 7, 12, 13, 14, 15
template <typename V>
[[gnu::always_inline]] inline void Transpose8(V* r) {
  for (int i = 0; i < 8; ++i) {
    if ((i & 1) == 0) FM_B3_SWAP(r[i], r[i | 1], FM_B3_8_B0_LO, FM_B3_8_B0_HI);
  }
  for (int i = 0; i < 8; ++i) {
    if ((i & 2) == 0) FM_B3_SWAP(r[i], r[i | 2], FM_B3_8_B1_LO, FM_B3_8_B1_HI);
  }
  for (int i = 0; i < 8; ++i) {
    if ((i & 4) == 0) FM_B3_SWAP(r[i], r[i | 4], FM_B3_8_B2_LO, FM_B3_8_B2_HI);
  }
}
#undef FM_B3_SWAP

// Hashes `n` (<= kLanes) inputs of `blocks` blocks each, laid out one after another from
// `in`, one input per lane: input i gets counter `counter + i` when `per_input_counter`
// (chunks), else `counter` (parents); its first block `start_flags`, its last `end_flags`.
// out[8 * i .. 8 * i + 7] receives input i's chaining value. Lanes past `n` hash input 0
// again, so no byte past the inputs is read.
template <int kLanes>
[[gnu::always_inline]] inline void HashManyLanes(const uint8_t* in, size_t n, size_t blocks,
                                                 uint64_t counter, bool per_input_counter,
                                                 uint32_t flags, uint32_t start_flags,
                                                 uint32_t end_flags, uint32_t* out) {
  using V = typename LaneVector<kLanes>::Type;
  const size_t stride = blocks * kBlockLen;
  const uint8_t* lane_in[kLanes];
  V lo{}, hi{};
  for (int i = 0; i < kLanes; ++i) {
    const size_t src = static_cast<size_t>(i) < n ? static_cast<size_t>(i) : 0;
    lane_in[i] = in + src * stride;
    const uint64_t c = counter + (per_input_counter ? src : 0);
    lo[i] = static_cast<uint32_t>(c);
    hi[i] = static_cast<uint32_t>(c >> 32);
  }
  V h[8];
  for (int k = 0; k < 8; ++k) h[k] = V{} + kIv[k];
  for (size_t b = 0; b < blocks; ++b) {
    // Transpose: word j of every lane's block into vector j.
    V m[16];
    if constexpr (kLanes == 16) {
      for (int i = 0; i < 16; ++i) std::memcpy(&m[i], lane_in[i] + b * kBlockLen, kBlockLen);
      Transpose16<V>(m);
    } else if constexpr (kLanes == 8) {
      // Words 0-7 of each lane in m[0..7], words 8-15 in m[8..15], then each half transposed.
      for (int i = 0; i < 8; ++i) {
        std::memcpy(&m[i], lane_in[i] + b * kBlockLen, 32);
        std::memcpy(&m[8 + i], lane_in[i] + b * kBlockLen + 32, 32);
      }
      Transpose8<V>(m);
      Transpose8<V>(m + 8);
    } else {
      alignas(64) uint32_t words[16][kLanes];
      for (int i = 0; i < kLanes; ++i) {
        uint32_t w[16];
        std::memcpy(w, lane_in[i] + b * kBlockLen, kBlockLen);
        for (int j = 0; j < 16; ++j) words[j][i] = w[j];
      }
      std::memcpy(m, words, sizeof(m));
    }
    const uint32_t f =
        flags | (b == 0 ? start_flags : 0) | (b + 1 == blocks ? end_flags : 0);
    V v[16] = {h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7],
               V{} + kIv[0], V{} + kIv[1], V{} + kIv[2], V{} + kIv[3],
               lo, hi, V{} + static_cast<uint32_t>(kBlockLen), V{} + f};
    Rounds<V>(v, m);
    for (int k = 0; k < 8; ++k) h[k] = v[k] ^ v[k + 8];
  }
  for (size_t i = 0; i < n; ++i) {
    for (int k = 0; k < 8; ++k) out[8 * i + k] = h[k][i];
  }
}

using HashManyFn = void (*)(const uint8_t*, size_t, size_t, uint64_t, bool, uint32_t, uint32_t,
                            uint32_t, uint32_t*);

struct LaneKernel {
  HashManyFn fn;
  size_t lanes;
  const char* name;
};

void HashManyPortable(const uint8_t* in, size_t n, size_t blocks, uint64_t counter, bool inc,
                      uint32_t flags, uint32_t start, uint32_t end, uint32_t* out) {
  HashManyLanes<4>(in, n, blocks, counter, inc, flags, start, end, out);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void HashManyAvx2(const uint8_t* in, size_t n, size_t blocks,
                                                  uint64_t counter, bool inc, uint32_t flags,
                                                  uint32_t start, uint32_t end, uint32_t* out) {
  HashManyLanes<8>(in, n, blocks, counter, inc, flags, start, end, out);
}

__attribute__((target("avx512f"))) void HashManyAvx512(const uint8_t* in, size_t n,
                                                       size_t blocks, uint64_t counter, bool inc,
                                                       uint32_t flags, uint32_t start,
                                                       uint32_t end, uint32_t* out) {
  HashManyLanes<16>(in, n, blocks, counter, inc, flags, start, end, out);
}
#endif

// The widest kernel the CPU runs, capped by FEDMESH_BLAKE3_KERNEL ("avx2" or "portable").
LaneKernel PickKernel() {
  const char* env = std::getenv("FEDMESH_BLAKE3_KERNEL");
  const std::string_view cap = env != nullptr ? env : "";
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (cap.empty() && __builtin_cpu_supports("avx512f")) return {HashManyAvx512, 16, "avx512"};
  if (cap != "portable" && __builtin_cpu_supports("avx2")) return {HashManyAvx2, 8, "avx2"};
#endif
  return {HashManyPortable, 4, "portable"};
}

const LaneKernel& Kernel() {
  static const LaneKernel kernel = PickKernel();
  return kernel;
}

// The chaining value of `chunks` (a power of two, <= kMaxSubtreeChunks) whole chunks from
// `in`, the first being chunk number `counter`: chunks in lanes, then each level of parents
// in lanes, down to one. Never the root: the caller always keeps at least one byte back.
void SubtreeCv(const uint8_t* in, size_t chunks, uint64_t counter, uint32_t out[8]) {
  const LaneKernel& k = Kernel();
  alignas(64) uint32_t cvs[kMaxSubtreeChunks * 8];
  for (size_t done = 0; done < chunks; done += k.lanes) {
    const size_t n = std::min(k.lanes, chunks - done);
    k.fn(in + done * kChunkLen, n, kBlocksPerChunk, counter + done, true, 0, kChunkStart,
         kChunkEnd, cvs + 8 * done);
  }
  // Each parent's block is its two children's chaining values, adjacent in `cvs`, so a level
  // is `count / 2` one-block inputs read in place; results overwrite the front of `cvs`.
  for (size_t count = chunks; count > 1; count /= 2) {
    for (size_t done = 0; done < count / 2; done += k.lanes) {
      const size_t n = std::min(k.lanes, count / 2 - done);
      alignas(64) uint32_t level[16 * 8];
      k.fn(reinterpret_cast<const uint8_t*>(cvs + 16 * done), n, 1, 0, false, kParent, 0, 0,
           level);
      std::memcpy(cvs + 8 * done, level, n * 32);
    }
  }
  std::memcpy(out, cvs, 32);
}

}  // namespace

Blake3::Blake3() { std::copy(std::begin(kIv), std::end(kIv), chunk_cv_.begin()); }

const char* Blake3::Kernel() { return fedmesh::Kernel().name; }

void Blake3::AddChunkBytes(const uint8_t* data, size_t len) {
  chunk_len_ += len;
  while (len > 0) {
    // The buffered block is compressed only once more bytes arrive: it may be the last.
    if (block_len_ == kBlockLen) {
      Compress(chunk_cv_.data(), block_.data(), kBlockLen, chunks_done_,
               blocks_compressed_ == 0 ? kChunkStart : 0, chunk_cv_.data());
      ++blocks_compressed_;
      block_len_ = 0;
    }
    const size_t take = std::min(len, kBlockLen - block_len_);
    std::memcpy(block_.data() + block_len_, data, take);
    block_len_ += take;
    data += take;
    len -= take;
  }
}

void Blake3::FinishChunk() {
  uint32_t cv[8];
  Compress(chunk_cv_.data(), block_.data(), kBlockLen, chunks_done_,
           kChunkEnd | (blocks_compressed_ == 0 ? kChunkStart : 0), cv);
  PushSubtree(cv, 0);
  std::copy(std::begin(kIv), std::end(kIv), chunk_cv_.begin());
  block_.fill(0);
  block_len_ = blocks_compressed_ = chunk_len_ = 0;
}

// Adds the chaining value of 2^level chunks starting at chunk chunks_done_ (a multiple of
// 2^level): merges it with every stacked subtree of its size, as adding 2^level to the count
// carries through the count's set bits.
void Blake3::PushSubtree(const uint32_t cv_in[8], unsigned level) {
  uint32_t cv[8];
  std::memcpy(cv, cv_in, 32);
  chunks_done_ += uint64_t{1} << level;
  for (uint64_t t = chunks_done_ >> level; (t & 1) == 0; t >>= 1) {
    FM_CHECK_GT(stack_len_, 0u);
    ParentCv(stack_[--stack_len_].data(), cv, 0, cv);
  }
  FM_CHECK_LT(stack_len_, stack_.size());
  std::memcpy(stack_[stack_len_++].data(), cv, 32);
}

void Blake3::Update(std::span<const uint8_t> data) {
  FM_CHECK(!finished_);
  const uint8_t* p = data.data();
  size_t n = data.size();
  while (n > 0) {
    // A full chunk is finished only now that more bytes follow: the last one may be the root.
    if (chunk_len_ == kChunkLen) FinishChunk();
    if (chunk_len_ == 0 && n > kChunkLen) {
      // Whole chunks straight from the caller's memory, leaving at least one byte back: the
      // biggest power-of-two subtree that fits and starts at a multiple of its size.
      size_t chunks = std::bit_floor(std::min((n - 1) / kChunkLen, kMaxSubtreeChunks));
      while ((chunks_done_ & (chunks - 1)) != 0) chunks /= 2;
      uint32_t cv[8];
      SubtreeCv(p, chunks, chunks_done_, cv);
      PushSubtree(cv, static_cast<unsigned>(std::countr_zero(chunks)));
      p += chunks * kChunkLen;
      n -= chunks * kChunkLen;
      continue;
    }
    const size_t take = std::min(n, kChunkLen - chunk_len_);
    AddChunkBytes(p, take);
    p += take;
    n -= take;
  }
}

void Blake3::Update(std::string_view data) {
  Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
}

Blake3Digest Blake3::Finish() {
  FM_CHECK(!finished_);
  finished_ = true;
  // The open chunk (at least one byte, or the empty input's one empty block), then one parent
  // per stacked subtree from the smallest up; the last compression gets the root flag.
  uint32_t cv[8];
  uint8_t block[kBlockLen] = {};
  std::memcpy(block, block_.data(), block_len_);
  uint32_t flags = kChunkEnd | (blocks_compressed_ == 0 ? kChunkStart : 0);
  const uint32_t* input_cv = chunk_cv_.data();
  uint32_t block_len = static_cast<uint32_t>(block_len_);
  uint64_t counter = chunks_done_;
  uint8_t parent_block[kBlockLen];
  for (size_t i = stack_len_; i > 0; --i) {
    Compress(input_cv, block, block_len, counter, flags, cv);
    std::memcpy(parent_block, stack_[i - 1].data(), 32);
    std::memcpy(parent_block + 32, cv, 32);
    std::memcpy(block, parent_block, kBlockLen);
    input_cv = kIv;
    block_len = kBlockLen;
    counter = 0;
    flags = kParent;
  }
  Compress(input_cv, block, block_len, counter, flags | kRoot, cv);
  Blake3Digest digest;
  std::memcpy(digest.data(), cv, 32);
  return digest;
}

Blake3Digest Blake3::Hash(std::span<const uint8_t> data) {
  Blake3 h;
  h.Update(data);
  return h.Finish();
}

Blake3Digest Blake3::Hash(std::string_view data) {
  return Hash(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
}

}  // namespace fedmesh
