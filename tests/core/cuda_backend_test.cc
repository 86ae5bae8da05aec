// The CUDA backend against the CPU backend (the numerics reference) on fresh random inputs:
// every Backend method, a full local epoch of the mlp and the cnn, and the sticky error
// contract. GPU-only: every test skips, saying why, where no CUDA device is present (the
// host-side checks of the kernels' math are in cuda_kernel_math_test.cc).
#include "core/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <new>
#include <string>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cuda/device_info.h"
#include "core/env.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "tests/core/random_dataset.h"
#include "tests/core/close_rel.h"
#include "tests/core/random_vector.h"
#include "tests/core/same_epoch_check.h"
#include "core/trainer.h"

namespace fedmesh {
namespace {

// max |got - want| / max |want| (a floor keeps all-zero references meaningful): robust to
// the cancellation that makes element-wise relative errors of sums meaningless.
::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<float>& want,
                                 double rel) {
  return CloseRel(got, want, rel, "values", 1e-30);
}

template <typename T>
::testing::AssertionResult Same(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      return ::testing::AssertionFailure()
             << "differs at " << i << ": " << got[i] << " vs " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Sets an environment variable for the scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

WindowGeometry Geometry(int batch, int h, int w, int c, int k, int stride, int pad) {
  WindowGeometry g;
  g.batch = batch;
  g.in_h = h;
  g.in_w = w;
  g.channels = c;
  g.kernel_h = g.kernel_w = k;
  g.stride = stride;
  g.pad = pad;
  return g;
}

std::string Describe(const WindowGeometry& g) {
  return "N" + std::to_string(g.batch) + " " + std::to_string(g.in_h) + "x" +
         std::to_string(g.in_w) + "x" + std::to_string(g.channels) + " k" +
         std::to_string(g.kernel_h) + " s" + std::to_string(g.stride) + " p" +
         std::to_string(g.pad);
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) return;  // each test skips with the reason
    auto be = MakeCudaBackend(0);
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    gpu_ = std::move(*be);
  }
  void TearDown() override {
    if (gpu_) {
      const Status s = gpu_->Synchronize();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
  }

  template <typename T>
  DeviceBuffer<T> Up(const std::vector<T>& v) {
    DeviceBuffer<T> b(gpu_.get(), v.size());
    gpu_->CopyFromHost(b.data(), v.data(), v.size() * sizeof(T));
    return b;
  }
  template <typename T>
  std::vector<T> Down(const DeviceBuffer<T>& b) {
    std::vector<T> v(b.size());
    gpu_->CopyToHost(v.data(), b.data(), v.size() * sizeof(T));
    return v;
  }

  CpuBackend cpu_{1};
  std::unique_ptr<Backend> gpu_;
};

#define SKIP_WITHOUT_CUDA() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason()

TEST_F(CudaBackendTest, IdentifiesItself) {
  SKIP_WITHOUT_CUDA();
  EXPECT_EQ(gpu_->kind(), BackendKind::kCuda);
  EXPECT_EQ(gpu_->name().rfind("cuda:0 (", 0), 0u) << gpu_->name();
  EXPECT_NE(gpu_->name().find("SMs"), std::string::npos) << gpu_->name();
  gpu_->set_threads(8);
  EXPECT_EQ(gpu_->threads(), 1);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaBackendTest, MemoryRoundTripCopyAndFill) {
  SKIP_WITHOUT_CUDA();
  void* empty = gpu_->Allocate(0);
  EXPECT_NE(empty, nullptr);
  gpu_->Free(empty);
  gpu_->Free(nullptr);

  const size_t n = 1000003;  // odd, and more than one full grid of threads on small GPUs
  const auto host = RandomVector(n, 1);
  auto a = Up(host);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  EXPECT_TRUE(Same(Down(a), host));
  DeviceBuffer<float> b(gpu_.get(), n);
  gpu_->Copy(b.data(), a.data(), n * sizeof(float));
  EXPECT_TRUE(Same(Down(b), host));
  // A partial copy at an offset touches only its range.
  gpu_->Fill(b.data(), n, 3.5f);
  gpu_->Copy(b.data() + 10, a.data() + 20, 5 * sizeof(float));
  const auto got = Down(b);
  for (size_t i = 0; i < n; ++i) {
    const float want = (i >= 10 && i < 15) ? host[i + 10] : 3.5f;
    ASSERT_EQ(got[i], want) << i;
  }
  gpu_->Fill(b.data(), n, 0.0f);
  EXPECT_TRUE(Same(Down(b), std::vector<float>(n, 0.0f)));
}

TEST_F(CudaBackendTest, GemmAllTransposesWithPaddedLeadingDimensions) {
  SKIP_WITHOUT_CUDA();
  struct Dims {
    int m, n, k;
  };
  for (const Dims d : {Dims{37, 19, 53}, Dims{300, 257, 513}, Dims{1, 1, 1}, Dims{64, 10, 1}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE("m " + std::to_string(d.m) + " n " + std::to_string(d.n) + " k " +
                     std::to_string(d.k) + " ta " + std::to_string(ta) + " tb " +
                     std::to_string(tb));
        // Stored shapes (row-major): A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k].
        const int a_rows = ta ? d.k : d.m, a_cols = ta ? d.m : d.k;
        const int b_rows = tb ? d.n : d.k, b_cols = tb ? d.k : d.n;
        const int lda = a_cols + 3, ldb = b_cols + 1, ldc = d.n + 5;
        const auto a = RandomVector(size_t(a_rows) * lda, 10),
                   b = RandomVector(size_t(b_rows) * ldb, 11);
        auto c_cpu = RandomVector(size_t(d.m) * ldc, 12);
        const auto c0 = c_cpu;
        auto da = Up(a), db = Up(b), dc = Up(c_cpu);
        cpu_.Gemm(ta, tb, d.m, d.n, d.k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c_cpu.data(),
                  ldc);
        gpu_->Gemm(ta, tb, d.m, d.n, d.k, 0.5f, da.data(), lda, db.data(), ldb, 2.0f, dc.data(),
                   ldc);
        const auto c_gpu = Down(dc);
        EXPECT_TRUE(Close(c_gpu, c_cpu, 1e-4));
        for (int i = 0; i < d.m; ++i) {  // the padding columns of C are not written
          for (int j = d.n; j < ldc; ++j)
            ASSERT_EQ(c_gpu[size_t(i) * ldc + j], c0[size_t(i) * ldc + j]);
        }
      }
    }
  }
}

