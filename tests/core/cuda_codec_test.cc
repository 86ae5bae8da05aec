// The CUDA codecs (core/cuda/cuda_codecs.h) and what they share with the CPU codecs.
// Host tests, run in every build: the int8 arithmetic of core/codec/int8_math.h and the
// radix-select steps of core/codec/top_k_radix.h, run one element at a time, reproduce the
// CPU codecs' bytes and kept sets on edge cases; Chain::EncodeParts gives Encode's bytes;
// the CPU bytes match digests taken before the device path existed; unsupported chains are
// Unimplemented. GPU tests (skipped without a device): EncodeOnDevice's bytes equal
// Chain::Encode's for many sizes, chains and value distributions, and errors match.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/codec/codec.h"
#include "core/codec/float_bits.h"
#include "core/codec/int8_math.h"
#include "core/codec/top_k.h"
#include "core/codec/top_k_radix.h"
#include "core/cuda/cuda_codecs.h"
#include "core/cuda/device_info.h"
#include "core/rng.h"
#include "tests/core/random_vector.h"
#include "core/sha256.h"

#if defined(FEDMESH_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace fedmesh::codec {
namespace {

Chain MustParse(std::string_view text) {
  auto c = Chain::Parse(text);
  EXPECT_TRUE(c.ok()) << text << ": " << c.status().ToString();
  return c.ok() ? *c : Chain();
}

// Value sets, all built from integer draws and exact float operations, so they are the
// same with every libm (the golden digests below depend on that).
std::vector<float> Uniform(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>((2.0 * rng.Uniform() - 1.0) * scale);
  return v;
}
// Bell-shaped: the sum of four uniforms.
std::vector<float> Bell(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v)
    x = static_cast<float>(rng.Uniform() + rng.Uniform() + rng.Uniform() + rng.Uniform() - 2.0);
  return v;
}
// Values drawn from five magnitudes with random signs: massive ties.
std::vector<float> SignedFrom(const float (&magnitudes)[5], size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    x = magnitudes[rng.UniformInt(5)];
    if (rng.UniformInt(2) != 0) x = -x;
  }
  return v;
}
// Five distinct magnitudes, zero among them.
std::vector<float> Ties(size_t n, uint64_t seed) {
  static constexpr float kMagnitudes[5] = {0.0f, 0.25f, 1.0f, 3.5f, 1e-3f};
  return SignedFrom(kMagnitudes, n, seed);
}
// Magnitudes from 2^-149 (subnormal) to 2^120.
std::vector<float> Wide(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    x = std::ldexp(static_cast<float>(rng.Uniform(0.5, 1.0)),
                   static_cast<int>(rng.UniformInt(270)) - 149);
    if (rng.UniformInt(2) != 0) x = -x;
  }
  return v;
}
// Exact .5 products for the rounding rule: block amax 127, so inv = 1.
std::vector<float> HalfTies(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = (i % 64 == 0) ? 127.0f : static_cast<float>(static_cast<int>(i % 254) - 127) + 0.5f;
  }
  return v;
}
// Values whose product with their block's inverse scale lies within a few float ulps of
// k + 0.5: rounding that product to float first would change the code (int8_math.h).
std::vector<float> NearTies(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  const float amax = 3.0f;
  const float inv = 127.0f / amax;
  for (size_t i = 0; i < n; ++i) {
    if (i % 256 == 0) {
      v[i] = amax;
      continue;
    }
    const float k = static_cast<float>(static_cast<int>(rng.UniformInt(253)) - 126);
    float x = (k + 0.5f) / inv;
    for (int s = static_cast<int>(rng.UniformInt(9)) - 4; s != 0; s += s > 0 ? -1 : 1) {
      x = std::nextafter(x, s > 0 ? FLT_MAX : -FLT_MAX);
    }
    v[i] = x;
  }
  return v;
}
std::vector<float> WithSignedZeros(size_t n) {
  std::vector<float> v(n, 0.0f);
  for (size_t i = 0; i < n; i += 3) v[i] = -0.0f;
  return v;
}

struct Input {
  std::string name;
  std::vector<float> values;
};

