// CudaBatchedOps (core/cuda/) against CpuBatchedOps, op by op, and the BatchedTrainer on
// CUDA against the same trainer on the CPU (which equals the sequential Trainer:
// batched_trainer_test.cc). Needs a CUDA device: every test skips, saying why, without one.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/batched/batched_ops.h"
#include "core/batched/batched_trainer.h"
#include "core/cuda/cuda_batched_ops.h"
#include "core/cuda/device_info.h"
#include "core/rng.h"
#include "tests/core/batched_test_util.h"

namespace fedmesh {
namespace {

class BatchedCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason();
    auto ops = MakeCudaBatchedOps(0);
    ASSERT_TRUE(ops.ok()) << ops.status().ToString();
    gpu_ = std::move(*ops);
    cpu_ = MakeCpuBatchedOps(2);
  }
  void TearDown() override {
    if (gpu_) {
      EXPECT_TRUE(gpu_->Synchronize().ok()) << gpu_->Synchronize().ToString();
    }
  }

  // The same host values in both ops' memory.
  template <typename T>
  struct Pair {
    OpsBuffer<T> cpu, gpu;
  };
  template <typename T>
  Pair<T> Upload(const std::vector<T>& host) {
    Pair<T> p;
    p.cpu = std::move(OpsBuffer<T>::Make(cpu_.get(), host.size()).value());
    p.gpu = std::move(OpsBuffer<T>::Make(gpu_.get(), host.size()).value());
    cpu_->CopyFromHost(p.cpu.data(), host.data(), host.size() * sizeof(T));
    gpu_->CopyFromHost(p.gpu.data(), host.data(), host.size() * sizeof(T));
    return p;
  }
  template <typename T>
  std::pair<std::vector<T>, std::vector<T>> Download(const Pair<T>& p) {
    std::vector<T> a(p.cpu.size()), b(p.gpu.size());
    cpu_->CopyToHost(a.data(), p.cpu.data(), a.size() * sizeof(T));
    gpu_->CopyToHost(b.data(), p.gpu.data(), b.size() * sizeof(T));
    return {a, b};
  }
  static std::vector<float> Random(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(rng.Uniform(lo, hi));
    return v;
  }
  void ExpectNear(const Pair<float>& p, double tol, const char* what) {
    auto [a, b] = Download(p);
    EXPECT_LE(batched_test::MaxRelativeDiff(b, a), tol) << what;
  }
  void ExpectEqual(const Pair<float>& p, const char* what) {
    auto [a, b] = Download(p);
    EXPECT_TRUE(a == b) << what << ": max rel " << batched_test::MaxRelativeDiff(b, a);
  }

  std::unique_ptr<BatchedOps> cpu_, gpu_;
};

TEST_F(BatchedCuda, GemmEveryTransposeCombinationMatchesCpu) {
  constexpr int kB = 3, m = 7, n = 5, k = 9;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    const int64_t sa = m * k + 3, sb = k * n + 5, sc = m * n + 1;  // odd strides on purpose
    auto a = Upload(Random(kB * sa, 1 + t));
    auto b = Upload(Random(kB * sb, 11 + t));
    auto c = Upload(Random(kB * sc, 21 + t));
    for (BatchedOps* ops : {cpu_.get(), gpu_.get()}) {
      auto& pa = ops == cpu_.get() ? a.cpu : a.gpu;
      auto& pb = ops == cpu_.get() ? b.cpu : b.gpu;
      auto& pc = ops == cpu_.get() ? c.cpu : c.gpu;
      ops->Gemm(ta, tb, m, n, k, 0.5f, pa.data(), lda, sa, pb.data(), ldb, sb, 0.25f, pc.data(),
                ldc, sc, kB, GemmRows::kAll, nullptr);
    }
    ExpectNear(c, 1e-5, ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN"));
  }
}

