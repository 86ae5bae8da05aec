// The codec fuzz targets (fuzz/codec_fuzz_targets.h) over a fixed, seeded corpus inside the
// normal test suite: valid encodings and round-trip inputs from SeedInputs, then
// deterministic mutations of them (bit flips, truncations, insertions, deletions, edge bytes
// and floats written over the payload, random payloads, changed counts). Every input must
// keep the decoder contract the targets check, and every valid encoding must decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "fuzz/codec_fuzz_targets.h"

namespace fedmesh::fuzz {
namespace {

// Mutated inputs per target: the whole suite stays within a few seconds on two cores.
constexpr int kMutations = 6000;

const FuzzTarget& TargetNamed(std::string_view name) {
  for (const FuzzTarget& t : AllTargets()) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no fuzz target " << name;
  return AllTargets()[0];
}

std::string Hex(const std::vector<uint8_t>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

// A position in the payload (or anywhere when there is none), rarely in the header.
size_t Position(const std::vector<uint8_t>& m, Rng& rng) {
  if (m.size() <= kHeaderBytes || rng.Uniform() < 0.1) return rng.UniformInt(m.size());
  return kHeaderBytes + rng.UniformInt(m.size() - kHeaderBytes);
}

std::vector<uint8_t> Mutate(std::vector<uint8_t> m, Rng& rng) {
  static constexpr uint8_t kEdgeBytes[] = {0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF};
  static constexpr float kEdgeFloats[] = {std::numeric_limits<float>::quiet_NaN(),
                                          INFINITY,
                                          -INFINITY,
                                          -1.0f,
                                          FLT_MAX,
                                          FLT_MAX / 127.0f,
                                          0x1p-149f,
                                          -0.0f,
                                          1e30f};
  const uint64_t rounds = 1 + rng.UniformInt(3);
  for (uint64_t r = 0; r < rounds; ++r) {
    switch (rng.UniformInt(9)) {
      case 0:  // bit flips
        if (m.empty()) break;
        for (uint64_t f = 1 + rng.UniformInt(4); f > 0; --f) {
          m[Position(m, rng)] ^= static_cast<uint8_t>(1u << rng.UniformInt(8));
        }
        break;
      case 1:  // truncation
        m.resize(rng.UniformInt(m.size() + 1));
        break;
      case 2: {  // insertion
        const size_t at = m.empty() ? 0 : Position(m, rng);
        for (uint64_t k = 1 + rng.UniformInt(8); k > 0; --k) {
          m.insert(m.begin() + static_cast<ptrdiff_t>(at), static_cast<uint8_t>(rng.NextU64()));
        }
        break;
      }
      case 3: {  // deletion
        if (m.empty()) break;
        const size_t at = Position(m, rng);
        const size_t len = std::min<size_t>(m.size() - at, 1 + rng.UniformInt(16));
        m.erase(m.begin() + static_cast<ptrdiff_t>(at),
                m.begin() + static_cast<ptrdiff_t>(at + len));
        break;
      }
      case 4:  // an edge byte
        if (!m.empty()) m[Position(m, rng)] = kEdgeBytes[rng.UniformInt(std::size(kEdgeBytes))];
        break;
      case 5: {  // an edge float over an aligned word of the payload (scales, norms, values)
        if (m.size() < kHeaderBytes + 4) break;
        const size_t at = kHeaderBytes + 4 * rng.UniformInt((m.size() - kHeaderBytes) / 4);
        const float v = kEdgeFloats[rng.UniformInt(std::size(kEdgeFloats))];
        std::memcpy(m.data() + at, &v, 4);
        break;
      }
      case 6: {  // random payload
        m.resize(std::min(m.size(), kHeaderBytes));
        for (uint64_t k = rng.UniformInt(513); k > 0; --k) {
          m.push_back(static_cast<uint8_t>(rng.NextU64()));
        }
        break;
      }
      case 7:  // the payload twice
        if (m.size() > kHeaderBytes) m.insert(m.end(), m.begin() + kHeaderBytes, m.end());
        break;
      default: {  // another count: off by one, the fitted count, or any
        if (m.size() < kHeaderBytes) break;
        uint16_t count = static_cast<uint16_t>(m[1] | (m[2] << 8));
        switch (rng.UniformInt(4)) {
          case 0:
            ++count;
            break;
          case 1:
            --count;
            break;
          case 2:
            count = kFitCount;
            break;
          default:
            count = static_cast<uint16_t>(rng.UniformInt(2048));
        }
        m[1] = static_cast<uint8_t>(count & 0xFF);
        m[2] = static_cast<uint8_t>(count >> 8);
      }
    }
  }
  return m;
}

TEST(CodecFuzzTargets, CoverEveryDecoderAndTheNamedChains) {
  std::vector<std::string_view> names;
  for (const FuzzTarget& t : AllTargets()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string_view>{"float32", "fp16", "bf16", "int8", "qsgd", "topk",
                                                  "randk", "zstd", "chain"}));
  const auto& chains = TargetNamed("chain").chains;
  for (std::string_view want : {"topk:0.01|int8|zstd", "randk:0.1|qsgd:4|zstd", "bf16|zstd"}) {
    EXPECT_NE(std::find(chains.begin(), chains.end(), want), chains.end()) << want;
  }
  // Too short for a header: nothing to decode, nothing to trap on.
  const uint8_t two[] = {0, 1};
  for (const FuzzTarget& t : AllTargets()) {
    EXPECT_EQ(RunInput(t, two, sizeof(two)), Outcome::kTooShort) << t.name;
    EXPECT_EQ(t.entry(two, 0), 0) << t.name;
  }
}

class CodecFuzzCorpus : public ::testing::TestWithParam<std::string_view> {};

TEST_P(CodecFuzzCorpus, ValidInputsDecodeAndMutationsKeepTheContract) {
  const FuzzTarget& target = TargetNamed(GetParam());
  size_t valid = 0;
  const std::vector<std::vector<uint8_t>> seeds = SeedInputs(target, /*seed=*/20240917, &valid);
  ASSERT_GE(valid, 20u * target.chains.size()) << "too few valid encodings to start from";

  size_t decoded = 0, encoded = 0;
  for (size_t i = 0; i < seeds.size(); ++i) {
    const Outcome o = RunInput(target, seeds[i].data(), seeds[i].size());
    ASSERT_NE(o, Outcome::kViolation)
        << "seed " << i << ": " << ViolationMessage() << "\ninput: " << Hex(seeds[i]);
    // The libFuzzer entry point itself (it traps where RunInput reports a violation).
    EXPECT_EQ(target.entry(seeds[i].data(), seeds[i].size()), 0);
    if (i < valid) {
      EXPECT_EQ(o, Outcome::kDecoded) << "valid encoding " << i << " did not decode";
      decoded += o == Outcome::kDecoded;
    } else {
      EXPECT_TRUE(o == Outcome::kEncoded || o == Outcome::kEncodeRefused) << "seed " << i;
      encoded += o == Outcome::kEncoded;
    }
  }
  EXPECT_EQ(decoded, valid);
  EXPECT_GE(encoded, (seeds.size() - valid) / 2) << "most round-trip seeds must encode";

  Rng rng(SplitMix64(std::hash<std::string_view>{}(target.name) ^ 0xF022));
  std::map<Outcome, int> outcomes;
  for (int i = 0; i < kMutations; ++i) {
    const std::vector<uint8_t> m = Mutate(seeds[rng.UniformInt(seeds.size())], rng);
    const Outcome o = RunInput(target, m.data(), m.size());
    ASSERT_NE(o, Outcome::kViolation)
        << "mutation " << i << ": " << ViolationMessage() << "\ninput: " << Hex(m);
    ++outcomes[o];
  }
  // The mutations reach the validation code (rejections), and not only that.
  EXPECT_GE(outcomes[Outcome::kRejected], kMutations / 5);
  EXPECT_GE(outcomes[Outcome::kDecoded] + outcomes[Outcome::kEncoded], kMutations / 20);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, CodecFuzzCorpus,
                         ::testing::Values("float32", "fp16", "bf16", "int8", "qsgd", "topk",
                                           "randk", "zstd", "chain"),
                         [](const ::testing::TestParamInfo<std::string_view>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace fedmesh::fuzz
