// CPU backend kernels against plain reference loops on random inputs.
#include "core/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "tests/core/random_vector.h"

namespace fedmesh {
namespace {

class CpuBackendTest : public ::testing::TestWithParam<int> {
 protected:
  CpuBackend be_{GetParam()};
};

TEST_P(CpuBackendTest, GemmAllTransposesMatchReference) {
  const int m = 37, n = 19, k = 53;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto a = RandomVector(size_t(m) * k, 1), b = RandomVector(size_t(k) * n, 2);
      auto c = RandomVector(size_t(m) * n, 3);
      std::vector<float> ref = c;
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int p = 0; p < k; ++p) {
            const float av = ta ? a[size_t(p) * m + i] : a[size_t(i) * k + p];
            const float bv = tb ? b[size_t(j) * k + p] : b[size_t(p) * n + j];
            s += double(av) * bv;
          }
          ref[size_t(i) * n + j] = static_cast<float>(0.5 * s + 2.0 * c[size_t(i) * n + j]);
        }
      }
      be_.Gemm(ta, tb, m, n, k, 0.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, 2.0f, c.data(), n);
      for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], ref[i], 1e-4) << ta << tb << " at " << i;
    }
  }
}

// A dense layer's forward shape (few rows, a large W, beta 0) takes the transposed-product
// path; with padded leading dimensions, and twice so the scratch is reused.
TEST_P(CpuBackendTest, GemmWideTransposedBMatchesReference) {
  const int m = 32, n = 256, k = 784, lda = k + 3, ldb = k + 5, ldc = n + 7;
  auto a = RandomVector(size_t(m) * lda, 4), b = RandomVector(size_t(n) * ldb, 5);
  std::vector<float> ref(size_t(m) * ldc, -1.0f);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) s += double(a[size_t(i) * lda + p]) * b[size_t(j) * ldb + p];
      ref[size_t(i) * ldc + j] = static_cast<float>(-0.75 * s);
    }
  }
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<float> c(size_t(m) * ldc, -1.0f);  // the padding columns stay -1
    be_.Gemm(false, true, m, n, k, -0.75f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), ldc);
    for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], ref[i], 1e-3) << rep << " at " << i;
  }
}

// Col2Im is the adjoint of Im2Col: <Im2Col(x), c> == <x, Col2Im(c)> for all x, c.
TEST_P(CpuBackendTest, Col2ImIsAdjointOfIm2Col) {
  WindowGeometry g;
  g.batch = 3;
  g.in_h = 9;
  g.in_w = 7;
  g.channels = 4;
  g.kernel_h = g.kernel_w = 3;
  g.stride = 2;
  g.pad = 1;
  const size_t xn = size_t(g.batch) * g.in_h * g.in_w * g.channels;
  const size_t cn = size_t(g.batch) * g.out_h() * g.out_w() * g.kernel_h * g.kernel_w * g.channels;
  auto x = RandomVector(xn, 4), c = RandomVector(cn, 5);
  std::vector<float> cols(cn), dx(xn);
  be_.Im2Col(x.data(), g, cols.data());
  be_.Col2Im(c.data(), g, dx.data());
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < cn; ++i) lhs += double(cols[i]) * c[i];
  for (size_t i = 0; i < xn; ++i) rhs += double(x[i]) * dx[i];
  EXPECT_NEAR(lhs, rhs, 1e-6 * std::abs(lhs) + 1e-6);
  // Spot-check one column entry against the definition, including a padded zero.
  EXPECT_EQ(cols[0], 0.0f);  // (n=0, oh=0, ow=0, kh=0, kw=0) reads row -1: padding
  const int kw = 1, kh = 1, ch = 2;  // centre tap of output (0,0) reads input (0,0)
  EXPECT_EQ(cols[(kh * 3 + kw) * g.channels + ch], x[ch]);
}

