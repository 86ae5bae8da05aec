// Helpers shared by the secure aggregation tests (tests/crypto/secagg_*_test.cc): hex
// literals, a SecureRandom that replays scripted bytes (for known-answer tests that fix
// the "random" coefficients), and Pearson's chi-square statistic.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "crypto/secagg/secure_random.h"

namespace fedmesh::secagg_test {

inline std::vector<uint8_t> Hex(std::string_view hex) {
  EXPECT_EQ(hex.size() % 2, 0u);
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint8_t>(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  }
  return out;
}

template <size_t N>
std::array<uint8_t, N> HexArray(std::string_view hex) {
  const std::vector<uint8_t> v = Hex(hex);
  std::array<uint8_t, N> out{};
  EXPECT_EQ(v.size(), N);
  std::copy_n(v.begin(), std::min(N, v.size()), out.begin());
  return out;
}

// The value of a Result that must be OK (the test fails, and gets a default T, if not).
template <typename T>
T Must(Result<T> result) {
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  if (!result.ok()) return T();
  return std::move(result).value();
}

inline std::vector<uint8_t> ToVector(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

// Hands out exactly the bytes it was given, in order; a test that asks for more fails.
class ScriptedRandom final : public SecureRandom {
 public:
  explicit ScriptedRandom(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  void Fill(std::span<uint8_t> out) override {
    ASSERT_LE(used_ + out.size(), bytes_.size()) << "ScriptedRandom ran out of bytes";
    std::copy_n(bytes_.begin() + used_, out.size(), out.begin());
    used_ += out.size();
  }
  size_t used() const { return used_; }

 private:
  std::vector<uint8_t> bytes_;
  size_t used_ = 0;
};

// Pearson's chi-square statistic of `counts` against a uniform distribution.
inline double ChiSquareUniform(const std::vector<uint64_t>& counts) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  const double expected = static_cast<double>(total) / counts.size();
  double stat = 0;
  for (uint64_t c : counts) stat += (c - expected) * (c - expected) / expected;
  return stat;
}

// Critical values of chi-square at p = 0.001 (the statistic of a truly uniform sample
// exceeds them one time in a thousand): 255 degrees of freedom (256 bins) and 11 (12).
inline constexpr double kChiSquare255Dof999 = 330.52;
inline constexpr double kChiSquare11Dof999 = 31.26;

}  // namespace fedmesh::secagg_test