std::vector<Input> EdgeInputs() {
  std::vector<Input> in;
  in.push_back({"bell", Bell(100003, 1)});
  in.push_back({"uniform", Uniform(4099, 2)});
  in.push_back({"ties", Ties(100003, 3)});
  in.push_back({"zeros", std::vector<float>(1000, 0.0f)});
  in.push_back({"signed_zeros", WithSignedZeros(1001)});
  in.push_back({"tiny", Uniform(4099, 4, 1e-38)});  // subnormal scales, the double path
  in.push_back({"subnormal", Uniform(777, 5, 1e-40)});
  in.push_back({"huge", Uniform(513, 6, FLT_MAX)});
  in.push_back({"wide", Wide(20001, 7)});
  in.push_back({"half_ties", HalfTies(2048)});
  in.push_back({"near_ties", NearTies(65536, 8)});
  in.push_back({"one", {-2.5f}});
  {
    std::vector<float> v = Uniform(300, 9);
    v[17] = FLT_MAX;
    v[200] = -FLT_MAX;
    in.push_back({"flt_max", v});
  }
  return in;
}

// ---- int8: the shared arithmetic reproduces Int8Quantizer's bytes ----------------------

// Int8Quantizer::Encode written with the int8_math.h helpers the CUDA kernel calls, block
// by block as the kernel does. `exact`: Int8CodeExact instead of Int8CodeFma.
std::vector<uint8_t> Int8ByHelpers(std::span<const float> x, uint32_t block, bool exact) {
  const uint64_t m = x.size();
  std::vector<uint8_t> out(Int8CodesOffset(m, block) + m);
  for (uint64_t b = 0; b < Int8BlockCount(m, block); ++b) {
    const uint64_t begin = b * block;
    const uint64_t len = std::min<uint64_t>(block, m - begin);
    uint32_t amax = 0;
    for (uint64_t j = 0; j < len; ++j) amax = std::max(amax, MagnitudeKey(x[begin + j]));
    const Int8BlockScale s = Int8ScaleFor(FloatFromBits(amax));
    const double inv_d = s.tiny ? Int8TinyInverse(FloatFromBits(amax)) : 0.0;
    std::memcpy(out.data() + 4 * b, &s.scale, 4);
    for (uint64_t j = 0; j < len; ++j) {
      const float v = x[begin + j];
      const int8_t q = s.tiny ? Int8CodeTiny(v, inv_d)
                              : (exact ? Int8CodeExact(v, s.inv) : Int8CodeFma(v, s.inv));
      out[Int8CodesOffset(m, block) + begin + j] = static_cast<uint8_t>(q);
    }
  }
  return out;
}

TEST(CudaCodecHost, Int8HelpersReproduceTheCpuQuantizer) {
  for (const Input& in : EdgeInputs()) {
    for (uint32_t block : {1u, 7u, 64u, 256u, 1000u}) {
      const Chain chain = MustParse("int8:" + std::to_string(block));
      std::vector<uint8_t> cpu;
      ASSERT_TRUE(chain.Encode(in.values, 0, &cpu).ok()) << in.name;
      EXPECT_EQ(Int8ByHelpers(in.values, block, false), cpu) << in.name << " block " << block;
      EXPECT_EQ(Int8ByHelpers(in.values, block, true), cpu) << in.name << " block " << block;
    }
  }
}

