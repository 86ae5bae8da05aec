#include "fuzz/codec_fuzz_targets.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/codec/codec.h"
#include "core/codec/sparsify_ratio.h"
#include "core/rng.h"
#include "core/split.h"
#include "core/status.h"

namespace fedmesh::fuzz {
namespace {

using codec::Chain;

// Element counts a decode input can declare: the 16-bit header field, kFitCount included.
constexpr uint64_t kMaxElements = uint64_t{1} << 16;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Parameter tables. Each covers edge sizes (block / bucket 1, sizes that do not divide the
// vector, one block larger than any vector) and the defaults.
constexpr std::string_view kFloat32Chains[] = {"none"};
constexpr std::string_view kFp16Chains[] = {"fp16"};
constexpr std::string_view kBf16Chains[] = {"bf16"};
constexpr std::string_view kInt8Chains[] = {"int8:1",   "int8:2",    "int8:3",    "int8:7",
                                            "int8:16",  "int8:64",   "int8:255",  "int8:256",
                                            "int8:257", "int8:1000", "int8:4096", "int8:16777216"};
constexpr std::string_view kQsgdChains[] = {
    "qsgd:1:1",     "qsgd:1:512", "qsgd:2:3",   "qsgd:4:64",    "qsgd:4:512",     "qsgd:8:128",
    "qsgd:16:1000", "qsgd:100:7", "qsgd:127:1", "qsgd:127:512", "qsgd:3:16777216"};
constexpr std::string_view kTopKChains[] = {"topk:1e-06", "topk:0.001", "topk:0.01",  "topk:0.1",
                                            "topk:0.25",  "topk:0.5",   "topk:0.999", "topk:1"};
constexpr std::string_view kRandKChains[] = {"randk:1e-06", "randk:0.001", "randk:0.01",
                                             "randk:0.1",   "randk:0.25",  "randk:0.5",
                                             "randk:0.999", "randk:1"};
constexpr std::string_view kZstdChains[] = {"zstd:1", "zstd:3", "zstd:9"};
constexpr std::string_view kMultiChains[] = {"topk:0.01|int8|zstd",
                                             "randk:0.1|qsgd:4|zstd",
                                             "bf16|zstd",
                                             "fp16|zstd",
                                             "topk:0.1|fp16",
                                             "topk:0.05|bf16|zstd",
                                             "randk:0.5|int8:64",
                                             "randk:0.01|fp16|zstd",
                                             "qsgd:8:128|zstd:1",
                                             "int8:32|zstd",
                                             "topk:0.2|qsgd:2:16|zstd",
                                             "topk:0.3|zstd",
                                             "randk:0.3"};

constexpr FuzzTarget kTargets[] = {
    {"float32", &FuzzFloat32, kFloat32Chains}, {"fp16", &FuzzFp16, kFp16Chains},
    {"bf16", &FuzzBf16, kBf16Chains},          {"int8", &FuzzInt8, kInt8Chains},
    {"qsgd", &FuzzQsgd, kQsgdChains},          {"topk", &FuzzTopK, kTopKChains},
    {"randk", &FuzzRandK, kRandKChains},       {"zstd", &FuzzZstd, kZstdChains},
    {"chain", &FuzzChain, kMultiChains},
};

enum class Quant { kFloat32, kFp16, kBf16, kInt8, kQsgd };
enum class Sparse { kDense, kTopK, kRandK };

// A parsed chain and what the checks need to know about its stages.
struct Spec {
  Chain chain;
  Sparse sparse = Sparse::kDense;
  double ratio = 1.0;
  Quant quant = Quant::kFloat32;
  uint32_t group = 0;   // int8 block or qsgd bucket
  uint32_t levels = 0;  // qsgd
  bool compressed = false;

  bool elementwise() const {
    return quant == Quant::kFloat32 || quant == Quant::kFp16 || quant == Quant::kBf16;
  }
  // Decode(Encode(y)) == y for every y that Decode produces: the quantizer represents its
  // own outputs exactly and top-k keeps every nonzero of a vector with at most k of them.
  // (randk rescales by n / k, int8 and qsgd re-derive their scales.)
  bool fixed_point() const { return sparse != Sparse::kRandK && elementwise(); }
  // Encode(Decode(b)) == b for every b that Decode accepts.
  bool canonical() const { return sparse == Sparse::kDense && !compressed && elementwise(); }
};

uint32_t ToU32(std::string_view s) { return static_cast<uint32_t>(std::stoul(std::string(s))); }

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "codec fuzz: %s\n", why.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

// The tables above are trusted: a chain that does not parse is a bug here.
Spec MakeSpec(std::string_view text) {
  Result<Chain> parsed = Chain::Parse(text);
  if (!parsed.ok()) {
    Die("bad table entry \"" + std::string(text) + "\": " + parsed.status().ToString());
  }
  Spec s;
  s.chain = *parsed;
  for (std::string_view stage : Split(text, '|')) {
    const std::vector<std::string_view> args = Split(stage, ':');
    const std::string_view kind = args[0];
    if (kind == "topk" || kind == "randk") {
      s.sparse = kind == "topk" ? Sparse::kTopK : Sparse::kRandK;
      s.ratio = std::strtod(std::string(args[1]).c_str(), nullptr);
    } else if (kind == "fp16") {
      s.quant = Quant::kFp16;
    } else if (kind == "bf16") {
      s.quant = Quant::kBf16;
    } else if (kind == "int8") {
      s.quant = Quant::kInt8;
      s.group = args.size() > 1 ? ToU32(args[1]) : 256;
    } else if (kind == "qsgd") {
      s.quant = Quant::kQsgd;
      s.levels = ToU32(args[1]);
      s.group = args.size() > 2 ? ToU32(args[2]) : 512;
    } else if (kind == "zstd") {
      s.compressed = true;
    }
  }
  return s;
}

const Spec& SpecFor(const FuzzTarget& target, uint8_t selector) {
  // Built once (thread-safe static initialisation), read-only after.
  static const std::vector<std::vector<Spec>>* const specs = [] {
    auto* all = new std::vector<std::vector<Spec>>();
    for (const FuzzTarget& t : kTargets) {
      all->emplace_back();
      for (std::string_view text : t.chains) all->back().push_back(MakeSpec(text));
    }
    return all;
  }();
  size_t ti = 0;
  while (ti < std::size(kTargets) && kTargets[ti].name != target.name) ++ti;
  if (ti == std::size(kTargets)) Die("unknown target " + std::string(target.name));
  const std::vector<Spec>& table = (*specs)[ti];
  return table[(selector & ~kRoundTripBit) % table.size()];
}

thread_local std::string g_violation;

Outcome Violation(const Spec& spec, const std::string& what) {
  g_violation = spec.chain.name() + ": " + what;
  return Outcome::kViolation;
}

std::string Describe(float v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%a", static_cast<double>(v));
  return buf;
}

// The largest count whose maximum encoded size fits `bytes` (MaxEncodedBytes grows with
// the count).
uint64_t FitCount(const Chain& chain, size_t bytes) {
  uint64_t lo = 0, hi = kMaxElements - 1;
  if (chain.MaxEncodedBytes(0) > bytes) return 0;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (chain.MaxEncodedBytes(mid) <= bytes) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

uint64_t KeptCount(const Spec& spec, uint64_t n) {
  return spec.sparse == Sparse::kDense ? n : codec::KeptForRatio(spec.ratio, n);
}

size_t Nonzeros(std::span<const float> v) {
  return static_cast<size_t>(std::count_if(v.begin(), v.end(), [](float f) { return f != 0.0f; }));
}

Outcome CheckDecode(const Spec& spec, uint64_t n, std::span<const uint8_t> payload) {
  // NaN everywhere: an element the decoder forgets to write fails the finiteness check.
  std::vector<float> y(n, kNaN);
  const Status s = spec.chain.Decode(payload, y);
  if (!s.ok()) {
    if (s.code() != StatusCode::kCorruption) {
      return Violation(spec, "Decode of " + std::to_string(n) + " values returned " + s.ToString() +
                                 "; bad bytes must give Corruption");
    }
    return Outcome::kRejected;
  }
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      return Violation(spec, "Decode returned OK but value " + std::to_string(i) + " of " +
                                 std::to_string(n) + " is " + Describe(y[i]));
    }
  }
  if (spec.sparse != Sparse::kDense && Nonzeros(y) > KeptCount(spec, n)) {
    return Violation(spec, "Decode returned " + std::to_string(Nonzeros(y)) +
                               " nonzeros but the sparsifier keeps " +
                               std::to_string(KeptCount(spec, n)));
  }
  if (!spec.fixed_point()) return Outcome::kDecoded;
  std::vector<uint8_t> again;
  const Status e = spec.chain.Encode(y, /*seed=*/1, &again);
  if (!e.ok()) return Violation(spec, "re-encoding a decoded vector failed: " + e.ToString());
  if (spec.canonical() && !std::equal(again.begin(), again.end(), payload.begin(), payload.end())) {
    return Violation(spec, "re-encoding a decoded vector gave different bytes");
  }
  std::vector<float> z(n, kNaN);
  const Status d = spec.chain.Decode(again, z);
  if (!d.ok()) return Violation(spec, "decoding a re-encoded vector failed: " + d.ToString());
  for (size_t i = 0; i < n; ++i) {
    const bool same = spec.chain.lossless() ? std::memcmp(&y[i], &z[i], 4) == 0 : y[i] == z[i];
    if (!same) {
      return Violation(spec, "decode, encode, decode changed value " + std::to_string(i) +
                                 " from " + Describe(y[i]) + " to " + Describe(z[i]));
    }
  }
  return Outcome::kDecoded;
}

// Error bound of the float32 / fp16 / bf16 quantizers for value v (round to nearest even).
bool WithinElementwise(Quant q, float v, float y) {
  const double a = std::fabs(static_cast<double>(v));
  const double err = std::fabs(static_cast<double>(y) - v);
  switch (q) {
    case Quant::kFloat32:
      return std::memcmp(&v, &y, 4) == 0;
    case Quant::kFp16:
      return err <= (a >= 0x1p-14 ? a * 0x1p-11 : 0x1p-25);
    case Quant::kBf16:
      return err <= a * 0x1p-8 + 0x1p-134;
    default:
      return false;
  }
}

// Checks y = Decode(Encode(x)) against the documented error bounds.
Outcome CheckBounds(const Spec& spec, std::span<const float> x, std::span<const float> y) {
  const uint64_t n = x.size();
  const uint64_t k = KeptCount(spec, n);
  constexpr double kSlop = 0x1p-20;   // float rounding inside the quantizers, relative
  constexpr double kTiny = 0x1p-140;  // and absolute, for subnormal scales
  auto bad = [&](size_t i, const std::string& why) {
    return Violation(spec, "round trip of " + std::to_string(n) + " values: value " +
                               std::to_string(i) + " " + Describe(x[i]) + " decoded as " +
                               Describe(y[i]) + ", " + why);
  };
  if (spec.sparse == Sparse::kDense) {
    if (spec.elementwise()) {
      for (size_t i = 0; i < n; ++i) {
        if (!WithinElementwise(spec.quant, x[i], y[i])) return bad(i, "beyond the bound");
      }
      return Outcome::kEncoded;
    }
    // int8 / qsgd: per group of `group` values.
    for (size_t begin = 0; begin < n; begin += spec.group) {
      const size_t end = std::min<size_t>(n, begin + spec.group);
      double amax = 0.0, sum_sq = 0.0;
      for (size_t i = begin; i < end; ++i) {
        amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
        sum_sq += static_cast<double>(x[i]) * x[i];
      }
      const double norm = std::sqrt(sum_sq);
      const double bound = spec.quant == Quant::kInt8
                               ? amax / 254 * (1 + kSlop) + amax * kSlop + kTiny
                               : norm / spec.levels * (1 + kSlop) + kTiny;
      for (size_t i = begin; i < end; ++i) {
        if (std::fabs(static_cast<double>(y[i]) - x[i]) > bound) {
          return bad(i, "error beyond " + Describe(static_cast<float>(bound)));
        }
        if (y[i] != 0.0f && (y[i] > 0.0f) != (x[i] > 0.0f)) {
          return bad(i, "sign flipped");
        }
      }
    }
    return Outcome::kEncoded;
  }
  if (Nonzeros(y) > k) return bad(0, "more nonzeros than k = " + std::to_string(k));
  // The sent values: x itself for topk, x * n / k for randk (computed as Select does).
  const float scale = spec.sparse == Sparse::kRandK && k > 0
                          ? static_cast<float>(static_cast<double>(n) / static_cast<double>(k))
                          : 1.0f;
  if (spec.elementwise()) {
    for (size_t i = 0; i < n; ++i) {
      if (y[i] != 0.0f && !WithinElementwise(spec.quant, x[i] * scale, y[i])) {
        return bad(i, "beyond the bound");
      }
    }
  } else {
    // int8 / qsgd over the kept values: |y| is at most the largest kept magnitude (int8) or
    // the L2 norm of the kept values (qsgd), and keeps the sign.
    double amax = 0.0, sum_sq = 0.0;
    for (float v : x) {
      const double s = static_cast<double>(v) * scale;
      amax = std::max(amax, std::fabs(s));
      sum_sq += s * s;
    }
    const double limit = (spec.quant == Quant::kInt8 ? amax : std::sqrt(sum_sq)) * (1 + kSlop);
    for (size_t i = 0; i < n; ++i) {
      if (std::fabs(static_cast<double>(y[i])) > limit + kTiny) return bad(i, "too large");
      if (y[i] != 0.0f && (y[i] > 0.0f) != (x[i] > 0.0f)) {
        return bad(i, "sign flipped");
      }
    }
  }
  if (spec.sparse == Sparse::kTopK && spec.quant == Quant::kFloat32) {
    // Exact top-k: every nonzero of x is kept unless k larger ones are, and nothing dropped
    // is larger than anything kept.
    if (Nonzeros(y) != std::min<uint64_t>(k, Nonzeros(x))) {
      return bad(0, "top-k kept " + std::to_string(Nonzeros(y)) + " nonzeros, want " +
                        std::to_string(std::min<uint64_t>(k, Nonzeros(x))));
    }
    float min_kept = std::numeric_limits<float>::infinity(), max_dropped = 0.0f;
    size_t dropped_at = 0;
    for (size_t i = 0; i < n; ++i) {
      if (y[i] != 0.0f) {
        min_kept = std::min(min_kept, std::fabs(x[i]));
      } else if (std::fabs(x[i]) > max_dropped) {
        max_dropped = std::fabs(x[i]);
        dropped_at = i;
      }
    }
    if (max_dropped > min_kept) return bad(dropped_at, "dropped but larger than a kept value");
  }
  return Outcome::kEncoded;
}

Outcome CheckRoundTrip(const Spec& spec, std::span<const uint8_t> payload) {
  const size_t n = std::min<size_t>(payload.size() / 4, kMaxElements);
  std::vector<float> x(n);
  if (n > 0) std::memcpy(x.data(), payload.data(), 4 * n);
  // The bytes after the last whole float vary the seed.
  uint64_t seed = n;
  for (size_t i = 4 * n; i < payload.size() && i < 4 * n + 8; ++i) seed = (seed << 8) | payload[i];
  bool finite = true;
  double amax = 0.0;
  for (float v : x) {
    finite = finite && std::isfinite(v);
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(static_cast<double>(v)));
  }
  std::vector<uint8_t> bytes;
  const Status e = spec.chain.Encode(x, seed, &bytes);
  if (!e.ok() && e.code() != StatusCode::kInvalidArgument) {
    return Violation(spec, "Encode returned " + e.ToString() + "; want OK or InvalidArgument");
  }
  if (!finite) {
    if (e.ok()) return Violation(spec, "Encode accepted a non-finite value");
    return Outcome::kEncodeRefused;
  }
  if (!e.ok()) {
    // Values this small are representable by every stage, even after randk's n / k.
    const uint64_t k = KeptCount(spec, n);
    const double scale = spec.sparse == Sparse::kRandK && k > 0 ? static_cast<double>(n) / k : 1.0;
    if (amax * scale < 60000.0) {
      return Violation(
          spec, "Encode refused finite values up to " + std::to_string(amax) + ": " + e.ToString());
    }
    return Outcome::kEncodeRefused;
  }
  if (bytes.size() > spec.chain.MaxEncodedBytes(n)) {
    return Violation(spec, "Encode wrote " + std::to_string(bytes.size()) +
                               " bytes, more than MaxEncodedBytes = " +
                               std::to_string(spec.chain.MaxEncodedBytes(n)));
  }
  std::vector<float> y(n, kNaN);
  const Status d = spec.chain.Decode(bytes, y);
  if (!d.ok()) return Violation(spec, "Decode of Encode's output failed: " + d.ToString());
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(y[i])) {
      return Violation(spec, "round trip value " + std::to_string(i) + " is " + Describe(y[i]));
    }
  }
  return CheckBounds(spec, x, y);
}