TEST_F(CudaBackendTest, BiasAxpyScaleAndSquaredNorm) {
  SKIP_WITHOUT_CUDA();
  // AddBias: one add per element, exact.
  const int rows = 1000, cols = 33;
  auto y = RandomVector(size_t(rows) * cols, 20);
  const auto bias = RandomVector(cols, 21);
  auto dy_ = Up(y);
  auto dbias = Up(bias);
  cpu_.AddBias(y.data(), bias.data(), rows, cols);
  gpu_->AddBias(dy_.data(), dbias.data(), rows, cols);
  EXPECT_TRUE(Same(Down(dy_), y));

  // BiasGrad on the one-pass (<= 64 rows) and the two-pass shapes, incl. the cnn's convs.
  struct Shape {
    int rows, cols;
  };
  for (const Shape s : {Shape{32, 256}, Shape{64, 10}, Shape{65, 10}, Shape{500, 512},
                        Shape{25088, 32}, Shape{1, 1}, Shape{3, 1000}}) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    const auto g = RandomVector(size_t(s.rows) * s.cols, 22 + s.rows);
    std::vector<float> want(s.cols);
    cpu_.BiasGrad(g.data(), want.data(), s.rows, s.cols);
    auto dg = Up(g);
    DeviceBuffer<float> dout(gpu_.get(), s.cols);
    gpu_->Fill(dout.data(), s.cols, 99.0f);
    gpu_->BiasGrad(dg.data(), dout.data(), s.rows, s.cols);
    const auto got = Down(dout);
    if (s.rows <= 64) {
      EXPECT_TRUE(Same(got, want));  // one pass: the CPU's order
    } else {
      EXPECT_TRUE(Close(got, want, 1e-4));
    }
  }

  const size_t n = 3000017;
  auto x = RandomVector(n, 30), z = RandomVector(n, 31);
  auto dx = Up(x), dz = Up(z);
  cpu_.Axpy(n, -0.75f, x.data(), z.data());
  gpu_->Axpy(n, -0.75f, dx.data(), dz.data());
  EXPECT_TRUE(Close(Down(dz), z, 1e-6));  // FMA or not: one rounding apart
  cpu_.Scale(n, 1.25f, x.data());
  gpu_->Scale(n, 1.25f, dx.data());
  EXPECT_TRUE(Same(Down(dx), x));

  const double want = cpu_.SquaredNorm(n, x.data());
  const double got = gpu_->SquaredNorm(n, dx.data());
  EXPECT_NEAR(got, want, 1e-10 * want);
  EXPECT_EQ(gpu_->SquaredNorm(0, dx.data()), 0.0);
  EXPECT_DOUBLE_EQ(gpu_->SquaredNorm(1, dx.data()), double(x[0]) * x[0]);
  // A second, smaller call reuses the reduction scratch.
  EXPECT_NEAR(gpu_->SquaredNorm(1000, dx.data()), cpu_.SquaredNorm(1000, x.data()),
              1e-10 * cpu_.SquaredNorm(1000, x.data()));
}