// The fused convolution (per-image tiles over threads) against a direct 7-loop reference,
// forward and all three gradients, with stride and padding.
TEST_P(CpuBackendTest, Conv2dMatchesDirectConvolution) {
  WindowGeometry g;
  g.batch = 5;  // not a multiple of the thread count
  g.in_h = 9;
  g.in_w = 8;
  g.channels = 3;
  g.kernel_h = g.kernel_w = 3;
  g.stride = 2;
  g.pad = 1;
  const int oc = 4, OH = g.out_h(), OW = g.out_w(), K = 3, C = 3;
  const size_t xn = size_t(g.batch) * g.in_h * g.in_w * C, yn = size_t(g.batch) * OH * OW * oc;
  auto x = RandomVector(xn, 11), w = RandomVector(size_t(oc) * K * K * C, 12),
       b = RandomVector(oc, 13), dy = RandomVector(yn, 14);
  std::vector<double> y_ref(yn, 0.0), dx_ref(xn, 0.0), dw_ref(w.size(), 0.0), db_ref(oc, 0.0);
  for (int n = 0; n < g.batch; ++n)
    for (int oh = 0; oh < OH; ++oh)
      for (int ow = 0; ow < OW; ++ow)
        for (int o = 0; o < oc; ++o) {
          const size_t yi = ((size_t(n) * OH + oh) * OW + ow) * oc + o;
          double acc = b[o];
          db_ref[o] += dy[yi];
          for (int kh = 0; kh < K; ++kh)
            for (int kw = 0; kw < K; ++kw)
              for (int c = 0; c < C; ++c) {
                const int ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
                if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
                const size_t xi = ((size_t(n) * g.in_h + ih) * g.in_w + iw) * C + c;
                const size_t wi = ((size_t(o) * K + kh) * K + kw) * C + c;
                acc += double(x[xi]) * w[wi];
                dw_ref[wi] += double(dy[yi]) * x[xi];
                dx_ref[xi] += double(dy[yi]) * w[wi];
              }
          y_ref[yi] = acc;
        }
  std::vector<float> ws(be_.ConvWorkspaceFloats(g, oc)), y(yn), dx(xn, 99.0f), dw(w.size()), db(oc);
  be_.Conv2dForward(x.data(), g, w.data(), b.data(), oc, y.data(), ws.data(), ws.size());
  be_.Conv2dBackward(x.data(), g, w.data(), oc, dy.data(), dw.data(), db.data(), dx.data(),
                     ws.data(), ws.size());
  for (size_t i = 0; i < yn; ++i) ASSERT_NEAR(y[i], y_ref[i], 1e-4) << i;
  for (size_t i = 0; i < xn; ++i) ASSERT_NEAR(dx[i], dx_ref[i], 1e-4) << i;
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(dw[i], dw_ref[i], 1e-4) << i;
  for (int i = 0; i < oc; ++i) ASSERT_NEAR(db[i], db_ref[i], 1e-4) << i;
  // Without dx (first layer) the parameter gradients are unchanged.
  std::vector<float> dw2(w.size()), db2(oc);
  be_.Conv2dBackward(x.data(), g, w.data(), oc, dy.data(), dw2.data(), db2.data(), nullptr,
                     ws.data(), ws.size());
  EXPECT_EQ(dw, dw2);
  EXPECT_EQ(db, db2);
}

TEST_P(CpuBackendTest, MaxPoolPicksFirstMaximumAndRoutesGradient) {
  WindowGeometry g;
  g.batch = 1;
  g.in_h = 2;
  g.in_w = 2;
  g.channels = 1;
  g.kernel_h = g.kernel_w = 2;
  g.stride = 2;
  std::vector<float> x = {1.0f, 5.0f, 5.0f, -2.0f}, y(1), dx(4);
  std::vector<int32_t> arg(1);
  be_.MaxPoolForward(x.data(), g, y.data(), arg.data());
  EXPECT_EQ(y[0], 5.0f);
  EXPECT_EQ(arg[0], 1);  // the first of the two fives
  const float dy = 3.0f;
  be_.MaxPoolBackward(&dy, arg.data(), 1, dx.data(), 4);
  EXPECT_EQ(dx, (std::vector<float>{0.0f, 3.0f, 0.0f, 0.0f}));
}

