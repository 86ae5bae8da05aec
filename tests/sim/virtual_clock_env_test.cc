#include "sim/virtual_clock_env.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace fedmesh {
namespace {

std::vector<uint64_t> Draw(Env& env, int n) {
  std::vector<uint64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(env.rng().NextU64());
  return out;
}

TEST(VirtualClockEnvTest, StartsAtZeroOrTheGivenTime) {
  VirtualClockEnv env(1);
  EXPECT_EQ(env.NowSeconds(), 0.0);
  VirtualClockEnv later(1, 1234.5);
  EXPECT_EQ(later.NowSeconds(), 1234.5);
}

TEST(VirtualClockEnvTest, TimeOnlyMovesWhenAdvanced) {
  VirtualClockEnv env(1, 10.0);
  const Env& as_env = env;  // protocols see only the Env interface
  EXPECT_EQ(as_env.NowSeconds(), 10.0);
  EXPECT_EQ(as_env.NowSeconds(), 10.0);
}

TEST(VirtualClockEnvTest, AdvanceToLandsExactlyOnTheTarget) {
  VirtualClockEnv env(1);
  env.AdvanceTo(0.1);
  EXPECT_EQ(env.NowSeconds(), 0.1);
  env.AdvanceTo(0.3);  // not 0.1 + 0.2 (= 0.30000000000000004): the event's own timestamp
  EXPECT_EQ(env.NowSeconds(), 0.3);
  env.AdvanceTo(0.3);  // staying put is allowed: several events share a timestamp
  EXPECT_EQ(env.NowSeconds(), 0.3);
}

TEST(VirtualClockEnvTest, AdvanceAddsExactly) {
  VirtualClockEnv env(1, 2.0);
  env.Advance(0.5);
  EXPECT_EQ(env.NowSeconds(), 2.5);
  env.Advance(0.25);
  EXPECT_EQ(env.NowSeconds(), 2.75);
  env.Advance(0.0);
  EXPECT_EQ(env.NowSeconds(), 2.75);
  env.Advance(3600.0);
  EXPECT_EQ(env.NowSeconds(), 3602.75);
}

TEST(VirtualClockEnvTest, SameSeedGivesSameRandomSequence) {
  VirtualClockEnv a(42), b(42), c(43);
  const std::vector<uint64_t> seq_a = Draw(a, 100);
  EXPECT_EQ(seq_a, Draw(b, 100));
  EXPECT_NE(seq_a, Draw(c, 100));
  // The clock and the generator are independent: advancing time draws no numbers.
  VirtualClockEnv d(42);
  d.Advance(5.0);
  d.AdvanceTo(7.0);
  EXPECT_EQ(seq_a, Draw(d, 100));
}

TEST(VirtualClockEnvTest, RngMatchesAPlainRngWithTheSameSeed) {
  // Code that seeds an Rng directly and code that takes an Env agree on the numbers.
  VirtualClockEnv env(7);
  Rng rng(7);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(env.rng().NextU64(), rng.NextU64());
}

TEST(VirtualClockEnvDeathTest, TimeNeverGoesBackwards) {
  VirtualClockEnv env(1, 5.0);
  EXPECT_DEATH(env.AdvanceTo(4.999), "check failed.*\\(4.999 vs 5\\)");
  EXPECT_DEATH(env.Advance(-0.001), "check failed");
  EXPECT_DEATH(env.AdvanceTo(std::numeric_limits<double>::quiet_NaN()), "check failed");
  EXPECT_DEATH(env.Advance(std::numeric_limits<double>::infinity()), "check failed");
  EXPECT_DEATH(VirtualClockEnv(1, std::numeric_limits<double>::infinity()), "check failed");
}

}  // namespace
}  // namespace fedmesh