TEST_F(CudaBackendTest, ActivationsDropoutAndMultiplyMatchCpuExactly) {
  SKIP_WITHOUT_CUDA();
  const size_t n = 1000003;
  const auto x = RandomVector(n, 40), dy = RandomVector(n, 41);
  auto dx_ = Up(x), ddy = Up(dy);
  std::vector<float> y(n), dx(n);
  DeviceBuffer<float> gy(gpu_.get(), n), gdx(gpu_.get(), n);
  cpu_.ReluForward(x.data(), y.data(), n);
  gpu_->ReluForward(dx_.data(), gy.data(), n);
  EXPECT_TRUE(Same(Down(gy), y));
  cpu_.ReluBackward(y.data(), dy.data(), dx.data(), n);
  gpu_->ReluBackward(gy.data(), ddy.data(), gdx.data(), n);
  EXPECT_TRUE(Same(Down(gdx), dx));
  // In place (dx == dy), as the layers call it.
  auto inplace = Up(dy);
  gpu_->ReluBackward(gy.data(), inplace.data(), inplace.data(), n);
  EXPECT_TRUE(Same(Down(inplace), dx));

  for (float p : {0.25f, 0.5f}) {
    std::vector<float> dy_cpu(n), mask(n);
    cpu_.DropoutForward(x.data(), dy_cpu.data(), mask.data(), n, p, 1234);
    DeviceBuffer<float> gmask(gpu_.get(), n);
    gpu_->DropoutForward(dx_.data(), gy.data(), gmask.data(), n, p, 1234);
    EXPECT_TRUE(Same(Down(gmask), mask));  // the same mask on every backend
    EXPECT_TRUE(Same(Down(gy), dy_cpu));
    std::vector<float> prod(n);
    cpu_.Multiply(dy.data(), mask.data(), prod.data(), n);
    gpu_->Multiply(ddy.data(), gmask.data(), gdx.data(), n);
    EXPECT_TRUE(Same(Down(gdx), prod));
  }
}

