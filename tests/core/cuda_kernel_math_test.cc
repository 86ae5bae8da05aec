// The per-element math of the CUDA kernels (core/cuda/kernel_math.h) run on the host for
// EVERY element and compared with the CPU backend, on fixed and random geometries and
// random inputs. This is how the kernels' index arithmetic and numerics are checked on
// machines without a GPU: the kernels call exactly these functions, one element per thread.
#include "core/cuda/kernel_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/rng.h"
#include "tests/core/random_vector.h"

namespace fedmesh {
namespace {

// Values from {0, 1, 2}: max-pool windows then contain ties.
std::vector<float> TiedVector(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.UniformInt(3));
  return v;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

std::string Describe(const WindowGeometry& g) {
  std::ostringstream os;  // not operator+ chains: GCC 12 warns falsely (-Wrestrict) on them
  os << "N" << g.batch << " " << g.in_h << "x" << g.in_w << "x" << g.channels << " k" << g.kernel_h
     << "x" << g.kernel_w << " s" << g.stride << " p" << g.pad;
  return os.str();
}

WindowGeometry Geometry(int batch, int h, int w, int c, int kh, int kw, int stride, int pad) {
  WindowGeometry g;
  g.batch = batch;
  g.in_h = h;
  g.in_w = w;
  g.channels = c;
  g.kernel_h = kh;
  g.kernel_w = kw;
  g.stride = stride;
  g.pad = pad;
  return g;
}

// Fixed shapes that matter (the cnn's layers, stride 2 with padding, C = 1 and 3,
// non-square images and kernels, stride larger than the kernel) plus random ones.
std::vector<WindowGeometry> Geometries() {
  std::vector<WindowGeometry> gs = {
      Geometry(2, 9, 7, 3, 3, 3, 2, 1),    // stride 2, pad 1, C = 3, non-square image
      Geometry(3, 6, 4, 1, 3, 2, 1, 1),    // C = 1, non-square kernel
      Geometry(2, 12, 12, 1, 5, 5, 1, 2),  // the cnn's first conv ("same" padding)
      Geometry(1, 7, 7, 4, 5, 5, 1, 2),
      Geometry(2, 8, 6, 3, 2, 2, 2, 0),   // pooling-like, non-overlapping
      Geometry(1, 10, 7, 2, 2, 2, 3, 1),  // stride > kernel: some pixels are never read
      Geometry(1, 1, 1, 3, 1, 1, 1, 0),
      Geometry(2, 5, 9, 3, 3, 3, 2, 2),
  };
  Rng rng(2024);
  while (gs.size() < 20) {
    WindowGeometry g = Geometry(1 + int(rng.UniformInt(3)), 1 + int(rng.UniformInt(10)),
                                1 + int(rng.UniformInt(10)), 1 + int(rng.UniformInt(4)),
                                1 + int(rng.UniformInt(4)), 1 + int(rng.UniformInt(4)),
                                1 + int(rng.UniformInt(3)), 0);
    const int kmin = std::min(g.kernel_h, g.kernel_w);
    g.pad = int(rng.UniformInt(kmin));  // pad < kernel: every window meets the image
    if (g.in_h + 2 * g.pad < g.kernel_h || g.in_w + 2 * g.pad < g.kernel_w) continue;
    gs.push_back(g);
  }
  return gs;
}

size_t InputSize(const WindowGeometry& g) { return size_t(g.batch) * g.in_h * g.in_w * g.channels; }
size_t Rows(const WindowGeometry& g) { return size_t(g.batch) * g.out_h() * g.out_w(); }
size_t RowLen(const WindowGeometry& g) { return size_t(g.kernel_h) * g.kernel_w * g.channels; }

class CudaKernelMath : public ::testing::Test {
 protected:
  CpuBackend cpu_{1};
};

TEST_F(CudaKernelMath, Im2ColSourceMatchesCpuIm2ColExactly) {
  uint64_t seed = 1;
  for (const WindowGeometry& g : Geometries()) {
    SCOPED_TRACE(Describe(g));
    const auto x = RandomVector(InputSize(g), seed++);
    std::vector<float> want(Rows(g) * RowLen(g), -99.0f);
    cpu_.Im2Col(x.data(), g, want.data());
    size_t padded = 0;
    for (size_t row = 0; row < Rows(g); ++row) {
      for (size_t col = 0; col < RowLen(g); ++col) {
        const int64_t src = kmath::Im2ColSource(g, int64_t(row), int64_t(col));
        ASSERT_GE(src, -1);
        ASSERT_LT(src, int64_t(x.size()));
        padded += src < 0;
        const float got = src < 0 ? 0.0f : x[src];
        ASSERT_TRUE(SameBits(got, want[row * RowLen(g) + col]))
            << "row " << row << " col " << col << ": " << got << " vs "
            << want[row * RowLen(g) + col];
      }
    }
    if (g.pad > 0) {
      EXPECT_GT(padded, 0u);  // the padding path was exercised
    }
  }
}

// The gather visits windows in the order the CPU scatters (increasing oh, then ow), so the
// float sums must agree bit for bit, not just closely.
TEST_F(CudaKernelMath, Col2ImGatherMatchesCpuCol2ImExactly) {
  uint64_t seed = 100;
  for (const WindowGeometry& g : Geometries()) {
    SCOPED_TRACE(Describe(g));
    const auto dcols = RandomVector(Rows(g) * RowLen(g), seed++);
    std::vector<float> want(InputSize(g), -99.0f);
    cpu_.Col2Im(dcols.data(), g, want.data());
    for (size_t p = 0; p < want.size(); ++p) {
      const float got = kmath::Col2ImGather(dcols.data(), g, int64_t(p));
      ASSERT_TRUE(SameBits(got, want[p])) << "pixel " << p << ": " << got << " vs " << want[p];
    }
  }
}

// <Im2Col(x), y> == <x, Col2Im(y)>, both sides from the kmath functions alone: the gather
// reads every column entry exactly once, from the pixel Im2ColSource names.
TEST_F(CudaKernelMath, Col2ImGatherIsTheAdjointOfIm2ColSource) {
  uint64_t seed = 200;
  for (const WindowGeometry& g : Geometries()) {
    SCOPED_TRACE(Describe(g));
    const auto x = RandomVector(InputSize(g), seed++);
    const auto y = RandomVector(Rows(g) * RowLen(g), seed++);
    double lhs = 0.0, rhs = 0.0, scale = 0.0;
    for (size_t row = 0; row < Rows(g); ++row) {
      for (size_t col = 0; col < RowLen(g); ++col) {
        const int64_t src = kmath::Im2ColSource(g, int64_t(row), int64_t(col));
        const double term = src < 0 ? 0.0 : double(x[src]) * y[row * RowLen(g) + col];
        lhs += term;
        scale += std::abs(term);
      }
    }
    for (size_t p = 0; p < x.size(); ++p) {
      rhs += double(x[p]) * kmath::Col2ImGather(y.data(), g, int64_t(p));
    }
    EXPECT_NEAR(lhs, rhs, 1e-5 * std::max(std::abs(lhs), scale) + 1e-12);
  }
}

TEST_F(CudaKernelMath, MaxPoolCellMatchesCpuIncludingTies) {
  uint64_t seed = 300;
  for (const WindowGeometry& g : Geometries()) {
    SCOPED_TRACE(Describe(g));
    for (bool tied : {false, true}) {
      const auto x = tied ? TiedVector(InputSize(g), seed++) : RandomVector(InputSize(g), seed++);
      const size_t out = Rows(g) * g.channels;
      std::vector<float> want(out);
      std::vector<int32_t> want_arg(out);
      cpu_.MaxPoolForward(x.data(), g, want.data(), want_arg.data());
      for (size_t o = 0; o < out; ++o) {
        float v = -1.0f;
        int32_t arg = -2;
        kmath::MaxPoolCell(x.data(), g, int64_t(o), &v, &arg);
        ASSERT_EQ(arg, want_arg[o]) << "output " << o << (tied ? " (tied input)" : "");
        ASSERT_TRUE(SameBits(v, want[o])) << "output " << o << ": " << v << " vs " << want[o];
        ASSERT_GE(arg, 0);  // pad < kernel: every window meets the image
        ASSERT_EQ(v, x[arg]);
      }
    }
  }
}

TEST_F(CudaKernelMath, SoftmaxCrossEntropyRowMatchesCpu) {
  for (int classes : {2, 10, 37}) {
    SCOPED_TRACE("classes " + std::to_string(classes));
    const int rows = 53;
    auto logits = RandomVector(size_t(rows) * classes, 400 + classes);
    for (auto& z : logits) z *= 4.0f;                    // confident rows too
    for (int c = 0; c < classes; ++c) logits[c] = 1.5f;  // row 0: all tied, argmax is class 0
    logits[size_t(classes) + classes - 1] = 60.0f;       // row 1: a large logit (stability)
    Rng rng(7);
    std::vector<int32_t> labels(rows);
    for (auto& y : labels) y = int32_t(rng.UniformInt(classes));
    labels[0] = 0;
    std::vector<float> want_d(logits.size()), got_d(logits.size(), -99.0f);
    const auto want =
        cpu_.SoftmaxCrossEntropy(logits.data(), labels.data(), rows, classes, want_d.data());
    const float inv_rows = 1.0f / static_cast<float>(rows);
    double loss = 0.0, loss_no_d = 0.0;
    int64_t correct = 0, correct_no_d = 0;
    for (int r = 0; r < rows; ++r) {
      const size_t off = size_t(r) * classes;
      kmath::SoftmaxCrossEntropyRow(logits.data() + off, classes, labels[r], inv_rows,
                                    got_d.data() + off, &loss, &correct);
      kmath::SoftmaxCrossEntropyRow(logits.data() + off, classes, labels[r], inv_rows, nullptr,
                                    &loss_no_d, &correct_no_d);
    }
    EXPECT_DOUBLE_EQ(loss, want.loss_sum);
    EXPECT_DOUBLE_EQ(loss_no_d, want.loss_sum);
    EXPECT_EQ(correct, want.correct);
    EXPECT_EQ(correct_no_d, want.correct);
    EXPECT_GT(want.correct, 0);
    for (size_t i = 0; i < want_d.size(); ++i) {
      ASSERT_NEAR(got_d[i], want_d[i], 1e-7f * (1.0f + std::abs(want_d[i]))) << "dlogit " << i;
    }
  }
}

TEST_F(CudaKernelMath, SgdElementMatchesCpuSgdStep) {
  struct Case {
    SgdStepParams p;
    bool anchor;
  };
  const Case cases[] = {
      {{0.1f, 0.0f, 0.0f, 0.0f}, false},   // plain SGD
      {{0.05f, 0.9f, 0.0f, 0.0f}, false},  // momentum
      {{0.1f, 0.9f, 0.01f, 0.0f}, false},  // momentum + weight decay
      {{0.1f, 0.9f, 0.01f, 0.5f}, true},   // + FedProx
      {{0.1f, 0.0f, 0.0f, 0.5f}, true},    // FedProx alone
      {{0.1f, 0.9f, 0.01f, 0.5f}, false},  // mu set but no anchor: no prox term
      {{0.1f, 0.9f, 0.01f, 0.0f}, true},   // anchor but mu = 0: no prox term
  };
  for (size_t n : {size_t(1000), size_t(100000)}) {  // the CPU's serial and threaded paths
    int k = 0;
    for (const Case& c : cases) {
      SCOPED_TRACE("case " + std::to_string(k++) + " n " + std::to_string(n));
      const auto w0 = RandomVector(n, 500), g = RandomVector(n, 501), v0 = RandomVector(n, 502),
                 wg = RandomVector(n, 503);
      auto w_cpu = w0, v_cpu = v0, w_k = w0, v_k = v0;
      cpu_.SgdStep(w_cpu.data(), g.data(), v_cpu.data(), c.anchor ? wg.data() : nullptr, n, c.p);
      const bool prox = c.anchor && c.p.prox_mu != 0.0f;
      for (size_t i = 0; i < n; ++i) {
        kmath::SgdElement(&w_k[i], g[i], &v_k[i], c.anchor ? wg[i] : 0.0f, prox, c.p);
      }
      for (size_t i = 0; i < n; ++i) {
        // Within rounding, not bit for bit: the CPU backend is built with FMA (x86-64-v3)
        // and the compiler may fuse its multiply-adds; this file is not.
        ASSERT_NEAR(v_k[i], v_cpu[i], 1e-5f * (1.0f + std::abs(v_cpu[i]))) << i;
        ASSERT_NEAR(w_k[i], w_cpu[i], 1e-5f * (1.0f + std::abs(w_cpu[i]))) << i;
      }
    }
  }
}

TEST_F(CudaKernelMath, DropoutMaskMatchesCpuExactly) {
  const size_t n = 100003;
  const auto x = RandomVector(n, 600);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    for (uint64_t seed : {uint64_t(0), uint64_t(42), ~uint64_t(0)}) {
      std::vector<float> y(n), mask(n);
      cpu_.DropoutForward(x.data(), y.data(), mask.data(), n, p, seed);
      size_t kept = 0;
      for (size_t i = 0; i < n; ++i) {
        const float m = kmath::DropoutMask(seed, i, p);
        ASSERT_TRUE(SameBits(m, mask[i])) << "p " << p << " seed " << seed << " i " << i;
        ASSERT_TRUE(SameBits(x[i] * m, y[i])) << i;
        kept += m != 0.0f;
      }
      EXPECT_NEAR(double(kept) / n, 1.0 - p, 0.01);
    }
  }
}

TEST_F(CudaKernelMath, BiasGradColumnMatchesCpuExactly) {
  for (int rows : {0, 1, 7, 64, 65, 1000}) {
    for (int cols : {1, 10, 33}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
      const auto dy = RandomVector(std::max(1, rows * cols), 700 + rows + cols);
      std::vector<float> want(cols, -99.0f);
      cpu_.BiasGrad(dy.data(), want.data(), rows, cols);
      for (int c = 0; c < cols; ++c) {
        ASSERT_TRUE(SameBits(kmath::BiasGradColumn(dy.data(), rows, cols, c), want[c])) << c;
      }
    }
  }
}

// The GPU's two-pass column sum (partials over chunks of kBiasGradChunkRows rows, then a
// column sum of the partials) against the CPU: a different float summation order, so close
// rather than equal, scaled by the column's absolute sum.
TEST_F(CudaKernelMath, ChunkedBiasGradMatchesCpu) {
  EXPECT_EQ(kmath::BiasGradChunks(0), 0);
  EXPECT_EQ(kmath::BiasGradChunks(1), 1);
  EXPECT_EQ(kmath::BiasGradChunks(kmath::kBiasGradChunkRows), 1);
  EXPECT_EQ(kmath::BiasGradChunks(kmath::kBiasGradChunkRows + 1), 2);
  for (int rows : {1, 64, 65, 200, 6272}) {  // 6272 = 8 images of the cnn's first conv
    for (int cols : {1, 32, 37}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
      const auto dy = RandomVector(size_t(rows) * cols, 800 + rows + cols);
      std::vector<float> want(cols);
      cpu_.BiasGrad(dy.data(), want.data(), rows, cols);
      const int chunks = kmath::BiasGradChunks(rows);
      std::vector<float> partial(size_t(chunks) * cols);
      for (int chunk = 0; chunk < chunks; ++chunk) {
        for (int c = 0; c < cols; ++c) {
          partial[size_t(chunk) * cols + c] =
              kmath::BiasGradPartial(dy.data(), rows, cols, chunk, c);
        }
      }
      for (int c = 0; c < cols; ++c) {
        double abs_sum = 0.0;
        for (int r = 0; r < rows; ++r) abs_sum += std::abs(dy[size_t(r) * cols + c]);
        const float got = kmath::BiasGradColumn(partial.data(), chunks, cols, c);
        ASSERT_NEAR(got, want[c], 1e-5 * abs_sum) << "column " << c;
        if (chunks == 1) {
          ASSERT_TRUE(SameBits(got, want[c]));
        }
      }
    }
  }
}

}  // namespace
}  // namespace fedmesh