TEST(CudaCodecHost, Int8ScaleEdgeCases) {
  // All-zero block: scale 0, inverse 0, every code 0.
  Int8BlockScale s = Int8ScaleFor(0.0f);
  EXPECT_EQ(s.scale, 0.0f);
  EXPECT_EQ(s.inv, 0.0f);
  EXPECT_FALSE(s.tiny);
  EXPECT_EQ(Int8CodeFma(-0.0f, s.inv), 0);
  // Tiny amax: 127 / amax overflows float, the double path takes over; the largest value
  // maps to +-127.
  const float tiny = 1e-38f;
  s = Int8ScaleFor(tiny);
  EXPECT_TRUE(s.tiny);
  EXPECT_EQ(Int8CodeTiny(tiny, Int8TinyInverse(tiny)), 127);
  EXPECT_EQ(Int8CodeTiny(-tiny, Int8TinyInverse(tiny)), -127);
  EXPECT_EQ(Int8CodeTiny(0.0f, Int8TinyInverse(tiny)), 0);
  const float sub = std::numeric_limits<float>::denorm_min();
  s = Int8ScaleFor(sub);
  EXPECT_TRUE(s.tiny);
  EXPECT_EQ(s.scale, 0.0f);  // 2^-149 / 127 rounds to zero
  EXPECT_EQ(Int8CodeTiny(sub, Int8TinyInverse(sub)), 127);
  // FLT_MAX: the codes stay within +-127.
  s = Int8ScaleFor(FLT_MAX);
  EXPECT_FALSE(s.tiny);
  EXPECT_EQ(Int8CodeFma(FLT_MAX, s.inv), 127);
  EXPECT_EQ(Int8CodeFma(-FLT_MAX, s.inv), -127);
  EXPECT_EQ(Int8CodeExact(-FLT_MAX, s.inv), -127);
  // Exact halves round to even.
  EXPECT_EQ(Int8CodeFma(2.5f, 1.0f), 2);
  EXPECT_EQ(Int8CodeFma(3.5f, 1.0f), 4);
  EXPECT_EQ(Int8CodeFma(-2.5f, 1.0f), -2);
  EXPECT_EQ(Int8CodeExact(-3.5f, 1.0f), -4);
  // Layout helpers.
  EXPECT_EQ(Int8BlockCount(257, 256), 2u);
  EXPECT_EQ(Int8CodesOffset(257, 256), 8u);
  EXPECT_EQ(Int8BlockCount(256, 256), 1u);
}

// Why the device uses __fmaf_rn: on near-ties a separately rounded product gives another
// code than the CPU's fused one. Int8CodeExact (builds without FMA) agrees with the fused.
TEST(CudaCodecHost, Int8CodesUseTheUnroundedProduct) {
  const std::vector<float> x = NearTies(65536, 11);
  const float inv = 127.0f / 3.0f;
  int separate_differs = 0;
  for (float v : x) {
    const int8_t fused = Int8CodeFma(v, inv);
    ASSERT_EQ(Int8CodeExact(v, inv), fused) << v;
    volatile float product = v * inv;  // volatile: no contraction into an FMA
    const int8_t separate = Int8Clamp((product + kInt8RoundMagic) - kInt8RoundMagic);
    separate_differs += separate != fused;
  }
  EXPECT_GT(separate_differs, 100);
}

// ---- top-k: the device's radix select, one element at a time ---------------------------

// The CUDA top-k's steps (top_k_radix.h) run sequentially: per pass a histogram of the keys
// in the prefix, non-finite keys left out as the pass-0 kernel does; the digits scanned from
// the largest, every digit tested as the select kernel's threads do; then the slots.
std::vector<uint32_t> RadixTopK(std::span<const float> x, uint64_t k) {
  RadixState s = RadixStart(k);
  for (int pass = 0; pass < kRadixPasses; ++pass) {
    std::vector<uint64_t> hist(RadixDigits(pass), 0);
    for (float v : x) {
      const uint32_t key = MagnitudeKey(v);
      if (key >= kNonFiniteKey) continue;
      if (RadixInPrefix(key, s.prefix, pass)) ++hist[RadixDigit(key, pass)];
    }
    const RadixState before_pass = s;
    uint64_t before = 0;
    int found = 0;
    for (uint32_t d = RadixDigits(pass); d-- > 0;) {
      if (RadixCrosses(before, hist[d], before_pass.need)) {
        RadixTake(&s, pass, d, before);
        ++found;
      }
      before += hist[d];
    }
    EXPECT_EQ(found, 1) << "pass " << pass;
  }
  EXPECT_EQ(s.above + s.need, k);
  EXPECT_GE(s.need, 1u);
  std::vector<uint32_t> out(k, ~0u);
  uint64_t counts = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t key = MagnitudeKey(x[i]);
    const uint64_t slot = TopKSlot(key, s.prefix, s.need, counts);
    if (slot != kTopKNotKept) {
      EXPECT_LT(slot, k);
      if (slot < k) {
        EXPECT_EQ(out[slot], ~0u) << "slot " << slot << " written twice";
        out[slot] = static_cast<uint32_t>(i);
      }
    }
    counts += TopKClassCount(key, s.prefix);
  }
  return out;
}

