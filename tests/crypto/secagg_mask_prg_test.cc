// The mask PRG: RFC 8439 known answers through the exact code path the masks use (the
// appendix A.1 keystream vectors have the zero nonce and counters 0 and 1, i.e. mask words
// 0..31), the section 2.3.2 block and 2.4.2 encryption vectors through ChaCha20Keystream,
// and that expansion is one stream however it is chunked (sizes around the 4 KiB chunk),
// so that Add/Subtract/Expand/ChaCha20WordStream all agree word for word.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "crypto/secagg/mask_prg.h"
#include "crypto/sodium.h"
#include "tests/crypto/secagg_test_util.h"

namespace fedmesh {
namespace {

using secagg_test::Hex;
using secagg_test::HexArray;

std::vector<uint32_t> LeWords(const std::vector<uint8_t>& bytes) {
  std::vector<uint32_t> words(bytes.size() / 4);
  for (size_t i = 0; i < words.size(); ++i) {
    words[i] = bytes[4 * i] | bytes[4 * i + 1] << 8 | bytes[4 * i + 2] << 16 |
               static_cast<uint32_t>(bytes[4 * i + 3]) << 24;
  }
  return words;
}

class MaskPrgTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

// RFC 8439 appendix A.1, test vectors #1 and #2 (all-zero key and nonce, block counters 0
// and 1) are mask words 0..15 and 16..31 of the all-zero seed; test vector #3 (key ending
// in 01, counter 1) is words 16..31 of that seed.
TEST_F(MaskPrgTest, Rfc8439AppendixA1KeystreamThroughExpandMask) {
  const std::vector<uint8_t> block0 =
      Hex("76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
          "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586");
  const std::vector<uint8_t> block1 =
      Hex("9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed"
          "29b721769ce64e43d57133b074d839d531ed1f28510afb45ace10a1f4b794d6f");
  std::array<uint8_t, kMaskSeedSize> seed{};
  std::vector<uint32_t> mask(32);
  ExpandMask(seed, mask);
  EXPECT_EQ(std::vector<uint32_t>(mask.begin(), mask.begin() + 16), LeWords(block0));
  EXPECT_EQ(std::vector<uint32_t>(mask.begin() + 16, mask.end()), LeWords(block1));
  EXPECT_EQ(mask[0], 0xade0b876u);  // little-endian words: bytes 76 b8 e0 ad

  seed[31] = 0x01;
  ExpandMask(seed, mask);
  EXPECT_EQ(std::vector<uint32_t>(mask.begin() + 16, mask.end()),
            LeWords(Hex("3aeb5224ecf849929b9d828db1ced4dd832025e8018b8160b82284f3c949aa5a"
                        "8eca00bbb4a73bdad192b5c42f73f2fd4e273644c8b36125a64addeb006c13a0")));
}

// RFC 8439 section 2.3.2: the block function with key 00..1f, nonce
// 000000090000004a00000000 and counter 1, serialised.
TEST_F(MaskPrgTest, Rfc8439Section232Block) {
  const auto key = HexArray<32>("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
  const auto nonce = HexArray<12>("000000090000004a00000000");
  std::vector<uint8_t> block(64);
  ChaCha20Keystream(key, nonce, 1, block);
  EXPECT_EQ(block, Hex("10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
                       "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"));
}

// RFC 8439 section 2.4.2: the "sunscreen" encryption, key 00..1f, nonce
// 000000000000004a00000000, initial counter 1: plaintext XOR keystream = ciphertext.
TEST_F(MaskPrgTest, Rfc8439Section242Encryption) {
  const auto key = HexArray<32>("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
  const auto nonce = HexArray<12>("000000000000004a00000000");
  const std::string plaintext =
      "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the "
      "future, sunscreen would be it.";
  std::vector<uint8_t> stream(plaintext.size());
  ChaCha20Keystream(key, nonce, 1, stream);
  std::vector<uint8_t> ciphertext(plaintext.size());
  for (size_t i = 0; i < plaintext.size(); ++i) {
    ciphertext[i] = static_cast<uint8_t>(plaintext[i]) ^ stream[i];
  }
  EXPECT_EQ(ciphertext,
            Hex("6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0bf91b65c5524733ab"
                "8f593dabcd62b3571639d624e65152ab8f530c359f0861d807ca0dbf500d6a6156a38e088a22b6"
                "5e52bc514d16ccf806818ce91ab77937365af90bbf74a35be6b40b8eedf2785e42874d"));
}

// Sizes straddling the 1024-word chunk and the 16-word block: every expansion is a prefix
// of one keystream, and Add/Subtract apply exactly those words.
TEST_F(MaskPrgTest, ExpansionIsOneStreamAtEverySize) {
  std::array<uint8_t, kMaskSeedSize> seed{};
  for (size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<uint8_t>(3 * i + 1);
  const std::array<uint8_t, 12> zero_nonce{};
  std::vector<uint8_t> stream(4 * 5000);
  ChaCha20Keystream(seed, zero_nonce, 0, stream);
  const std::vector<uint32_t> reference = LeWords(stream);
  for (size_t n : {0u, 1u, 15u, 16u, 17u, 1023u, 1024u, 1025u, 2048u, 4999u, 5000u}) {
    std::vector<uint32_t> mask(n);
    ExpandMask(seed, mask);
    ASSERT_TRUE(std::equal(mask.begin(), mask.end(), reference.begin())) << "n = " << n;

    std::vector<uint32_t> acc(n);
    for (size_t i = 0; i < n; ++i) acc[i] = static_cast<uint32_t>(i * 2654435761u);
    const std::vector<uint32_t> original = acc;
    AddMask(seed, acc);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], original[i] + reference[i]) << i;
    SubtractMask(seed, acc);
    EXPECT_EQ(acc, original) << "n = " << n;
  }
  ChaCha20WordStream words(seed);
  for (size_t i = 0; i < 5000; ++i) ASSERT_EQ(words.Next(), reference[i]) << "word " << i;
}

TEST_F(MaskPrgTest, DifferentSeedsGiveUnrelatedMasks) {
  std::array<uint8_t, kMaskSeedSize> a{}, b{};
  b[0] = 1;
  std::vector<uint32_t> ma(1000), mb(1000);
  ExpandMask(a, ma);
  ExpandMask(b, mb);
  size_t equal = 0;
  for (size_t i = 0; i < ma.size(); ++i) equal += ma[i] == mb[i];
  EXPECT_EQ(equal, 0u);  // a chance match of a 32-bit word is ~2^-22 over 1000 words
}

// Uniform(bound) by rejection: every residue equally likely. 12 bins, 120,000 draws;
// p = 0.001 critical value for 11 dof is 31.26. A bound just above 2^31 rejects almost
// half the words and must still return values below it.
TEST_F(MaskPrgTest, WordStreamUniformHasNoModuloBias) {
  std::array<uint8_t, kMaskSeedSize> seed{};
  seed[5] = 9;
  ChaCha20WordStream words(seed);
  std::vector<uint64_t> bins(12, 0);
  for (int i = 0; i < 120000; ++i) ++bins[words.Uniform(12)];
  EXPECT_LT(secagg_test::ChiSquareUniform(bins), secagg_test::kChiSquare11Dof999);
  const uint32_t big = (1u << 31) + 1;
  for (int i = 0; i < 1000; ++i) ASSERT_LT(words.Uniform(big), big);
  EXPECT_EQ(words.Uniform(1), 0u);
}

}  // namespace
}  // namespace fedmesh