// Clients with fewer sample rows than the padded shape: the CPU computes only the valid
// block, CUDA the whole padded one; the valid results agree.
TEST_F(BatchedCuda, GemmWithPerClientRowsMatchesCpuOnTheValidPart) {
  constexpr int kB = 3, m = 8, n = 6, k = 8;
  const std::vector<int32_t> rows_host = {8, 3, 1};
  auto rows = Upload(rows_host);
  // kM (forward: Y = X W^T): rows of X beyond rows[b] hold junk; compare C's valid rows.
  {
    auto x = Upload(Random(kB * m * k, 1));
    auto w = Upload(Random(kB * n * k, 2));
    auto y = Upload(std::vector<float>(kB * m * n, 7.0f));
    for (BatchedOps* ops : {cpu_.get(), gpu_.get()}) {
      const bool c = ops == cpu_.get();
      ops->Gemm(false, true, m, n, k, 1.0f, (c ? x.cpu : x.gpu).data(), k, m * k,
                (c ? w.cpu : w.gpu).data(), k, n * k, 0.0f, (c ? y.cpu : y.gpu).data(), n, m * n,
                kB, GemmRows::kM, (c ? rows.cpu : rows.gpu).data());
    }
    auto [a, b] = Download(y);
    for (int cl = 0; cl < kB; ++cl) {
      for (int i = 0; i < rows_host[cl] * n; ++i) {
        const size_t at = static_cast<size_t>(cl) * m * n + i;
        EXPECT_NEAR(b[at], a[at], 1e-5 * std::max(1.0f, std::fabs(a[at]))) << cl << "," << i;
      }
      for (int i = rows_host[cl] * n; i < m * n; ++i) EXPECT_EQ(a[cl * m * n + i], 0.0f);
    }
  }
  // kK (weight gradient: dW = dY^T X): dY is zero beyond rows[b]; X holds junk there.
  {
    std::vector<float> dy_host = Random(kB * m * n, 3);
    for (int cl = 0; cl < kB; ++cl) {
      std::fill(dy_host.begin() + cl * m * n + rows_host[cl] * n,
                dy_host.begin() + (cl + 1) * m * n, 0.0f);
    }
    auto dy = Upload(dy_host);
    auto x = Upload(Random(kB * m * k, 4));
    auto dw = Upload(std::vector<float>(kB * n * k, 7.0f));
    for (BatchedOps* ops : {cpu_.get(), gpu_.get()}) {
      const bool c = ops == cpu_.get();
      ops->Gemm(true, false, n, k, m, 1.0f, (c ? dy.cpu : dy.gpu).data(), n, m * n,
                (c ? x.cpu : x.gpu).data(), k, m * k, 0.0f, (c ? dw.cpu : dw.gpu).data(), k, n * k,
                kB, GemmRows::kK, (c ? rows.cpu : rows.gpu).data());
    }
    ExpectNear(dw, 1e-5, "kK");
  }
}