TEST(CudaCodecHost, RadixSelectKeepsWhatSelectTopKKeeps) {
  std::vector<Input> inputs = EdgeInputs();
  for (size_t n : {1u, 2u, 7u, 255u, 256u, 257u}) {
    inputs.push_back({"bell" + std::to_string(n), Bell(n, n)});
    inputs.push_back({"ties" + std::to_string(n), Ties(n, n)});
  }
  for (const Input& in : inputs) {
    const uint64_t n = in.values.size();
    for (uint64_t k : {uint64_t{1}, uint64_t{2}, n / 100, n / 3, n / 2, n - 1, n}) {
      if (k < 1 || k > n) continue;
      std::vector<uint32_t> cpu;
      ASSERT_TRUE(SelectTopK(in.values, k, &cpu).ok());
      EXPECT_EQ(RadixTopK(in.values, k), cpu) << in.name << " k " << k;
    }
  }
}

TEST(CudaCodecHost, RadixDigitsCoverTheKey) {
  // The three digits rebuild every key, and a key matches its own prefix at every pass.
  for (uint32_t key : {0u, 1u, 0x3FFu, 0x400u, 0x7F7FFFFFu, 0x00800000u, 0x3F800000u}) {
    uint32_t rebuilt = 0;
    for (int pass = 0; pass < kRadixPasses; ++pass) {
      EXPECT_TRUE(RadixInPrefix(key, rebuilt, pass)) << key << " pass " << pass;
      EXPECT_LT(RadixDigit(key, pass), RadixDigits(pass));
      rebuilt |= RadixDigit(key, pass) << RadixShift(pass);
    }
    EXPECT_EQ(rebuilt, key);
  }
  EXPECT_EQ(RadixDigit(kNonFiniteKey, 0), kRadixNonFiniteDigit);
  EXPECT_FALSE(RadixInPrefix(0x3F800000u, 0x3F900000u, 1));
  EXPECT_FALSE(RadixInPrefix(0x3F800400u, 0x3F800000u, 2));
  // Packed counts: n < 2^32 of each class never carries into the other.
  EXPECT_EQ(TopKSlot(5, 5, 3, (uint64_t{7} << 32) | 2), 9u);
  EXPECT_EQ(TopKSlot(5, 5, 3, (uint64_t{7} << 32) | 3), kTopKNotKept);
  EXPECT_EQ(TopKSlot(6, 5, 3, (uint64_t{7} << 32) | 9), 10u);
  EXPECT_EQ(TopKSlot(4, 5, 3, 0), kTopKNotKept);
}

// ---- Chain::EncodeParts: the layout half the device path uses --------------------------

TEST(CodecParts, EncodePartsGivesEncodesBytes) {
  const std::vector<float> x = Bell(10007, 21);
  for (const char* text : {"none", "zstd", "int8", "int8:64|zstd", "topk:0.01", "topk:0.1|int8",
                           "topk:0.01|int8|zstd", "topk:1", "topk:0.3|fp16|zstd"}) {
    const Chain chain = MustParse(text);
    std::vector<uint8_t> want, got;
    ASSERT_TRUE(chain.Encode(x, 5, &want).ok()) << text;
    std::vector<uint32_t> kept;
    std::vector<float> values = x;
    if (chain.has_sparsifier()) {
      ASSERT_TRUE(SelectTopK(x, chain.sparsifier()->KeptCount(x.size()), &kept).ok());
      values.clear();
      for (uint32_t i : kept) values.push_back(x[i]);
    }
    const Status s = chain.EncodeParts(
        x.size(), kept,
        [&](std::span<uint8_t> dst) {
          EXPECT_EQ(dst.size(), chain.quantizer().EncodedBytes(values.size()));
          return chain.quantizer().Encode(values, 0, dst.data());
        },
        &got);
    ASSERT_TRUE(s.ok()) << text << ": " << s.ToString();
    EXPECT_EQ(got, want) << text;
  }
}