TEST_F(CudaBackendTest, Im2ColAndCol2ImMatchCpuExactly) {
  SKIP_WITHOUT_CUDA();
  WindowGeometry g2 = Geometry(3, 6, 4, 1, 3, 1, 1);
  g2.kernel_w = 2;  // non-square kernel
  for (const WindowGeometry& g :
       {Geometry(2, 9, 7, 3, 3, 2, 1), g2, Geometry(4, 28, 28, 1, 5, 1, 2),
        Geometry(2, 14, 14, 32, 5, 1, 2), Geometry(1, 10, 7, 2, 2, 3, 1)}) {
    SCOPED_TRACE(Describe(g));
    const size_t xn = size_t(g.batch) * g.in_h * g.in_w * g.channels;
    const size_t cn =
        size_t(g.batch) * g.out_h() * g.out_w() * g.kernel_h * g.kernel_w * g.channels;
    const auto x = RandomVector(xn, 50), dcols = RandomVector(cn, 51);
    std::vector<float> cols(cn), dx(xn);
    cpu_.Im2Col(x.data(), g, cols.data());
    cpu_.Col2Im(dcols.data(), g, dx.data());
    auto gx = Up(x), gdcols = Up(dcols);
    DeviceBuffer<float> gcols(gpu_.get(), cn), gdx(gpu_.get(), xn);
    gpu_->Fill(gdx.data(), xn, 99.0f);  // Col2Im overwrites
    gpu_->Im2Col(gx.data(), g, gcols.data());
    gpu_->Col2Im(gdcols.data(), g, gdx.data());
    EXPECT_TRUE(Same(Down(gcols), cols));
    EXPECT_TRUE(Same(Down(gdx), dx));  // the gather sums in the CPU's order
  }
}

// Both convolution paths (cuDNN where the build has it, and im2col + cuBLAS) against the CPU,
// and bit-identical on a repeat (cuDNN is restricted to deterministic algorithms).
TEST_F(CudaBackendTest, Conv2dForwardAndBackwardMatchCpu) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    WindowGeometry g;
    int oc;
  };
  std::vector<CudaConv> paths = {CudaConv::kIm2col};
#if FEDMESH_TEST_HAVE_CUDNN
  paths.push_back(CudaConv::kCudnn);
  paths.push_back(CudaConv::kAuto);  // either, per geometry
#endif
  for (const CudaConv path : paths) {
    const bool cudnn = path == CudaConv::kCudnn;
    auto made = MakeCudaBackend(0, CudaBackendOptions{path});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    gpu_ = std::move(*made);
    SCOPED_TRACE(gpu_->name());
    const char* note = path == CudaConv::kIm2col ? "conv im2col"
                       : cudnn                   ? "conv cuDNN 9."
                                                 : "or im2col, measured per geometry";
    EXPECT_NE(gpu_->name().find(note), std::string::npos);
    for (const Case& c :
         {Case{Geometry(5, 9, 8, 3, 3, 2, 1), 4}, Case{Geometry(8, 28, 28, 1, 5, 1, 2), 32},
          Case{Geometry(4, 14, 14, 32, 5, 1, 2), 64}, Case{Geometry(3, 7, 5, 2, 1, 1, 0), 3},
          Case{Geometry(64, 14, 14, 32, 5, 1, 2), 64}}) {
      const WindowGeometry& g = c.g;
      SCOPED_TRACE(Describe(g) + " oc " + std::to_string(c.oc));
      const size_t row_len = size_t(g.kernel_h) * g.kernel_w * g.channels;
      const size_t xn = size_t(g.batch) * g.in_h * g.in_w * g.channels;
      const size_t yn = size_t(g.batch) * g.out_h() * g.out_w() * c.oc;
      const auto x = RandomVector(xn, 60), w = RandomVector(c.oc * row_len, 61),
                 b = RandomVector(c.oc, 62), dy = RandomVector(yn, 63);
      std::vector<float> y(yn), dw(w.size()), db(c.oc), dx(xn);
      std::vector<float> ws(cpu_.ConvWorkspaceFloats(g, c.oc));
      cpu_.Conv2dForward(x.data(), g, w.data(), b.data(), c.oc, y.data(), ws.data(), ws.size());
      cpu_.Conv2dBackward(x.data(), g, w.data(), c.oc, dy.data(), dw.data(), db.data(),
                          dx.data(), ws.data(), ws.size());

      auto gx = Up(x), gw = Up(w), gb = Up(b), gdy = Up(dy);
      DeviceBuffer<float> gy(gpu_.get(), yn), gdw(gpu_.get(), w.size()), gdb(gpu_.get(), c.oc),
          gdx(gpu_.get(), xn);
      const size_t wsn = gpu_->ConvWorkspaceFloats(g, c.oc);
      if (cudnn) {
        EXPECT_EQ(wsn, 0u);  // cuDNN keeps its own
      } else if (path == CudaConv::kIm2col || wsn != 0) {
        EXPECT_GE(wsn, size_t(g.batch) * g.out_h() * g.out_w() * row_len);
      }
      DeviceBuffer<float> gws(gpu_.get(), wsn);
      // Poisoned outputs: every element must be written.
      gpu_->Fill(gy.data(), yn, NAN);
      gpu_->Fill(gdx.data(), xn, NAN);
      gpu_->Fill(gdw.data(), w.size(), NAN);
      gpu_->Conv2dForward(gx.data(), g, gw.data(), gb.data(), c.oc, gy.data(), gws.data(), wsn);
      gpu_->Conv2dBackward(gx.data(), g, gw.data(), c.oc, gdy.data(), gdw.data(), gdb.data(),
                           gdx.data(), gws.data(), wsn);
      EXPECT_TRUE(Close(Down(gy), y, 1e-4));
      EXPECT_TRUE(Close(Down(gdw), dw, 1e-4));
      EXPECT_TRUE(Close(Down(gdb), db, 1e-4));
      EXPECT_TRUE(Close(Down(gdx), dx, 1e-4));

      // Again, and without dx (a first layer): the same outputs and parameter gradients,
      // bit for bit.
      const auto y1 = Down(gy), dw1 = Down(gdw), db1 = Down(gdb), dx1 = Down(gdx);
      gpu_->Fill(gy.data(), yn, 7.0f);
      gpu_->Fill(gdw.data(), w.size(), 7.0f);
      gpu_->Fill(gdb.data(), c.oc, 7.0f);
      gpu_->Fill(gdx.data(), xn, 7.0f);
      gpu_->Conv2dForward(gx.data(), g, gw.data(), gb.data(), c.oc, gy.data(), gws.data(), wsn);
      gpu_->Conv2dBackward(gx.data(), g, gw.data(), c.oc, gdy.data(), gdw.data(), gdb.data(),
                           gdx.data(), gws.data(), wsn);
      EXPECT_TRUE(Same(Down(gy), y1));
      EXPECT_TRUE(Same(Down(gdw), dw1));
      EXPECT_TRUE(Same(Down(gdx), dx1));
      gpu_->Fill(gdw.data(), w.size(), 7.0f);
      gpu_->Fill(gdb.data(), c.oc, 7.0f);
      gpu_->Conv2dBackward(gx.data(), g, gw.data(), c.oc, gdy.data(), gdw.data(), gdb.data(),
                           nullptr, gws.data(), wsn);
      EXPECT_TRUE(Same(Down(gdw), dw1));
      EXPECT_TRUE(Same(Down(gdb), db1));
    }
    const Status s = gpu_->Synchronize();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// FEDMESH_CUDA_CONV picks the path of a backend made with the default options.
TEST_F(CudaBackendTest, EnvironmentChoosesTheConvolutionPath) {
  SKIP_WITHOUT_CUDA();
  ScopedEnv im2col("FEDMESH_CUDA_CONV", "im2col");
  auto made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_NE((*made)->name().find("conv im2col"), std::string::npos) << (*made)->name();
#if FEDMESH_TEST_HAVE_CUDNN
  ScopedEnv cudnn("FEDMESH_CUDA_CONV", "cudnn");
  made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_NE((*made)->name().find("conv cuDNN"), std::string::npos) << (*made)->name();
  EXPECT_EQ((*made)->name().find("measured"), std::string::npos) << (*made)->name();
  made = MakeCudaBackend(0, CudaBackendOptions{CudaConv::kIm2col});  // options beat the variable
  ASSERT_TRUE(made.ok());
  EXPECT_NE((*made)->name().find("conv im2col"), std::string::npos) << (*made)->name();
#endif
}

TEST_F(CudaBackendTest, MaxPoolMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  // Non-overlapping (the cnn's 2x2/2) and overlapping (3x3/2, padded) windows; integer
  // inputs make ties, which must resolve to the same (first) input on both backends.
  for (const WindowGeometry& g :
       {Geometry(8, 28, 28, 32, 2, 2, 0), Geometry(3, 9, 7, 3, 3, 2, 1)}) {
    SCOPED_TRACE(Describe(g));
    const size_t xn = size_t(g.batch) * g.in_h * g.in_w * g.channels;
    const size_t yn = size_t(g.batch) * g.out_h() * g.out_w() * g.channels;
    Rng rng(70);
    std::vector<float> x(xn);
    for (auto& v : x) v = float(rng.UniformInt(4));
    const auto dy = RandomVector(yn, 71);
    std::vector<float> y(yn), dx(xn);
    std::vector<int32_t> arg(yn);
    cpu_.MaxPoolForward(x.data(), g, y.data(), arg.data());
    cpu_.MaxPoolBackward(dy.data(), arg.data(), yn, dx.data(), xn);
    auto gx = Up(x), gdy = Up(dy);
    DeviceBuffer<float> gy(gpu_.get(), yn), gdx(gpu_.get(), xn);
    DeviceBuffer<int32_t> garg(gpu_.get(), yn);
    gpu_->Fill(gdx.data(), xn, 99.0f);
    gpu_->MaxPoolForward(gx.data(), g, gy.data(), garg.data());
    gpu_->MaxPoolBackward(gdy.data(), garg.data(), yn, gdx.data(), xn);
    EXPECT_TRUE(Same(Down(gy), y));
    EXPECT_TRUE(Same(Down(garg), arg));
    if (g.stride == g.kernel_h) {
      EXPECT_TRUE(Same(Down(gdx), dx));  // each input receives at most one gradient
    } else {
      EXPECT_TRUE(Close(Down(gdx), dx, 1e-6));  // atomics add in any order
    }
  }
}

TEST_F(CudaBackendTest, SoftmaxCrossEntropyMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  for (int rows : {1, 37, 500, 5000}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const int classes = 10;
    auto logits = RandomVector(size_t(rows) * classes, 80 + rows);
    for (auto& z : logits) z *= 3.0f;
    Rng rng(81);
    std::vector<int32_t> labels(rows);
    for (auto& y : labels) y = int32_t(rng.UniformInt(classes));
    std::vector<float> d(logits.size());
    const auto want =
        cpu_.SoftmaxCrossEntropy(logits.data(), labels.data(), rows, classes, d.data());
    auto gl = Up(logits);
    auto glab = Up(labels);
    DeviceBuffer<float> gd(gpu_.get(), logits.size());
    const auto got = gpu_->SoftmaxCrossEntropy(gl.data(), glab.data(), rows, classes, gd.data());
    EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-9 * want.loss_sum);
    EXPECT_EQ(got.correct, want.correct);
    EXPECT_TRUE(Close(Down(gd), d, 1e-5));
    const auto no_d = gpu_->SoftmaxCrossEntropy(gl.data(), glab.data(), rows, classes, nullptr);
    EXPECT_EQ(no_d.loss_sum, got.loss_sum);
    EXPECT_EQ(no_d.correct, got.correct);
  }
}