TEST_F(BatchedCuda, ElementwiseBiasSoftmaxAndSgdMatchCpu) {
  constexpr int kB = 4, rows = 6, cols = 10, row_stride = 8;
  const int64_t stride = row_stride * cols;
  auto x = Upload(Random(kB * stride, 1));
  auto y = Upload(std::vector<float>(kB * stride, 0.0f));
  auto dy = Upload(Random(kB * stride, 2));
  auto dx = Upload(std::vector<float>(kB * stride, 0.0f));
  auto mask = Upload(std::vector<float>(kB * stride, 0.0f));
  auto bias = Upload(Random(kB * 16, 3));
  auto dbias = Upload(std::vector<float>(kB * 16, 0.0f));
  std::vector<uint64_t> seed_host = {SplitMix64(1), SplitMix64(2), 0, ~0ull};
  auto seeds = Upload(seed_host);
  const size_t n = rows * cols;
  for (BatchedOps* ops : {cpu_.get(), gpu_.get()}) {
    const bool c = ops == cpu_.get();
    ops->AddBias((c ? x.cpu : x.gpu).data(), stride, (c ? bias.cpu : bias.gpu).data(), 16, rows,
                 cols, kB);
    ops->ReluForward((c ? x.cpu : x.gpu).data(), (c ? y.cpu : y.gpu).data(), n, stride, kB);
    ops->ReluBackward((c ? y.cpu : y.gpu).data(), (c ? dy.cpu : dy.gpu).data(),
                      (c ? dx.cpu : dx.gpu).data(), n, stride, kB);
    ops->BiasGrad((c ? dy.cpu : dy.gpu).data(), stride, (c ? dbias.cpu : dbias.gpu).data(), 16,
                  rows, cols, kB);
  }
  ExpectEqual(x, "AddBias");
  ExpectEqual(y, "ReluForward");
  ExpectEqual(dx, "ReluBackward");
  ExpectEqual(dbias, "BiasGrad");
  for (BatchedOps* ops : {cpu_.get(), gpu_.get()}) {
    const bool c = ops == cpu_.get();
    ops->DropoutForward((c ? x.cpu : x.gpu).data(), (c ? y.cpu : y.gpu).data(),
                        (c ? mask.cpu : mask.gpu).data(), n, stride, 0.3f,
                        (c ? seeds.cpu : seeds.gpu).data(), kB);
    ops->Multiply((c ? dy.cpu : dy.gpu).data(), (c ? mask.cpu : mask.gpu).data(),
                  (c ? dx.cpu : dx.gpu).data(), n, stride, kB);
  }
  ExpectEqual(mask, "dropout mask");
  ExpectEqual(y, "DropoutForward");
  ExpectEqual(dx, "Multiply");

  // Softmax: client rows 6, 3, 0 and 1 of at most 6.
  constexpr int kClasses = cols;
  std::vector<int32_t> label_host(kB * row_stride);
  for (size_t i = 0; i < label_host.size(); ++i)
    label_host[i] = static_cast<int32_t>((i * 7) % kClasses);
  auto labels = Upload(label_host);
  auto client_rows = Upload(std::vector<int32_t>{6, 3, 0, 1});
  auto loss = Upload(std::vector<double>{0.5, 0.0, 0.0, 1.0});
  auto correct = Upload(std::vector<int64_t>{0, 2, 0, 0});
  for (BatchedOps* ops : {cpu_.get(), gpu_.get()}) {
    const bool c = ops == cpu_.get();
    ops->SoftmaxCrossEntropy(
        (c ? x.cpu : x.gpu).data(), (c ? labels.cpu : labels.gpu).data(), row_stride, rows,
        kClasses, (c ? client_rows.cpu : client_rows.gpu).data(), (c ? dx.cpu : dx.gpu).data(),
        (c ? loss.cpu : loss.gpu).data(), (c ? correct.cpu : correct.gpu).data(), kB);
  }
  ExpectNear(dx, 1e-6, "dlogits");
  auto [lc, lg] = Download(loss);
  for (int b = 0; b < kB; ++b)
    EXPECT_NEAR(lg[b], lc[b], 1e-9 * std::max(1.0, std::fabs(lc[b]))) << b;
  auto [cc, cg] = Download(correct);
  EXPECT_EQ(cc, cg);

  // SGD with every term, client 1 inactive.
  auto w = Upload(Random(kB * stride, 5));
  auto v = Upload(Random(kB * stride, 6, -0.1, 0.1));
  auto anchor = Upload(Random(kB * stride, 7));
  auto active = Upload(std::vector<int32_t>{1, 0, 1, 1});
  const SgdStepParams p{0.1f, 0.9f, 1e-3f, 0.05f};
  for (BatchedOps* ops : {cpu_.get(), gpu_.get()}) {
    const bool c = ops == cpu_.get();
    ops->SgdStep((c ? w.cpu : w.gpu).data(), (c ? dy.cpu : dy.gpu).data(),
                 (c ? v.cpu : v.gpu).data(), (c ? anchor.cpu : anchor.gpu).data(), n, stride, p,
                 (c ? active.cpu : active.gpu).data(), kB);
  }
  // The CPU compiler may contract w - lr * v into an FMA; the kernel rounds the same or
  // within one ulp.
  ExpectNear(w, 1e-6, "SgdStep weights");
  ExpectNear(v, 1e-6, "SgdStep velocity");
}

