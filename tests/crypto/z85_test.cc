// Z85 codec: the ZeroMQ RFC 32 vector, byte-identical output to libzmq's encoder, and
// strict rejection of everything that is not canonical Z85 of the expected length.
#include "crypto/z85.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <array>
#include <random>
#include <string>
#include <vector>

namespace fedmesh {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Z85Test, EncodesTheRfc32TestVector) {
  const std::array<uint8_t, 8> hello = {0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B};
  EXPECT_EQ(Z85Encode(hello), "HelloWorld");
  std::array<uint8_t, 8> back{};
  ASSERT_TRUE(Z85Decode("HelloWorld", back));
  EXPECT_EQ(back, hello);
}

TEST(Z85Test, LargestGroupRoundTrips) {
  const std::array<uint8_t, 4> max = {0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(Z85Encode(max), "%nSc0");
  std::array<uint8_t, 4> back{};
  ASSERT_TRUE(Z85Decode("%nSc0", back));
  EXPECT_EQ(back, max);
}

TEST(Z85Test, MatchesLibzmqAndRoundTrips) {
  for (size_t n : {4u, 8u, 32u, 64u, 128u}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      const std::vector<uint8_t> data = RandomBytes(n, seed * 1000 + static_cast<uint32_t>(n));
      const std::string ours = Z85Encode(data);
      ASSERT_EQ(ours.size(), n / 4 * 5);
      std::string theirs(n / 4 * 5 + 1, '\0');
      ASSERT_NE(zmq_z85_encode(theirs.data(), data.data(), n), nullptr);
      theirs.resize(n / 4 * 5);
      EXPECT_EQ(ours, theirs) << "n=" << n << " seed=" << seed;

      std::vector<uint8_t> back(n);
      ASSERT_TRUE(Z85Decode(ours, back));
      EXPECT_EQ(back, data);
    }
  }
}

TEST(Z85Test, RejectsWrongLength) {
  const std::string key = Z85Encode(RandomBytes(32, 7));
  std::array<uint8_t, 32> out{};
  EXPECT_FALSE(Z85Decode(key.substr(0, 39), out));
  EXPECT_FALSE(Z85Decode(key + "0", out));
  EXPECT_FALSE(Z85Decode(key + "00000", out));
  EXPECT_FALSE(Z85Decode("", out));
  EXPECT_TRUE(Z85Decode(key, out));
}

TEST(Z85Test, RejectsCharactersOutsideTheAlphabetAndZeroesOutput) {
  const std::string key = Z85Encode(RandomBytes(32, 9));
  for (char bad : {' ', '"', '\'', ',', ';', '\\', '_', '`', '|', '~', '\t', '\0', '\x80'}) {
    for (size_t pos : {0u, 17u, 39u}) {
      std::string text = key;
      text[pos] = bad;
      std::array<uint8_t, 32> out;
      out.fill(0xaa);
      EXPECT_FALSE(Z85Decode(text, out)) << "char " << int(bad) << " at " << pos;
      EXPECT_EQ(out, (std::array<uint8_t, 32>{})) << "output must be zeroed on failure";
    }
  }
}

TEST(Z85Test, RejectsGroupsAboveTwoToThe32) {
  std::array<uint8_t, 4> out{};
  EXPECT_FALSE(Z85Decode("%nSc1", out));  // 0xffffffff + 1
  EXPECT_FALSE(Z85Decode("#####", out));  // 85^5 - 1
  EXPECT_FALSE(Z85Decode("%%%%%", out));
}

}  // namespace
}  // namespace fedmesh