TEST(CodecParts, EncodePartsChecksItsParts) {
  const Chain topk = MustParse("topk:0.5");
  auto fill = [](std::span<uint8_t> dst) {
    std::fill(dst.begin(), dst.end(), 0);
    return Status::OK();
  };
  std::vector<uint8_t> out;
  const std::vector<uint32_t> good = {1, 3}, short_kept = {1}, unsorted = {3, 1}, repeated = {2, 2},
                              beyond = {1, 4};
  EXPECT_TRUE(topk.EncodeParts(4, good, fill, &out).ok());
  EXPECT_EQ(out.size(), 2u + 8u);  // varints 1, 2; two floats
  for (const auto* kept : {&short_kept, &unsorted, &repeated, &beyond}) {
    EXPECT_EQ(topk.EncodeParts(4, *kept, fill, &out).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(MustParse("int8").EncodeParts(4, good, fill, &out).code(),
            StatusCode::kInvalidArgument);  // no sparsifier: no kept indices
  EXPECT_EQ(MustParse("randk:0.5").EncodeParts(4, good, fill, &out).code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(topk.EncodeParts(uint64_t{1} << 32, {}, fill, &out).code(),
            StatusCode::kInvalidArgument);
  const Status err = Status::Internal("device failed");
  EXPECT_EQ(topk.EncodeParts(
                4, good, [&](std::span<uint8_t>) { return err; }, &out),
            err);
}

// ---- The CPU bytes did not move --------------------------------------------------------

// One digest per input over every chain's status code and bytes. The digests were taken
// from the CPU codecs before the device path and its refactor existed (commit 19816f1,
// GCC 12, -march=x86-64-v3); zstd is left out, its output depends on the library version.
// Builds without FMA (FEDMESH_ARCH_FLAGS=-march=x86-64) now give them too; before, their
// int8 codes differed on near-ties (half_ties, near_ties).
TEST(CodecGolden, CpuBytesAreUnchanged) {
  static constexpr const char* kChains[] = {"none",
                                            "fp16",
                                            "bf16",
                                            "int8",
                                            "int8:1",
                                            "int8:64",
                                            "int8:1000",
                                            "qsgd:8",
                                            "qsgd:3:7",
                                            "topk:0.01",
                                            "topk:0.1",
                                            "topk:1",
                                            "topk:0.3|int8:64",
                                            "randk:0.1|int8",
                                            "topk:0.05|fp16"};
  struct Golden {
    const char* input;
    const char* digest;  // first 16 hex digits of the SHA-256
  };
  static constexpr Golden kGolden[] = {
      {"bell", "fde2a74e9701f74a"},         {"uniform", "a55437198652bbe0"},
      {"ties", "559b514391a9c748"},         {"zeros", "a3570c26b9c2251e"},
      {"signed_zeros", "85be35250f4912aa"}, {"tiny", "b51674d53fe6b54a"},
      {"subnormal", "0ce54bd255a354fd"},    {"huge", "c2da067ae92124f4"},
      {"wide", "c6ab8b145b0956a2"},         {"half_ties", "b4bfcd9ca9eae6fd"},
      {"near_ties", "0dbea6e431c22205"},    {"one", "155f79479fdd58f9"},
      {"flt_max", "baba3476b1e4b545"},
  };
  const std::vector<Input> inputs = EdgeInputs();
  ASSERT_EQ(inputs.size(), std::size(kGolden));
  for (size_t i = 0; i < inputs.size(); ++i) {
    Sha256 h;
    for (const char* text : kChains) {
      std::vector<uint8_t> bytes;
      const Status s = MustParse(text).Encode(inputs[i].values, 42, &bytes);
      const std::string tag =
          std::string(text) + ":" + std::to_string(static_cast<int>(s.code())) + ":";
      h.Update(tag);
      h.Update(bytes);
    }
    const Sha256Digest d = h.Finish();
    char hex[17];
    for (int j = 0; j < 8; ++j) std::snprintf(hex + 2 * j, 3, "%02x", d[j]);
    EXPECT_EQ(inputs[i].name, kGolden[i].input);
    EXPECT_EQ(std::string(hex), kGolden[i].digest) << inputs[i].name;
  }
}

}  // namespace
}  // namespace fedmesh::codec

// ---- The device path --------------------------------------------------------------------

namespace fedmesh::cuda {
namespace {

using codec::Chain;

Chain Parse(std::string_view text) {
  auto c = Chain::Parse(text);
  EXPECT_TRUE(c.ok()) << text;
  return c.ok() ? *c : Chain();
}

TEST(CudaCodecHost, UnsupportedChainsAreUnimplementedInEveryBuild) {
  std::vector<uint8_t> out;
  for (const char* text : {"randk:0.1", "randk:0.1|int8", "fp16", "bf16|zstd", "qsgd:8",
                           "topk:0.01|fp16", "topk:0.01|qsgd:4|zstd"}) {
    const Status s = EncodeOnDevice(Parse(text), nullptr, 10, 0, &out);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << text << ": " << s.ToString();
    EXPECT_NE(s.message().find("codec::Chain::Encode"), std::string::npos) << s.message();
  }
}

TEST(CudaCodecHost, SupportedChainsWithoutADeviceAreUnavailable) {
  if (CudaDeviceCount() > 0)
    GTEST_SKIP() << "a CUDA device is present: " << CudaDeviceDescription(0);
  std::vector<uint8_t> out;
  for (const char* text : {"none", "int8", "topk:0.01|int8|zstd"}) {
    const Status s = EncodeOnDevice(Parse(text), nullptr, 10, 0, &out);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << text << ": " << s.ToString();
  }
  EXPECT_EQ(CudaCodecEncoder::Create().status().code(), StatusCode::kUnavailable);
}

#if defined(FEDMESH_HAVE_CUDA)
// Device memory holding a copy of host values.
class DeviceValues {
 public:
  explicit DeviceValues(const std::vector<float>& v) {
    if (v.empty()) return;
    EXPECT_EQ(cudaMalloc(&p_, v.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceValues() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceValues(const DeviceValues&) = delete;
  DeviceValues& operator=(const DeviceValues&) = delete;
  const float* get() const { return static_cast<const float*>(p_); }

 private:
  void* p_ = nullptr;
};

// A stream of the caller's, for CudaCodecEncoder::Create.
class DeviceStream {
 public:
  DeviceStream() { EXPECT_EQ(cudaStreamCreate(&s_), cudaSuccess); }
  ~DeviceStream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  void* get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};
#else
// Without CUDA the device tests skip in SetUp; these only let them compile.
class DeviceValues {
 public:
  explicit DeviceValues(const std::vector<float>&) {}
  const float* get() const { return nullptr; }
};
class DeviceStream {
 public:
  void* get() const { return nullptr; }
};
#endif

std::vector<float> FiveMagnitudes(size_t n, uint64_t seed) {
  static constexpr float kMagnitudes[5] = {0.5f, 1.0f, 2.0f, 1e-3f, 7.25f};
  return codec::SignedFrom(kMagnitudes, n, seed);
}

// int8:128/256/512/1024 take the warp-per-block kernel, the other blocks the general one.
constexpr const char* kDeviceChains[] = {
    "none",     "int8",     "int8:64",  "topk:0.01", "topk:0.1|int8",      "topk:0.01|int8|zstd",
    "topk:1",   "zstd",     "int8:1",   "int8:7|zstd", "topk:0.3|int8:7",  "topk:0.5|int8:1000",
    "int8:128", "int8:512", "int8:1024", "int8:384",  "topk:0.1|int8:128"};

// EncodeOnDevice's bytes against Chain::Encode's, and a decode of them.
void ExpectSameBytes(const std::string& what, const std::vector<float>& x) {
  DeviceValues d(x);
  for (const char* text : kDeviceChains) {
    const Chain chain = Parse(text);
    std::vector<uint8_t> cpu, gpu;
    const Status cs = chain.Encode(x, 7, &cpu);
    const Status gs = EncodeOnDevice(chain, d.get(), x.size(), 7, &gpu);
    ASSERT_EQ(gs, cs) << what << " " << text;
    if (!cs.ok()) continue;
    ASSERT_EQ(gpu.size(), cpu.size()) << what << " " << text;
    EXPECT_TRUE(gpu == cpu) << what << " " << text << ": bytes differ";
    std::vector<float> y(x.size());
    const Status ds = chain.Decode(gpu, y);
    EXPECT_TRUE(ds.ok()) << what << " " << text << ": " << ds.ToString();
    if (chain.lossless()) {
      EXPECT_TRUE(y == x) << what << " " << text;
    }
  }
}

class CudaCodec : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason();
  }
};

TEST_F(CudaCodec, BytesEqualTheCpuCodecs) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{255}, size_t{256}, size_t{257}, size_t{100000},
                   (size_t{1} << 20) + 3}) {
    const std::string at = " n=" + std::to_string(n);
    ExpectSameBytes("normal" + at, RandomVector(n, n));
    ExpectSameBytes("five magnitudes" + at, FiveMagnitudes(n, n + 1));
    ExpectSameBytes("zeros" + at, std::vector<float>(n, 0.0f));
  }
}

// Values that do not start on a 16-byte boundary take the general kernel: same bytes.
TEST_F(CudaCodec, Int8FromAnUnalignedAddressEqualsTheCpu) {
  for (size_t n : {size_t{5}, size_t{1000}, (size_t{1} << 20) + 3}) {
    const std::vector<float> padded = RandomVector(n + 1, n);
    const std::span<const float> x(padded.data() + 1, n);
    DeviceValues d(padded);
    for (const char* text : {"int8", "int8:128", "int8:1024|zstd"}) {
      const Chain chain = Parse(text);
      std::vector<uint8_t> cpu, gpu;
      ASSERT_TRUE(chain.Encode(x, 7, &cpu).ok());
      const Status gs = EncodeOnDevice(chain, d.get() + 1, n, 7, &gpu);
      ASSERT_TRUE(gs.ok()) << text << " n=" << n << ": " << gs.ToString();
      EXPECT_TRUE(gpu == cpu) << text << " n=" << n << ": bytes differ";
    }
  }
}

TEST_F(CudaCodec, BytesEqualTheCpuCodecsOnEdgeValues) {
  for (const codec::Input& in : codec::EdgeInputs()) ExpectSameBytes(in.name, in.values);
}

TEST_F(CudaCodec, NonFiniteValuesAreRefusedLikeOnTheCpu) {
  for (size_t n : {size_t{1}, size_t{257}, size_t{100000}}) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = RandomVector(n, 3);
      x[n / 2] = bad;
      if (n > 2) x[n - 1] = std::numeric_limits<float>::quiet_NaN();  // a later one too
      DeviceValues d(x);
      for (const char* text : kDeviceChains) {
        const Chain chain = Parse(text);
        std::vector<uint8_t> cpu, gpu;
        const Status cs = chain.Encode(x, 0, &cpu);
        ASSERT_EQ(cs.code(), StatusCode::kInvalidArgument) << text;
        EXPECT_EQ(EncodeOnDevice(chain, d.get(), n, 0, &gpu), cs) << text << " n=" << n;
      }
    }
  }
}