// GatherRows: clients sharing rows of the data, padding rows, a client with no rows.
TEST_F(BatchedCuda, GatherRowsMatchesCpu) {
  constexpr int kB = 4, kWidth = 13, kMaxRows = 5, kStrideRows = 6;
  const int samples = 30;
  auto data = Upload(Random(size_t{samples} * kWidth, 11));
  std::vector<int32_t> label_host(samples);
  for (int i = 0; i < samples; ++i) label_host[i] = (i * 3) % 10;
  auto data_labels = Upload(label_host);
  auto offsets = Upload(std::vector<int64_t>{0, 10, 0, 25});
  auto rows = Upload(std::vector<int32_t>{5, 2, 0, 4});
  std::vector<int32_t> idx_host(kB * kStrideRows, 0);
  const int32_t picks[kB][kMaxRows] = {{9, 0, 3, 3, 1}, {19, 4, 0, 0, 0}, {0, 0, 0, 0, 0},
                                       {4, 0, 2, 1, 0}};
  for (int b = 0; b < kB; ++b)
    for (int r = 0; r < kMaxRows; ++r) idx_host[b * kStrideRows + r] = picks[b][r];
  auto idx = Upload(idx_host);
  const int64_t stride_inputs = int64_t{kStrideRows} * kWidth;
  auto inputs = Upload(std::vector<float>(kB * stride_inputs, 7.0f));
  auto labels = Upload(std::vector<int32_t>(kB * kStrideRows, 7));
  for (BatchedOps* ops : {cpu_.get(), gpu_.get()}) {
    const bool c = ops == cpu_.get();
    ops->GatherRows((c ? data.cpu : data.gpu).data(), (c ? data_labels.cpu : data_labels.gpu).data(),
                    (c ? offsets.cpu : offsets.gpu).data(), (c ? idx.cpu : idx.gpu).data(),
                    kStrideRows, (c ? rows.cpu : rows.gpu).data(), kMaxRows, kWidth,
                    (c ? inputs.cpu : inputs.gpu).data(), stride_inputs,
                    (c ? labels.cpu : labels.gpu).data(), kStrideRows, kB);
  }
  ExpectEqual(inputs, "GatherRows inputs");
  auto [lc, lg] = Download(labels);
  EXPECT_EQ(lc, lg);
  // The CPU result itself, against the definition.
  auto [in_cpu, in_gpu] = Download(inputs);
  const std::vector<float> host_data = Random(size_t{samples} * kWidth, 11);
  const int64_t offset_host[kB] = {0, 10, 0, 25};
  const int rows_host[kB] = {5, 2, 0, 4};
  for (int b = 0; b < kB; ++b) {
    for (int r = 0; r < kStrideRows; ++r) {
      for (int col = 0; col < kWidth; ++col) {
        const float want = r >= kMaxRows   ? 7.0f  // beyond max_rows: untouched
                           : r >= rows_host[b] ? 0.0f
                                               : host_data[(offset_host[b] + picks[b][r]) * kWidth + col];
        ASSERT_EQ(in_cpu[b * stride_inputs + r * kWidth + col], want) << b << " " << r << " " << col;
      }
      const int32_t want_label = r >= kMaxRows       ? 7
                                 : r >= rows_host[b] ? 0
                                                     : label_host[offset_host[b] + picks[b][r]];
      ASSERT_EQ(lc[b * kStrideRows + r], want_label) << b << " " << r;
    }
  }
}

TEST_F(BatchedCuda, TrainerOnCudaMatchesTrainerOnCpu) {
  const ModelSpec spec = batched_test::SmallSpec("mlp", 0.25f, {32, 16});
  TrainerOptions options;
  options.batch_size = 10;
  options.sgd.lr = 0.1f;
  options.sgd.momentum = 0.9f;
  options.sgd.weight_decay = 1e-3f;
  options.sgd.prox_mu = 0.05f;
  const auto cases = batched_test::MakeClients(spec, {23, 7, 40, 1, 15, 64}, true, true);
  auto on_cpu = BatchedTrainer::Create(spec, MakeCpuBatchedOps(2), 8);
  auto on_gpu = BatchedTrainer::Create(spec, std::move(gpu_), 8);
  ASSERT_TRUE(on_cpu.ok() && on_gpu.ok()) << on_gpu.status().ToString();
  auto want = batched_test::TrainBatched(**on_cpu, cases, options, 2);
  auto got = batched_test::TrainBatched(**on_gpu, cases, options, 2);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  for (size_t j = 0; j < cases.size(); ++j) {
    batched_test::ExpectSameOutcome((*got)[j], (*want)[j], 1e-4, "client " + std::to_string(j));
  }
  EXPECT_TRUE((*on_gpu)->ops().Synchronize().ok());
}

// Runs everywhere: the device one past the last (device 0 without a GPU or without CUDA).
TEST(BatchedCudaDevice, MissingDeviceIsUnavailableWithAHint) {
  auto ops = MakeCudaBatchedOps(CudaDeviceCount());
  ASSERT_FALSE(ops.ok());
  EXPECT_EQ(ops.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(ops.status().message().find("use device cpu or auto"), std::string::npos)
      << ops.status().message();
}

}  // namespace
}  // namespace fedmesh