TEST_P(CpuBackendTest, SoftmaxCrossEntropyMatchesHandComputation) {
  // Row 0: logits (0, ln 3) -> p = (1/4, 3/4); label 1 -> loss = -ln(3/4).
  std::vector<float> logits = {0.0f, std::log(3.0f), 2.0f, 0.0f};
  std::vector<int32_t> labels = {1, 1};
  std::vector<float> d(4);
  auto r = be_.SoftmaxCrossEntropy(logits.data(), labels.data(), 2, 2, d.data());
  const double p1 = 1.0 / (1.0 + std::exp(2.0));  // row 1: softmax of (2, 0) at class 1
  EXPECT_NEAR(r.loss_sum, -std::log(0.75) - std::log(p1), 1e-6);
  EXPECT_EQ(r.correct, 1);
  EXPECT_NEAR(d[0], 0.25 / 2, 1e-6);
  EXPECT_NEAR(d[1], (0.75 - 1.0) / 2, 1e-6);
  EXPECT_NEAR(d[3], (p1 - 1.0) / 2, 1e-6);
}

TEST_P(CpuBackendTest, SgdStepMatchesPyTorchSemantics) {
  const size_t n = 100000;  // large enough to take the multi-threaded path
  auto w = RandomVector(n, 6), g = RandomVector(n, 7), v = RandomVector(n, 8), wg = RandomVector(n, 9);
  auto w_ref = w, v_ref = v;
  SgdStepParams p{0.1f, 0.9f, 0.01f, 0.5f};
  for (size_t i = 0; i < n; ++i) {
    const float d = g[i] + 0.01f * w_ref[i] + 0.5f * (w_ref[i] - wg[i]);
    v_ref[i] = 0.9f * v_ref[i] + d;
    w_ref[i] -= 0.1f * v_ref[i];
  }
  be_.SgdStep(w.data(), g.data(), v.data(), wg.data(), n, p);
  for (size_t i = 0; i < n; ++i) {
    // Within rounding: the compiler may fuse multiply-adds (FMA) differently.
    ASSERT_NEAR(v[i], v_ref[i], 1e-5f * (1.0f + std::abs(v_ref[i]))) << i;
    ASSERT_NEAR(w[i], w_ref[i], 1e-5f * (1.0f + std::abs(w_ref[i]))) << i;
  }
}

TEST_P(CpuBackendTest, DropoutIsDeterministicAndKeepsExpectedFraction) {
  const size_t n = 200000;
  std::vector<float> x(n, 1.0f), y(n), mask(n), y2(n), mask2(n);
  be_.DropoutForward(x.data(), y.data(), mask.data(), n, 0.25f, 42);
  be_.DropoutForward(x.data(), y2.data(), mask2.data(), n, 0.25f, 42);
  EXPECT_EQ(y, y2);
  size_t kept = 0;
  double sum = 0;
  for (float v : y) {
    kept += v != 0.0f;
    sum += v;
  }
  EXPECT_NEAR(double(kept) / n, 0.75, 0.005);
  EXPECT_NEAR(sum / n, 1.0, 0.01);  // inverted dropout preserves the mean
}

TEST_P(CpuBackendTest, ReductionsAndBias) {
  std::vector<float> x = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(be_.SquaredNorm(2, x.data()), 25.0);
  std::vector<float> y = {1, 2, 3, 4, 5, 6}, b = {10, 20, 30}, db(3);
  be_.AddBias(y.data(), b.data(), 2, 3);
  EXPECT_EQ(y, (std::vector<float>{11, 22, 33, 14, 25, 36}));
  be_.BiasGrad(y.data(), db.data(), 2, 3);
  EXPECT_EQ(db, (std::vector<float>{25, 47, 69}));
  be_.Axpy(2, 2.0f, x.data(), y.data());
  EXPECT_EQ(y[0], 17.0f);
  be_.Scale(2, 0.5f, x.data());
  EXPECT_EQ(x, (std::vector<float>{1.5f, 2.0f}));
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuBackendTest, ::testing::Values(1, 2));

TEST(MakeBackend, NamesAndErrors) {
  auto cpu = MakeBackend("cpu", 1);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto autod = MakeBackend("auto", 1);
  ASSERT_TRUE(autod.ok());  // falls back to CPU without a GPU
  auto bad = MakeBackend("tpu", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("expected auto, cpu, cuda"), std::string::npos);
  auto bad_index = MakeBackend("cuda:x", 1);
  EXPECT_EQ(bad_index.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedmesh
