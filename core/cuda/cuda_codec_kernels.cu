// Kernels of the CUDA codecs (see cuda_codec_kernels.h for the contract, top_k_radix.h for
// the top-k algorithm, int8_math.h for the int8 arithmetic). Every index is 64-bit where it
// can exceed 2^31; every write into a k- or m-sized buffer is bounds-checked, so a
// non-finite input (whose encoding is refused after Wait) never writes out of bounds.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include "core/codec/float_bits.h"
#include "core/codec/int8_math.h"
#include "core/codec/top_k_radix.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_codec_kernels.h"

// The int8 scales of tiny blocks are subnormal; flushing them would change the bytes.
#if defined(__USE_FAST_MATH__)
#error "core/cuda/cuda_codec_kernels.cu must not be built with --use_fast_math"
#endif

namespace fedmesh::cuda {
namespace {

using codec::kNonFiniteKey;
using codec::MagnitudeKey;
using codec::RadixState;

constexpr int kThreads = 256;         // histogram, non-finite search, int8, top-k tiles
constexpr int kSelectThreads = 1024;  // the one block that scans a histogram
constexpr int kTileItems = 16;        // consecutive elements per thread in a top-k tile
constexpr uint64_t kTile = uint64_t{kThreads} * kTileItems;

// Device scratch of fixed size, one allocation.
struct Small {
  uint32_t hist[codec::kRadixPasses][codec::RadixDigits(0)];  // pass p uses RadixDigits(p)
  struct Tail {
    RadixState state;
    unsigned long long first_non_finite;
  } tail;
};

struct MaxU32 {
  __device__ uint32_t operator()(uint32_t a, uint32_t b) const { return a > b ? a : b; }
};

__device__ inline uint64_t GlobalThread() {
  return uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
}
__device__ inline uint64_t GridThreads() { return uint64_t{gridDim.x} * blockDim.x; }

__global__ void __launch_bounds__(kThreads)
    FindNonFiniteKernel(const float* __restrict__ x, uint64_t n, unsigned long long* first) {
  unsigned long long mine = kNoIndex;
  for (uint64_t i = GlobalThread(); i < n; i += GridThreads()) {
    if (MagnitudeKey(x[i]) >= kNonFiniteKey && i < mine) mine = i;
  }
  if (mine != kNoIndex) atomicMin(first, mine);
}

__global__ void TopKInitKernel(RadixState* state, uint64_t k) { *state = codec::RadixStart(k); }

// Histogram of the pass's digit over the keys that match the prefix, privatised in shared
// memory. Pass 0 also records non-finite values and leaves them out: a refused input must
// not steer the search into their digits.
template <int kPass>
__global__ void __launch_bounds__(kThreads)
    RadixHistogramKernel(const float* __restrict__ x, uint64_t n, const RadixState* state,
                         uint32_t* hist, unsigned long long* first_non_finite) {
  constexpr uint32_t kDigits = codec::RadixDigits(kPass);
  __shared__ uint32_t local[kDigits];
  const RadixState s = *state;
  if (!s.ok) return;  // the same for every thread of the grid
  for (uint32_t d = threadIdx.x; d < kDigits; d += blockDim.x) local[d] = 0;
  __syncthreads();
  unsigned long long bad = kNoIndex;
  for (uint64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const uint32_t key = MagnitudeKey(x[i]);
    if (kPass == 0 && key >= kNonFiniteKey) {
      if (i < bad) bad = i;
      continue;
    }
    if (codec::RadixInPrefix(key, s.prefix, kPass)) {
      atomicAdd(&local[codec::RadixDigit(key, kPass)], 1u);
    }
  }
  if (bad != kNoIndex) atomicMin(first_non_finite, bad);
  __syncthreads();
  for (uint32_t d = threadIdx.x; d < kDigits; d += blockDim.x) {
    if (local[d] != 0) atomicAdd(&hist[d], local[d]);
  }
}

// One block: scans the pass's histogram from the largest digit down and fixes the digit
// where the count reaches `need` (codec::RadixCrosses). Thread t holds the digits
// kDigits - 1 - (t * kPer + r), r < kPer, so thread order is descending digit order and an
// exclusive scan of the per-thread sums gives each thread its `before`.
template <int kPass>
__global__ void __launch_bounds__(kSelectThreads)
    RadixSelectKernel(const uint32_t* hist, RadixState* state) {
  constexpr uint32_t kDigits = codec::RadixDigits(kPass);
  static_assert(kDigits % kSelectThreads == 0, "whole digits per thread");
  constexpr int kPer = static_cast<int>(kDigits / kSelectThreads);
  using Scan = cub::BlockScan<unsigned long long, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int found;
  // Every thread reads the state before the barriers below; only the winner writes it,
  // after them.
  const RadixState s = *state;
  if (!s.ok) return;  // the same for every thread
  if (threadIdx.x == 0) found = 0;
  __syncthreads();
  unsigned long long count[kPer];
  unsigned long long sum = 0;
  for (int r = 0; r < kPer; ++r) {
    count[r] = hist[kDigits - 1 - (threadIdx.x * kPer + r)];
    sum += count[r];
  }
  unsigned long long before = 0;
  Scan(scan_storage).ExclusiveSum(sum, before);
  for (int r = 0; r < kPer; ++r) {
    const uint32_t digit = kDigits - 1 - (threadIdx.x * kPer + r);
    if (codec::RadixCrosses(before, count[r], s.need)) {
      RadixState t = s;
      codec::RadixTake(&t, kPass, digit, before);
      *state = t;
      found = 1;
    }
    before += count[r];
  }
  __syncthreads();
  if (threadIdx.x == 0 && found == 0) state->ok = 0;
}

// Packed (#{key > T}, #{key == T}) of each tile of kTile elements.
__global__ void __launch_bounds__(kThreads)
    TopKCountKernel(const float* __restrict__ x, uint64_t n, const RadixState* state,
                    unsigned long long* tile_counts) {
  using Reduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename Reduce::TempStorage reduce_storage;
  const RadixState s = *state;
  const uint64_t base = uint64_t{blockIdx.x} * kTile + uint64_t{threadIdx.x} * kTileItems;
  unsigned long long c = 0;
  if (s.ok) {
    for (int j = 0; j < kTileItems; ++j) {
      const uint64_t i = base + j;
      if (i < n) c += codec::TopKClassCount(MagnitudeKey(x[i]), s.prefix);
    }
  }
  c = Reduce(reduce_storage).Sum(c);
  if (threadIdx.x == 0) tile_counts[blockIdx.x] = c;
}

// Writes each kept coordinate to its slot (codec::TopKSlot): the tile's offset from the
// scan of tile counts, plus the counts before it inside the tile (thread t holds elements
// t * kTileItems .. + kTileItems - 1, so a block scan of per-thread counts orders them).
__global__ void __launch_bounds__(kThreads)
    TopKScatterKernel(const float* __restrict__ x, uint64_t n, const RadixState* state,
                      const unsigned long long* tile_offsets, uint64_t k, uint32_t* indices,
                      float* values) {
  using Scan = cub::BlockScan<unsigned long long, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const RadixState s = *state;
  if (!s.ok) return;  // the same for every thread
  const uint64_t base = uint64_t{blockIdx.x} * kTile + uint64_t{threadIdx.x} * kTileItems;
  float v[kTileItems];
  unsigned long long c = 0;
  for (int j = 0; j < kTileItems; ++j) {
    const uint64_t i = base + j;
    v[j] = i < n ? x[i] : 0.0f;
    if (i < n) c += codec::TopKClassCount(MagnitudeKey(v[j]), s.prefix);
  }
  unsigned long long before = 0;
  Scan(scan_storage).ExclusiveSum(c, before);
  before += tile_offsets[blockIdx.x];
  for (int j = 0; j < kTileItems; ++j) {
    const uint64_t i = base + j;
    if (i >= n) break;
    const uint32_t key = MagnitudeKey(v[j]);
    const uint64_t slot = codec::TopKSlot(key, s.prefix, s.need, before);
    if (slot < k) {  // also false for kTopKNotKept
      indices[slot] = static_cast<uint32_t>(i);
      values[slot] = v[j];
    }
    before += codec::TopKClassCount(key, s.prefix);
  }
}

// Int8Quantizer::Encode: one CUDA block per scale block at a time (grid-stride over scale
// blocks); the bit-pattern max, then the codes, with the CPU's operations (int8_math.h).
__global__ void __launch_bounds__(kThreads)
    Int8Kernel(const float* __restrict__ x, uint64_t m, uint32_t block, uint64_t blocks,
               uint8_t* section, unsigned long long* first_non_finite) {
  using Reduce = cub::BlockReduce<uint32_t, kThreads>;
  __shared__ typename Reduce::TempStorage reduce_storage;
  __shared__ uint32_t block_amax;
  float* scales = reinterpret_cast<float*>(section);  // offset 0 of a cudaMalloc buffer
  int8_t* codes = reinterpret_cast<int8_t*>(section + codec::Int8CodesOffset(m, block));
  unsigned long long bad = kNoIndex;
  for (uint64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const uint64_t begin = b * block;
    const uint64_t len = m - begin < block ? m - begin : uint64_t{block};
    uint32_t amax = 0;
    for (uint64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const uint32_t key = MagnitudeKey(x[begin + j]);
      if (key >= kNonFiniteKey && begin + j < bad) bad = begin + j;
      amax = key > amax ? key : amax;
    }
    amax = Reduce(reduce_storage).Reduce(amax, MaxU32());  // valid in thread 0
    if (threadIdx.x == 0) block_amax = amax;
    __syncthreads();
    amax = block_amax;
    if (amax < kNonFiniteKey) {  // else the encoding is refused: write nothing
      const float amax_f = codec::FloatFromBits(amax);
      const codec::Int8BlockScale sc = codec::Int8ScaleFor(amax_f);
      const double inv_d = sc.tiny ? codec::Int8TinyInverse(amax_f) : 0.0;
      if (threadIdx.x == 0) scales[b] = sc.scale;
      for (uint64_t j = threadIdx.x; j < len; j += blockDim.x) {
        const float v = x[begin + j];
        codes[begin + j] = sc.tiny ? codec::Int8CodeTiny(v, inv_d) : codec::Int8CodeFma(v, sc.inv);
      }
    }
    __syncthreads();  // reduce_storage and block_amax are reused for the next block
  }
  if (first_non_finite != nullptr && bad != kNoIndex) atomicMin(first_non_finite, bad);
}

// The same bytes as Int8Kernel, faster for the usual blocks (128 * kVec values, default
// 256): one warp per scale block instead of one CUDA block, so the absmax is a shuffle
// reduction with no barrier; each lane loads its float4s once (16-byte loads; x must be
// 16-byte aligned), keeps them in registers for the codes and stores 4 codes at a time.
// Int8Kernel's two barriers and shared-memory reduction per 256 values held it at about a
// sixth of the device's bandwidth (bench/RESULTS.md, "GPU codecs").
template <int kVec>
__global__ void __launch_bounds__(kThreads)
    Int8WarpKernel(const float* __restrict__ x, uint64_t m, uint64_t blocks, uint8_t* section,
                   unsigned long long* first_non_finite) {
  constexpr uint64_t kBlock = 128 * kVec;
  float* scales = reinterpret_cast<float*>(section);
  int8_t* codes = reinterpret_cast<int8_t*>(section + codec::Int8CodesOffset(m, kBlock));
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = GridThreads() / 32;
  unsigned long long bad = kNoIndex;
  // The loop bound is the same for every lane of a warp, so the shuffles see all 32.
  for (uint64_t b = GlobalThread() / 32; b < blocks; b += warps) {
    const uint64_t begin = b * kBlock;
    const uint64_t len = m - begin < kBlock ? m - begin : kBlock;
    float v[kVec][4];
    uint32_t amax = 0;
#pragma unroll
    for (int r = 0; r < kVec; ++r) {
      const uint64_t j = uint64_t{128} * r + 4 * lane;  // this lane's 4 values of the block
      if (j + 4 <= len) {
        const float4 q = *reinterpret_cast<const float4*>(x + begin + j);
        v[r][0] = q.x;
        v[r][1] = q.y;
        v[r][2] = q.z;
        v[r][3] = q.w;
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[r][e] = j + e < len ? x[begin + j + e] : 0.0f;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t key = MagnitudeKey(v[r][e]);
        if (key >= kNonFiniteKey && j + e < len && begin + j + e < bad) bad = begin + j + e;
        amax = key > amax ? key : amax;  // the padding's 0.0f never raises it
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const uint32_t other = __shfl_xor_sync(0xffffffffu, amax, o);
      amax = other > amax ? other : amax;
    }
    if (amax >= kNonFiniteKey) continue;  // the encoding is refused: write nothing
    const float amax_f = codec::FloatFromBits(amax);
    const codec::Int8BlockScale sc = codec::Int8ScaleFor(amax_f);
    const double inv_d = sc.tiny ? codec::Int8TinyInverse(amax_f) : 0.0;
    if (lane == 0) scales[b] = sc.scale;
#pragma unroll
    for (int r = 0; r < kVec; ++r) {
      const uint64_t j = uint64_t{128} * r + 4 * lane;
      int8_t q[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        q[e] = sc.tiny ? codec::Int8CodeTiny(v[r][e], inv_d) : codec::Int8CodeFma(v[r][e], sc.inv);
      }
      if (j + 4 <= len) {  // 4-byte aligned: the codes start at 4 * blocks, j is a multiple of 4
        *reinterpret_cast<char4*>(codes + begin + j) = make_char4(q[0], q[1], q[2], q[3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (j + e < len) codes[begin + j + e] = q[e];
        }
      }
    }
  }
  if (first_non_finite != nullptr && bad != kNoIndex) atomicMin(first_non_finite, bad);
}

cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }

// Grid for a grid-stride loop over n elements: enough blocks to fill the device, no more.
unsigned GridFor(uint64_t n, uint64_t per_block, int sm_count, int blocks_per_sm) {
  const uint64_t want = (n + per_block - 1) / per_block;
  const uint64_t cap = static_cast<uint64_t>(sm_count) * blocks_per_sm;
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min(want, cap)));
}

template <typename T>
Status Grow(T** p, size_t* capacity, size_t count) {
  if (count <= *capacity) return Status::OK();
  // Grow by half again, so slowly growing inputs do not reallocate every call.
  const size_t want = std::max(count, *capacity + *capacity / 2);
  if (*p != nullptr) {
    const Status freed = FM_CUDA_STATUS(cudaFree(*p));  // waits for kernels using it
    // Forgotten even when the free failed: the destructor must not free it again.
    *p = nullptr;
    *capacity = 0;
    FM_RETURN_IF_ERROR(freed);
  }
  FM_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(p), want * sizeof(T)));
  *capacity = want;
  return Status::OK();
}

}  // namespace

