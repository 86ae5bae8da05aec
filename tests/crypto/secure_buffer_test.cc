#include "crypto/secure_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace fedmesh {
namespace {

static_assert(!std::is_copy_constructible_v<SecureBuffer>, "a secret must not be copied");
static_assert(!std::is_copy_assignable_v<SecureBuffer>, "a secret must not be copied");
static_assert(std::is_nothrow_move_constructible_v<SecureBuffer>);
static_assert(std::is_nothrow_move_assignable_v<SecureBuffer>);

bool AllZero(std::span<const uint8_t> s) {
  return std::all_of(s.begin(), s.end(), [](uint8_t b) { return b == 0; });
}

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 1);
  return v;
}

TEST(SecureBufferTest, CreateIsZeroFilled) {
  auto buf = SecureBuffer::Create(32);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  EXPECT_EQ(buf->size(), 32u);
  ASSERT_NE(buf->data(), nullptr);
  EXPECT_TRUE(AllZero(buf->span()));
}

TEST(SecureBufferTest, CopyOfHoldsTheBytes) {
  const std::vector<uint8_t> secret = Pattern(48);
  auto buf = SecureBuffer::CopyOf(secret);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  EXPECT_EQ(std::vector<uint8_t>(buf->data(), buf->data() + buf->size()), secret);
}

TEST(SecureBufferTest, WipeZeroesAndKeepsSize) {
  auto buf = SecureBuffer::CopyOf(Pattern(64));
  ASSERT_TRUE(buf.ok());
  ASSERT_FALSE(AllZero(buf->span()));
  buf->Wipe();
  EXPECT_EQ(buf->size(), 64u);
  EXPECT_TRUE(AllZero(buf->span()));
}

TEST(SecureBufferTest, EmptyBufferHasNoMemory) {
  SecureBuffer empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);
  auto zero = SecureBuffer::Create(0);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->size(), 0u);
  zero->Wipe();  // a no-op, must not touch memory
}

TEST(SecureBufferTest, MoveConstructionTransfersOwnership) {
  auto made = SecureBuffer::CopyOf(Pattern(16));
  ASSERT_TRUE(made.ok());
  SecureBuffer a = std::move(made).value();
  const uint8_t* original = a.data();
  SecureBuffer b(std::move(a));
  EXPECT_EQ(b.data(), original);  // the same memory moved, no copy of the secret was made
  EXPECT_EQ(b.size(), 16u);
  EXPECT_EQ(std::vector<uint8_t>(b.data(), b.data() + 16), Pattern(16));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0u);
}

TEST(SecureBufferTest, MoveAssignmentReleasesTheOldSecret) {
  auto first = SecureBuffer::CopyOf(Pattern(8));
  auto second = SecureBuffer::CopyOf(Pattern(24));
  ASSERT_TRUE(first.ok() && second.ok());
  SecureBuffer a = std::move(first).value();
  SecureBuffer b = std::move(second).value();
  const uint8_t* b_data = b.data();
  a = std::move(b);
  EXPECT_EQ(a.data(), b_data);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(std::vector<uint8_t>(a.data(), a.data() + 24), Pattern(24));
  EXPECT_TRUE(b.empty());   // NOLINT(bugprone-use-after-move)
  SecureBuffer& alias = a;  // self-move through an alias: keeps the secret
  a = std::move(alias);
  EXPECT_EQ(a.size(), 24u);
}

}  // namespace
}  // namespace fedmesh
