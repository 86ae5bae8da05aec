#include "crypto/sodium.h"

#include <gtest/gtest.h>
#include <sodium.h>

#include <thread>
#include <vector>

namespace fedmesh {
namespace {

TEST(InitSodiumTest, SucceedsAndIsIdempotent) {
  ASSERT_TRUE(InitSodium().ok());
  EXPECT_TRUE(InitSodium().ok());
  // After init, libsodium's generator works: 64 random bytes are not all zero.
  unsigned char buf[64] = {};
  randombytes_buf(buf, sizeof(buf));
  bool any_nonzero = false;
  for (unsigned char b : buf) any_nonzero |= (b != 0);
  EXPECT_TRUE(any_nonzero);
}

TEST(InitSodiumTest, ConcurrentCallersAllSucceed) {
  std::vector<std::thread> threads;
  std::vector<int> ok(16, 0);
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&ok, i] { ok[i] = InitSodium().ok() ? 1 : 0; });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(ok[i], 1) << "thread " << i;
}

}  // namespace
}  // namespace fedmesh