Status CurrentCudaDevice(int* device) {
  FM_CUDA_RETURN_IF_ERROR(cudaGetDevice(device));
  return Status::OK();
}

Status CodecDeviceWorkspace::Create(void* stream, std::unique_ptr<CodecDeviceWorkspace>* out) {
  std::unique_ptr<CodecDeviceWorkspace> w(new CodecDeviceWorkspace());
  int device = 0;
  FM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  FM_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&w->sm_count_, cudaDevAttrMultiProcessorCount, device));
  if (stream != nullptr) {
    w->stream_ = stream;
  } else {
    cudaStream_t s = nullptr;
    FM_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&s));
    w->stream_ = s;
    w->own_stream_ = true;
  }
  FM_CUDA_RETURN_IF_ERROR(cudaMalloc(&w->small_, sizeof(Small)));
  *out = std::move(w);
  return Status::OK();
}

CodecDeviceWorkspace::~CodecDeviceWorkspace() {
  // Errors are ignored: at process exit the runtime may already be gone. cudaFree waits
  // for kernels still using the memory.
  for (void* p : {small_, static_cast<void*>(kept_indices_), static_cast<void*>(kept_values_),
                  static_cast<void*>(section_), static_cast<void*>(tile_counts_),
                  static_cast<void*>(scan_temp_)}) {
    if (p != nullptr) cudaFree(p);
  }
  if (own_stream_) cudaStreamDestroy(S(stream_));
}