TEST_F(CudaBackendTest, SgdStepMatchesCpuWithAndWithoutProx) {
  SKIP_WITHOUT_CUDA();
  const size_t n = 1000003;
  const auto w0 = RandomVector(n, 90), g = RandomVector(n, 91), v0 = RandomVector(n, 92),
             wg = RandomVector(n, 93);
  for (bool anchor : {false, true}) {
    SCOPED_TRACE(anchor ? "prox" : "no prox");
    const SgdStepParams p{0.1f, 0.9f, 0.01f, 0.5f};
    auto w = w0, v = v0;
    cpu_.SgdStep(w.data(), g.data(), v.data(), anchor ? wg.data() : nullptr, n, p);
    auto gw = Up(w0), gg = Up(g), gv = Up(v0), gwg = Up(wg);
    gpu_->SgdStep(gw.data(), gg.data(), gv.data(), anchor ? gwg.data() : nullptr, n, p);
    EXPECT_TRUE(Close(Down(gw), w, 1e-5));
    EXPECT_TRUE(Close(Down(gv), v, 1e-5));
  }
}

// A full local epoch on both backends from the same parameters and the same Env seed (so
// the same batches and dropout masks): the GPU must train the same model.
TEST_F(CudaBackendTest, LocalEpochMatchesCpuForMlpAndCnn) {
  SKIP_WITHOUT_CUDA();
  const Dataset data = RandomImages(512, 100);

  struct Case {
    std::string model;
    float dropout;
  };
  for (const Case& c : {Case{"mlp", 0.0f}, Case{"mlp", 0.25f}, Case{"cnn", 0.0f}}) {
    SCOPED_TRACE(c.model + " dropout " + std::to_string(c.dropout));
    ModelSpec spec;
    spec.name = c.model;
    spec.hidden = {128};
    spec.dropout = c.dropout;
    // The layer code on both (the GPU's default engine; dropout draws are the layers').
    auto cpu_model = BuildModel(spec, &cpu_, {BuiltinEngine::kLayers});
    auto gpu_model = BuildModel(spec, gpu_.get(), {BuiltinEngine::kLayers});
    ASSERT_TRUE(cpu_model.ok() && gpu_model.ok());
    (*cpu_model)->InitParams(7);
    (*gpu_model)->InitParams(7);
    ASSERT_TRUE(Same((*gpu_model)->GetParams(), (*cpu_model)->GetParams()));

    ExpectSameEpoch(**cpu_model, **gpu_model, data, MomentumEpochOptions());
  }
}