int Enforce(const FuzzTarget& target, const uint8_t* data, size_t size) {
  if (RunInput(target, data, size) == Outcome::kViolation) {
    Die(std::string(target.name) + " target: " + g_violation);
  }
  return 0;
}

}  // namespace

std::span<const FuzzTarget> AllTargets() { return kTargets; }

const std::string& ViolationMessage() { return g_violation; }

Outcome RunInput(const FuzzTarget& target, const uint8_t* data, size_t size) {
  if (size < kHeaderBytes) return Outcome::kTooShort;
  const Spec& spec = SpecFor(target, data[0]);
  const std::span<const uint8_t> payload(data + kHeaderBytes, size - kHeaderBytes);
  if ((data[0] & kRoundTripBit) != 0) return CheckRoundTrip(spec, payload);
  const uint16_t count = static_cast<uint16_t>(data[1] | (data[2] << 8));
  return CheckDecode(spec, count == kFitCount ? FitCount(spec.chain, payload.size()) : count,
                     payload);
}

std::vector<uint8_t> MakeInput(uint8_t selector, uint16_t count, std::span<const uint8_t> payload) {
  std::vector<uint8_t> in(kHeaderBytes + payload.size());
  in[0] = selector;
  in[1] = static_cast<uint8_t>(count & 0xFF);
  in[2] = static_cast<uint8_t>(count >> 8);
  if (!payload.empty()) std::memcpy(in.data() + kHeaderBytes, payload.data(), payload.size());
  return in;
}