TEST_F(CudaCodec, EmptyInputAndReusedScratch) {
  std::vector<uint8_t> cpu, gpu;
  for (const char* text : kDeviceChains) {
    const Chain chain = Parse(text);
    ASSERT_TRUE(chain.Encode({}, 0, &cpu).ok());
    ASSERT_TRUE(EncodeOnDevice(chain, nullptr, 0, 0, &gpu).ok()) << text;
    EXPECT_EQ(gpu, cpu) << text;
  }
  // One encoder over growing and shrinking inputs, on a stream of the caller's.
  DeviceStream stream;
  {
    auto enc = CudaCodecEncoder::Create(stream.get());
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    for (size_t n : {size_t{1000}, size_t{300000}, size_t{17}, size_t{300001}, size_t{1000}}) {
      const std::vector<float> x = RandomVector(n, n);
      DeviceValues d(x);
      for (const char* text : {"topk:0.01|int8|zstd", "int8:64", "topk:0.2", "none"}) {
        const Chain chain = Parse(text);
        ASSERT_TRUE(chain.Encode(x, 0, &cpu).ok());
        ASSERT_TRUE((*enc)->Encode(chain, d.get(), n, 0, &gpu).ok()) << text;
        EXPECT_TRUE(gpu == cpu) << text << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace fedmesh::cuda
