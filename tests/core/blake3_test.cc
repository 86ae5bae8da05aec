// BLAKE3 against the specification's test vectors (input byte i is i % 251; the lengths
// of its test_vectors.json around the 64-byte block and 1 KiB chunk boundaries, and longer
// ones that cross the 16-lane and 256-chunk subtree sizes; reference digests from b3sum
// 1.3, Debian), and incremental hashing with many splits. CTest runs these once more with
// each narrower lane kernel (FEDMESH_BLAKE3_KERNEL=avx2, =portable).
#include "core/blake3.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/sha256.h"

namespace fedmesh {
namespace {

std::vector<uint8_t> TestInput(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i % 251);
  return v;
}

struct KnownAnswer {
  size_t length;
  const char* hex;
};

constexpr KnownAnswer kKnownAnswers[] = {
    {0, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
    {1, "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213"},
    {63, "e9bc37a594daad83be9470df7f7b3798297c3d834ce80ba85d6e207627b7db7b"},
    {64, "4eed7141ea4a5cd4b788606bd23f46e212af9cacebacdc7d1f4c6dc7f2511b98"},
    {65, "de1e5fa0be70df6d2be8fffd0e99ceaa8eb6e8c93a63f2d8d1c30ecb6b263dee"},
    {1023, "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11"},
    {1024, "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7"},
    {1025, "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444"},
    {2048, "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a"},
    {2049, "5f4d72f40d7a5f82b15ca2b2e44b1de3c2ef86c426c95c1af0b6879522563030"},
    {3072, "b98cb0ff3623be03326b373de6b9095218513e64f1ee2edd2525c7ad1e5cffd2"},
    {3073, "7124b49501012f81cc7f11ca069ec9226cecb8a2c850cfe644e327d22d3e1cd3"},
    {4096, "015094013f57a5277b59d8475c0501042c0b642e531b0a1c8f58d2163229e969"},
    {4097, "9b4052b38f1c5fc8b1f9ff7ac7b27cd242487b3d890d15c96a1c25b8aa0fb995"},
    {5120, "9cadc15fed8b5d854562b26a9536d9707cadeda9b143978f319ab34230535833"},
    {5121, "628bd2cb2004694adaab7bbd778a25df25c47b9d4155a55f8fbd79f2fe154cff"},
    {6144, "3e2e5b74e048f3add6d21faab3f83aa44d3b2278afb83b80b3c35164ebeca205"},
    {6145, "f1323a8631446cc50536a9f705ee5cb619424d46887f3c376c695b70e0f0507f"},
    {7168, "61da957ec2499a95d6b8023e2b0e604ec7f6b50e80a9678b89d2628e99ada77a"},
    {7169, "a003fc7a51754a9b3c7fae0367ab3d782dccf28855a03d435f8cfe74605e7817"},
    {8192, "aae792484c8efe4f19e2ca7d371d8c467ffb10748d8a5a1ae579948f718a2a63"},
    {8193, "bab6c09cb8ce8cf459261398d2e7aef35700bf488116ceb94a36d0f5f1b7bc3b"},
    {16384, "f875d6646de28985646f34ee13be9a576fd515f76b5b0a26bb324735041ddde4"},
    {31744, "62b6960e1a44bcc1eb1a611a8d6235b6b4b78f32e7abc4fb4c6cdcce94895c47"},
    {102400, "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085"},
    {262144, "d57dc906e20d3fd326ffaa85535500486f46a0979f5a323f028dcabfd381fd4a"},
    {262145, "531c319935cf78f34869faebd865e5748266b1799039103bfb851a680d9ed30c"},
    {1049353, "eaf8ad74822a917a9506af6a3368582be897e8f268a27cc853b603edcdd48f32"},
    {5000000, "1ab09ef1af116159d8d394fc5a13c25842753b617048329dc8874051d1b9e171"},
};

TEST(Blake3KnownAnswer, SpecificationVectorsAndLongerInputs) {
  std::cout << "BLAKE3 kernel: " << Blake3::Kernel() << std::endl;
  for (const KnownAnswer& k : kKnownAnswers) {
    const auto input = TestInput(k.length);
    EXPECT_EQ(Sha256Hex(Blake3::Hash(input)), k.hex) << "length " << k.length;
  }
}

TEST(Blake3KnownAnswer, StringViewAndSpanAgree) {
  EXPECT_EQ(Sha256Hex(Blake3::Hash(std::string_view())), kKnownAnswers[0].hex);
  const std::string abc = "abc";
  EXPECT_EQ(Blake3::Hash(abc),
            Blake3::Hash(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(abc.data()), 3)));
}

// Every split point of an input of 3 chunks and a bit: the digest never depends on how the
// bytes were handed over (block and chunk tails kept back, subtrees started mid-stream).
TEST(Blake3Incremental, EverySplitOfAFewChunksGivesTheSameDigest) {
  const auto input = TestInput(3 * 1024 + 77);
  const Blake3Digest whole = Blake3::Hash(input);
  for (size_t cut = 0; cut <= input.size(); ++cut) {
    Blake3 h;
    h.Update(std::span<const uint8_t>(input.data(), cut));
    h.Update(std::span<const uint8_t>(input.data() + cut, input.size() - cut));
    ASSERT_EQ(h.Finish(), whole) << "split at " << cut;
  }
}

// Random piece sizes over 5 MB, as chunk frames of any size arrive: subtrees of every size
// start at every alignment.
TEST(Blake3Incremental, RandomPiecesOfALongInputGiveTheKnownDigest) {
  const KnownAnswer& last = kKnownAnswers[std::size(kKnownAnswers) - 1];
  const auto input = TestInput(last.length);
  Rng rng(11);
  for (int trial = 0; trial < 4; ++trial) {
    Blake3 h;
    size_t pos = 0;
    while (pos < input.size()) {
      const size_t limit = trial == 0 ? 1100 : size_t{1} << (10 + 3 * trial);
      const size_t take = std::min(input.size() - pos, 1 + rng.NextU64() % limit);
      h.Update(std::span<const uint8_t>(input.data() + pos, take));
      pos += take;
    }
    EXPECT_EQ(Sha256Hex(h.Finish()), last.hex) << "trial " << trial;
  }
}

TEST(Blake3Incremental, OneByteDifferenceChangesTheDigest) {
  auto a = TestInput(300000);
  const Blake3Digest before = Blake3::Hash(a);
  a[123456] ^= 1;
  EXPECT_NE(Blake3::Hash(a), before);
}

}  // namespace
}  // namespace fedmesh
