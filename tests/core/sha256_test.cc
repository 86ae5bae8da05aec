// SHA-256 against the FIPS 180-4 / NIST example vectors, lengths around the 64-byte block
// and padding boundaries (reference digests from Python's hashlib), and incremental
// hashing with every split of the input.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

namespace fedmesh {
namespace {

std::string Hex(std::string_view data) { return Sha256Hex(Sha256::Hash(data)); }

TEST(Sha256KnownAnswer, EmptyString) {
  EXPECT_EQ(Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256KnownAnswer, Abc) {
  EXPECT_EQ(Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256KnownAnswer, FourHundredFortyEightBitMessage) {
  EXPECT_EQ(Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256KnownAnswer, EightHundredNinetySixBitMessage) {
  EXPECT_EQ(Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                "klmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256KnownAnswer, OneMillionA) {
  const std::string a(1000000, 'a');
  EXPECT_EQ(Hex(a), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The same million bytes fed in 1,000 pieces of 1,000.
  Sha256 h;
  for (int i = 0; i < 1000; ++i) h.Update(std::string_view(a).substr(0, 1000));
  EXPECT_EQ(Sha256Hex(h.Finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// A megabyte of varied bytes (digest from Python's hashlib), through whichever compression
// function this CPU uses; ctest runs these tests again with FEDMESH_SHA256_PORTABLE=1.
TEST(Sha256KnownAnswer, AMegabyteOfVariedBytes) {
  std::vector<uint8_t> d(1000003);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(((i * i * 7 + i * 3 + 11) >> 3) & 255);
  EXPECT_EQ(Sha256Hex(Sha256::Hash(d)),
            "0be135c92f04595645bbccaabefb4e18933d1a770620a600807dde8583ce9c97");
  std::cout << "[ info ] SHA extensions " << (Sha256::UsesShaExtensions() ? "used" : "not used")
            << "\n";
}

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

// 55 and 56 straddle the one-block padding limit, 63/64/65 the block size.
TEST(Sha256KnownAnswer, BlockAndPaddingBoundaries) {
  const std::pair<size_t, const char*> cases[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {127, "a8d23e75d936f303d248888d9b165ee543f4cbafcad3c9dd2a79bd84faa11d07"},
      {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"},
      {1000, "1e9bc38cbf860b9ec31918b065f9b52476c549a782e0e7990bed8ce3868d2371"},
  };
  for (const auto& [n, want] : cases) {
    EXPECT_EQ(Sha256Hex(Sha256::Hash(Pattern(n))), want) << "length " << n;
  }
}

TEST(Sha256, EverySplitGivesTheOneShotDigest) {
  const std::vector<uint8_t> data = Pattern(200);
  const Sha256Digest want = Sha256::Hash(data);
  for (size_t a = 0; a <= data.size(); a += 3) {
    for (size_t b = a; b <= data.size(); b += 5) {
      Sha256 h;
      h.Update(std::span(data).subspan(0, a));
      h.Update(std::span(data).subspan(a, b - a));
      h.Update(std::span(data).subspan(b));
      ASSERT_EQ(h.Finish(), want) << "split at " << a << ", " << b;
    }
  }
}

TEST(Sha256, OneChangedBitChangesTheDigest) {
  std::vector<uint8_t> data = Pattern(300);
  const Sha256Digest before = Sha256::Hash(data);
  data[150] ^= 0x01;
  EXPECT_NE(Sha256::Hash(data), before);
}

}  // namespace
}  // namespace fedmesh