Status CodecDeviceWorkspace::Begin() {
  topk_k_ = 0;
  // Every launch is checked with cudaGetLastError(), which also returns a failure an
  // earlier runtime call on this thread left behind, e.g. Grow's cudaMalloc running out of
  // memory in a previous Encode (already returned as that call's Status): clear it so the
  // next launch is not failed for it. Context (sticky) errors survive this.
  (void)cudaGetLastError();
  Small* small = static_cast<Small*>(small_);
  FM_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(&small->tail.first_non_finite, 0xFF, sizeof(unsigned long long), S(stream_)));
  return Status::OK();
}

Status CodecDeviceWorkspace::EnqueueFindNonFinite(const float* x, uint64_t n) {
  Small* small = static_cast<Small*>(small_);
  FindNonFiniteKernel<<<GridFor(n, kThreads * 8, sm_count_, 8), kThreads, 0, S(stream_)>>>(
      x, n, &small->tail.first_non_finite);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::OK();
}

Status CodecDeviceWorkspace::EnqueueTopK(const float* x, uint64_t n, uint64_t k) {
  if (k == 0 || k > n || n > 0xFFFFFFFFull) {
    return Status::Internal("CUDA top-k called with k = " + std::to_string(k) +
                            " of n = " + std::to_string(n) + "; REQUIRES 1 <= k <= n < 2^32");
  }
  const uint64_t tiles = (n + kTile - 1) / kTile;  // <= 2^20
  FM_RETURN_IF_ERROR(Grow(&kept_indices_, &kept_indices_cap_, k));
  FM_RETURN_IF_ERROR(Grow(&kept_values_, &kept_values_cap_, k));
  FM_RETURN_IF_ERROR(Grow(&tile_counts_, &tile_counts_cap_, 2 * tiles));  // counts, offsets
  unsigned long long* counts = tile_counts_;
  unsigned long long* offsets = tile_counts_ + tiles;
  size_t scan_bytes = 0;
  FM_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, counts, offsets,
                                                        static_cast<int>(tiles), S(stream_)));
  FM_RETURN_IF_ERROR(Grow(&scan_temp_, &scan_temp_cap_, std::max<size_t>(scan_bytes, 1)));
  topk_k_ = k;

  Small* small = static_cast<Small*>(small_);
  RadixState* state = &small->tail.state;
  cudaStream_t st = S(stream_);
  FM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(small->hist, 0, sizeof(small->hist), st));
  TopKInitKernel<<<1, 1, 0, st>>>(state, k);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const unsigned grid = GridFor(n, kThreads * 16, sm_count_, 8);
  RadixHistogramKernel<0>
      <<<grid, kThreads, 0, st>>>(x, n, state, small->hist[0], &small->tail.first_non_finite);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  RadixSelectKernel<0><<<1, kSelectThreads, 0, st>>>(small->hist[0], state);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  RadixHistogramKernel<1><<<grid, kThreads, 0, st>>>(x, n, state, small->hist[1], nullptr);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  RadixSelectKernel<1><<<1, kSelectThreads, 0, st>>>(small->hist[1], state);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  RadixHistogramKernel<2><<<grid, kThreads, 0, st>>>(x, n, state, small->hist[2], nullptr);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  RadixSelectKernel<2><<<1, kSelectThreads, 0, st>>>(small->hist[2], state);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());

  TopKCountKernel<<<static_cast<unsigned>(tiles), kThreads, 0, st>>>(x, n, state, counts);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  FM_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(scan_temp_, scan_bytes, counts, offsets,
                                                        static_cast<int>(tiles), st));
  TopKScatterKernel<<<static_cast<unsigned>(tiles), kThreads, 0, st>>>(x, n, state, offsets, k,
                                                                       kept_indices_, kept_values_);
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::OK();
}