std::vector<std::vector<uint8_t>> SeedInputs(const FuzzTarget& target, uint64_t seed,
                                             size_t* valid_decodes) {
  Rng rng(seed);
  // Shapes: unit Gaussian; small with exact zeros; magnitudes over many octaves; ties; and
  // (round trips only) the formats' range edges.
  auto make = [&rng](size_t n, int shape) {
    std::vector<float> x(n);
    for (float& v : x) {
      switch (shape) {
        case 0:
          v = static_cast<float>(rng.Normal());
          break;
        case 1:
          v = rng.Uniform() < 0.3 ? 0.0f : static_cast<float>(rng.Normal(0.0, 1e-3));
          break;
        case 2:
          v = static_cast<float>((rng.Uniform() < 0.5 ? -1 : 1) * std::exp(rng.Uniform(-30, 9)));
          break;
        case 3: {
          static constexpr float kTies[] = {-1.0f, 0.0f, 0.5f, 1.0f};
          v = kTies[rng.UniformInt(4)];
          break;
        }
        default: {  // range edges of the formats, among ordinary values
          static constexpr float kEdges[] = {FLT_MAX, -FLT_MAX, 65504.0f,  -65519.99f, 0x1.FEp127f,
                                             FLT_MIN, -FLT_MIN, 0x1p-149f, 0x1p-24f,   0x1p-14f,
                                             -0.0f,   0.0f,     1.0f,      -1.0f};
          v = rng.Uniform() < 0.5 ? kEdges[rng.UniformInt(std::size(kEdges))]
                                  : static_cast<float>(rng.Normal());
        }
      }
    }
    return x;
  };
  constexpr size_t kCounts[] = {0, 1, 2, 3, 17, 100, 256, 257, 700};
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<uint8_t> bytes;
  for (size_t p = 0; p < target.chains.size(); ++p) {
    const Spec& spec = SpecFor(target, static_cast<uint8_t>(p));
    for (size_t n : kCounts) {
      for (int shape = 0; shape < 4; ++shape) {
        const std::vector<float> x = make(n, shape);
        if (!spec.chain.Encode(x, rng.NextU64(), &bytes).ok()) continue;  // e.g. fp16 range
        const bool fits = FitCount(spec.chain, bytes.size()) == n;
        inputs.push_back(MakeInput(static_cast<uint8_t>(p),
                                   fits && shape == 0 ? kFitCount : static_cast<uint16_t>(n),
                                   bytes));
      }
    }
  }
  if (valid_decodes != nullptr) *valid_decodes = inputs.size();
  for (size_t p = 0; p < target.chains.size(); ++p) {
    for (int shape = 0; shape < 5; ++shape) {
      const std::vector<float> x = make(shape == 0 ? 40 : 300, shape);
      bytes.resize(4 * x.size());
      std::memcpy(bytes.data(), x.data(), bytes.size());
      inputs.push_back(MakeInput(static_cast<uint8_t>(kRoundTripBit | p), 0, bytes));
    }
  }
  return inputs;
}

int FuzzFloat32(const uint8_t* data, size_t size) { return Enforce(kTargets[0], data, size); }
int FuzzFp16(const uint8_t* data, size_t size) { return Enforce(kTargets[1], data, size); }
int FuzzBf16(const uint8_t* data, size_t size) { return Enforce(kTargets[2], data, size); }
int FuzzInt8(const uint8_t* data, size_t size) { return Enforce(kTargets[3], data, size); }
int FuzzQsgd(const uint8_t* data, size_t size) { return Enforce(kTargets[4], data, size); }
int FuzzTopK(const uint8_t* data, size_t size) { return Enforce(kTargets[5], data, size); }
int FuzzRandK(const uint8_t* data, size_t size) { return Enforce(kTargets[6], data, size); }
int FuzzZstd(const uint8_t* data, size_t size) { return Enforce(kTargets[7], data, size); }
int FuzzChain(const uint8_t* data, size_t size) { return Enforce(kTargets[8], data, size); }

}  // namespace fedmesh::fuzz
