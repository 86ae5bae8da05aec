// Status/Result plumbing, the seeded Rng's determinism and distributions, JsonLine.
#include <gtest/gtest.h>

#include <cmath>

#include "core/json_line.h"
#include "core/rng.h"
#include "core/status.h"

namespace fedmesh {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  FM_ASSIGN_OR_RETURN(int h, Half(x));
  FM_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::OK();
}

TEST(Status, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(Status::OK().ok());
  EXPECT_EQ(Status::OK().ToString(), "OK");
  Status s = Status::NotFound("no file x").WithContext("loading model");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: loading model: no file x");
  int q = 0;
  EXPECT_TRUE(Quarter(8, &q).ok());
  EXPECT_EQ(q, 2);
  Status bad = Quarter(6, &q);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "3 is odd");
  Result<int> r = Status::OK();  // misuse becomes an Internal error, not a fake value
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Rng, SameSeedSameStreamAcrossInstances) {
  Rng a(123), b(123), c(124);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    differs |= x != c.NextU64();
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, KnownFirstValuesPinTheGenerator) {
  // Pinned so a change of generator (which would change every partition and initial
  // model) is a deliberate, visible decision.
  Rng r(0);
  const uint64_t first = r.NextU64();
  Rng r2(0);
  EXPECT_EQ(first, r2.NextU64());
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
}

TEST(Rng, DistributionMoments) {
  Rng r(9);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0, sg = 0;
  uint64_t counts[7] = {};
  for (int i = 0; i < n; ++i) {
    su += r.Uniform();
    const double z = r.Normal();
    sn += z;
    sn2 += z * z;
    sg += r.Gamma(0.3);
    counts[r.UniformInt(7)]++;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
  EXPECT_NEAR(sg / n, 0.3, 0.01);  // E[Gamma(k)] = k
  for (uint64_t c : counts) EXPECT_NEAR(double(c) / n, 1.0 / 7, 0.005);
  auto p = r.Dirichlet(0.1, 50);
  double s = 0;
  for (double v : p) s += v;
  EXPECT_NEAR(s, 1.0, 1e-12);
}

TEST(JsonLine, EscapesAndWritesNullForNonFinite) {
  JsonLine j;
  j.Add("a", 1).Add("b", 0.5).Add("s", "x\"y\n").Add("bad", std::nan("")).Add("t", true);
  EXPECT_EQ(j.str(), R"({"a":1,"b":0.5,"s":"x\"y\n","bad":null,"t":true})");
}

}  // namespace
}  // namespace fedmesh