// A request the GPU really refuses (a petabyte) throws bad_alloc as the interface says,
// and the failure is kept: Synchronize names the call, repeatedly, and later work is a
// no-op instead of running on a backend in an unknown state.
TEST_F(CudaBackendTest, FailedAllocationIsStickyAndNamesTheCall) {
  SKIP_WITHOUT_CUDA();
  auto made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Backend> be = std::move(*made);
  DeviceBuffer<float> buf(be.get(), 1000);
  be->Fill(buf.data(), 1000, 1.0f);
  std::vector<float> host(1000, -7.0f);
  be->CopyToHost(host.data(), buf.data(), 1000 * sizeof(float));
  ASSERT_EQ(host, std::vector<float>(1000, 1.0f));
  ASSERT_TRUE(be->Synchronize().ok());

  EXPECT_THROW(be->Allocate(size_t(1) << 50), std::bad_alloc);
  const Status s = be->Synchronize();
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_NE(s.message().find("cudaMalloc"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("cudaErrorMemoryAllocation"), std::string::npos) << s.ToString();

  be->Fill(buf.data(), 1000, 2.0f);  // no-op
  std::fill(host.begin(), host.end(), -7.0f);
  be->CopyToHost(host.data(), buf.data(), 1000 * sizeof(float));  // no-op
  EXPECT_EQ(host, std::vector<float>(1000, -7.0f));
  EXPECT_EQ(be->SquaredNorm(1000, buf.data()), 0.0);
  EXPECT_EQ(be->Synchronize(), s);  // sticky: the first error, unchanged
  buf.reset();                      // freeing still works on a failed backend

  // Other backends on this thread are unaffected.
  ASSERT_TRUE(gpu_->Synchronize().ok());
  DeviceBuffer<float> ok(gpu_.get(), 10);
  gpu_->Fill(ok.data(), 10, 4.0f);
  EXPECT_EQ(Down(ok), std::vector<float>(10, 4.0f));
}

TEST_F(CudaBackendTest, InvalidGemmArgumentsNameCublas) {
  SKIP_WITHOUT_CUDA();
  auto made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Backend> be = std::move(*made);
  DeviceBuffer<float> a(be.get(), 64), b(be.get(), 64), c(be.get(), 64);
  // ldc = 2 < n = 8: cuBLAS rejects it (CUBLAS_STATUS_INVALID_VALUE).
  be->Gemm(false, false, 4, 8, 4, 1.0f, a.data(), 4, b.data(), 8, 0.0f, c.data(), 2);
  const Status s = be->Synchronize();
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_NE(s.message().find("cublasSgemm"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace fedmesh