Status CodecDeviceWorkspace::EnqueueInt8(const float* x, uint64_t m, uint32_t block,
                                         bool record_non_finite) {
  if (m == 0 || block == 0) {
    return Status::Internal("CUDA int8 called with m = " + std::to_string(m) +
                            ", block = " + std::to_string(block) + "; REQUIRES m >= 1, block >= 1");
  }
  const uint64_t blocks = codec::Int8BlockCount(m, block);
  FM_RETURN_IF_ERROR(Grow(&section_, &section_cap_, codec::Int8CodesOffset(m, block) + m));
  Small* small = static_cast<Small*>(small_);
  unsigned long long* first = record_non_finite ? &small->tail.first_non_finite : nullptr;
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (aligned && (block == 128 || block == 256 || block == 512 || block == 1024)) {
    constexpr uint64_t kWarps = kThreads / 32;  // scale blocks per CUDA block and pass
    const unsigned grid = GridFor(blocks, kWarps, sm_count_, 8);
    switch (block) {
      case 128:
        Int8WarpKernel<1><<<grid, kThreads, 0, S(stream_)>>>(x, m, blocks, section_, first);
        break;
      case 256:
        Int8WarpKernel<2><<<grid, kThreads, 0, S(stream_)>>>(x, m, blocks, section_, first);
        break;
      case 512:
        Int8WarpKernel<4><<<grid, kThreads, 0, S(stream_)>>>(x, m, blocks, section_, first);
        break;
      default:
        Int8WarpKernel<8><<<grid, kThreads, 0, S(stream_)>>>(x, m, blocks, section_, first);
        break;
    }
  } else {
    const unsigned grid = GridFor(blocks, 1, sm_count_, 32);
    Int8Kernel<<<grid, kThreads, 0, S(stream_)>>>(x, m, block, blocks, section_, first);
  }
  FM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::OK();
}

Status CodecDeviceWorkspace::Wait(uint64_t* first_non_finite, bool* select_ok) {
  Small::Tail tail;
  const Small* small = static_cast<const Small*>(small_);
  FM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&tail, &small->tail, sizeof(tail), cudaMemcpyDeviceToHost, S(stream_)));
  FM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(S(stream_)));
  *first_non_finite = tail.first_non_finite;
  // After the last pass, #{key > T} + m is k by construction; checked all the same.
  *select_ok =
      topk_k_ == 0 ||
      (tail.state.ok != 0 && tail.state.above + tail.state.need == topk_k_ && tail.state.need >= 1);
  return Status::OK();
}

Status CodecDeviceWorkspace::CopyToHost(const void* device_src, void* host_dst, size_t bytes) {
  if (bytes == 0) return Status::OK();
  FM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, S(stream_)));
  FM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(S(stream_)));
  return Status::OK();
}

}  // namespace fedmesh::cuda
