// BatchedTrainer over CpuBatchedOps (core/batched/): B clients trained at once give, client
// by client, what the sequential Trainer gives (weights, momentum, epoch statistics, and the
// Rng left where the codec seed is drawn next), for clients of different sizes, with
// momentum, weight decay, FedProx and dropout; bad input is refused. This runs in CI: the
// CUDA ops run the same trainer and are compared with these ops in batched_cuda_test.cc.
#include "core/batched/batched_trainer.h"

#include <gtest/gtest.h>

#include "core/batched/batched_ops.h"
#include "core/batched/cpu_batched_ops.h"
#include "core/cuda/device_info.h"
#include "tests/core/batched_test_util.h"
#include "tests/core/status_assertions.h"

namespace fedmesh {
namespace {

using batched_test::ClientCase;
using batched_test::ClientOutcome;
using testing::HasCode;

struct Variant {
  std::string name;
  std::string model;
  float dropout = 0.0f;
  std::vector<int> hidden = {16};
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  float prox_mu = 0.0f;
  bool velocity = false;  // odd clients start with a carried momentum buffer
};

std::string VariantName(const ::testing::TestParamInfo<Variant>& info) { return info.param.name; }
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class BatchedTrainerEquality : public ::testing::TestWithParam<Variant> {};

// Five clients: 23 samples (two full batches and a partial one), 7 (less than one batch),
// 40 (a multiple of the batch), 1 and 15; batch 10, two epochs. Given in an order that is
// not the trainer's internal one (most steps first).
TEST_P(BatchedTrainerEquality, FiveClientsEqualTheSequentialTrainer) {
  const Variant& v = GetParam();
  const ModelSpec spec = batched_test::SmallSpec(v.model, v.dropout, v.hidden);
  TrainerOptions options;
  options.batch_size = 10;
  options.sgd.lr = 0.1f;
  options.sgd.momentum = v.momentum;
  options.sgd.weight_decay = v.weight_decay;
  options.sgd.prox_mu = v.prox_mu;
  const auto cases = batched_test::MakeClients(spec, {23, 7, 40, 1, 15}, v.velocity, v.prox_mu > 0);
  constexpr int kEpochs = 2;

  auto trainer = BatchedTrainer::Create(spec, MakeCpuBatchedOps(2), /*capacity=*/6);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto batched = batched_test::TrainBatched(**trainer, cases, options, kEpochs);
  ASSERT_TRUE(batched.ok()) << batched.status().ToString();
  ASSERT_EQ(batched->size(), cases.size());
  for (size_t j = 0; j < cases.size(); ++j) {
    const ClientOutcome want = batched_test::TrainSequentially(spec, cases[j], options, kEpochs);
    // The weights moved: the comparison is not between two untouched copies.
    EXPECT_GT(batched_test::MaxRelativeDiff(want.params, cases[j].params), 1e-4);
    batched_test::ExpectSameOutcome(
        (*batched)[j], want, /*tol=*/0,
        "client " + std::to_string(j) + " (" + std::to_string(cases[j].data.size()) + " samples)");
  }
  const EpochStats& big = (*batched)[2].epochs[1];
  EXPECT_EQ(big.samples, 40);
  EXPECT_EQ(big.steps, 4);
  EXPECT_EQ((*batched)[1].epochs[0].steps, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, BatchedTrainerEquality,
    ::testing::Values(
        Variant{"logreg", "logreg"},
        Variant{"mlp_momentum_weight_decay", "mlp", 0.0f, {16}, 0.9f, 1e-3f, 0.0f, true},
        Variant{"mlp_fedprox", "mlp", 0.0f, {16}, 0.5f, 0.0f, 0.1f, true},
        Variant{
            "mlp_dropout_two_hidden_all_terms", "mlp", 0.3f, {16, 8}, 0.9f, 1e-3f, 0.05f, true}),
    VariantName);

// A trainer is reused across calls (the simulator's groups): fewer clients, a larger batch
// (buffers grow), more epochs; nothing of the previous call leaks into the next.
TEST(BatchedTrainer, ReuseWithOtherClientsAndLargerBatchStaysExact) {
  const ModelSpec spec = batched_test::SmallSpec("mlp", 0.2f);
  auto trainer = BatchedTrainer::Create(spec, MakeCpuBatchedOps(1), 4);
  ASSERT_TRUE(trainer.ok());
  TrainerOptions small;
  small.batch_size = 4;
  small.sgd.lr = 0.05f;
  small.sgd.momentum = 0.9f;
  const auto first = batched_test::MakeClients(spec, {9, 13, 4, 30}, true, false);
  ASSERT_TRUE(batched_test::TrainBatched(**trainer, first, small, 1).ok());

  TrainerOptions large = small;
  large.batch_size = 16;
  const auto second = batched_test::MakeClients(spec, {50, 3}, false, false);
  auto got = batched_test::TrainBatched(**trainer, second, large, 3);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (size_t j = 0; j < second.size(); ++j) {
    batched_test::ExpectSameOutcome((*got)[j],
                                    batched_test::TrainSequentially(spec, second[j], large, 3), 0,
                                    "client " + std::to_string(j));
  }
}

// CpuBatchedOps counting the bytes copied from the host (the clients' samples, weights and
// the steps' uploads).
class CountingOps final : public BatchedOps {
 public:
  // `kind`: what it says it is (kCuda makes the trainer keep samples resident as on a GPU).
  explicit CountingOps(std::unique_ptr<BatchedOps> ops, BackendKind kind = BackendKind::kCpu)
      : ops_(std::move(ops)), kind_(kind) {}
  size_t uploaded = 0;

  std::string name() const override { return ops_->name(); }
  BackendKind kind() const override { return kind_; }
  Status Synchronize() override { return ops_->Synchronize(); }
  Result<void*> Allocate(size_t bytes) override { return ops_->Allocate(bytes); }
  void Free(void* p) override { ops_->Free(p); }
  void CopyFromHost(void* dst, const void* src, size_t bytes) override {
    uploaded += bytes;
    ops_->CopyFromHost(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    ops_->CopyToHost(dst, src, bytes);
  }
  void Fill(float* x, size_t n, float value) override { ops_->Fill(x, n, value); }
  void GatherRows(const float* data, const int32_t* data_labels, const int64_t* offsets,
                  const int32_t* idx, int64_t stride_idx, const int32_t* rows, int max_rows,
                  int width, float* inputs, int64_t stride_inputs, int32_t* labels,
                  int64_t stride_labels, int batch) override {
    ops_->GatherRows(data, data_labels, offsets, idx, stride_idx, rows, max_rows, width, inputs,
                     stride_inputs, labels, stride_labels, batch);
  }
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta, float* c,
            int ldc, int64_t stride_c, int batch, GemmRows which, const int32_t* rows) override {
    ops_->Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
               stride_c, batch, which, rows);
  }
  void AddBias(float* y, int64_t stride_y, const float* bias, int64_t stride_bias, int rows,
               int cols, int batch) override {
    ops_->AddBias(y, stride_y, bias, stride_bias, rows, cols, batch);
  }
  void BiasGrad(const float* dy, int64_t stride_dy, float* dbias, int64_t stride_dbias, int rows,
                int cols, int batch) override {
    ops_->BiasGrad(dy, stride_dy, dbias, stride_dbias, rows, cols, batch);
  }
  void ReluForward(const float* x, float* y, size_t n, int64_t stride, int batch) override {
    ops_->ReluForward(x, y, n, stride, batch);
  }
  void ReluBackward(const float* y, const float* dy, float* dx, size_t n, int64_t stride,
                    int batch) override {
    ops_->ReluBackward(y, dy, dx, n, stride, batch);
  }
  void DropoutForward(const float* x, float* y, float* mask, size_t n, int64_t stride, float p,
                      const uint64_t* seeds, int batch) override {
    ops_->DropoutForward(x, y, mask, n, stride, p, seeds, batch);
  }
  void Multiply(const float* a, const float* b, float* out, size_t n, int64_t stride,
                int batch) override {
    ops_->Multiply(a, b, out, n, stride, batch);
  }
  void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int64_t row_stride,
                           int max_rows, int classes, const int32_t* rows, float* dlogits,
                           double* loss_sum, int64_t* correct, int batch) override {
    ops_->SoftmaxCrossEntropy(logits, labels, row_stride, max_rows, classes, rows, dlogits,
                              loss_sum, correct, batch);
  }
  void SgdStep(float* w, const float* grad, float* velocity, const float* w_global, size_t n,
               int64_t stride, const SgdStepParams& p, const int32_t* active,
               int batch) override {
    ops_->SgdStep(w, grad, velocity, w_global, n, stride, p, active, batch);
  }

 private:
  std::unique_ptr<BatchedOps> ops_;
  BackendKind kind_;
};

// A trainer over CountingOps that say they are `kind`; *ops is set to them.
Result<std::unique_ptr<BatchedTrainer>> CountingTrainer(const ModelSpec& spec, BackendKind kind,
                                                        int capacity, CountingOps** ops) {
  auto counting = std::make_unique<CountingOps>(MakeCpuBatchedOps(2), kind);
  *ops = counting.get();
  return BatchedTrainer::Create(spec, std::move(counting), capacity);
}

TrainerOptions CountingOptions() {
  TrainerOptions options;
  options.batch_size = 8;
  options.sgd.lr = 0.05f;
  return options;
}

// Trains the clients `order` (indices into `cases`, data ids index + 1) in one call and
// checks each against the sequential Trainer; returns the bytes `ops` uploaded meanwhile.
size_t TrainAndCount(BatchedTrainer& trainer, CountingOps& ops,
                     const std::vector<batched_test::ClientCase>& cases,
                     const std::vector<size_t>& order, const ModelSpec& spec,
                     const TrainerOptions& options) {
  std::vector<batched_test::ClientCase> picked;
  for (size_t j : order) picked.push_back(cases[j]);
  ops.uploaded = 0;
  // Each client trains on cases[order[i]].data itself (the same object as last time).
  std::vector<SeededEnv> envs;
  envs.reserve(order.size());
  std::vector<BatchedClient> clients(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const batched_test::ClientCase& c = cases[order[i]];
    envs.emplace_back(nullptr, c.seed);
    clients[i].params = c.params;
    clients[i].velocity = c.velocity;
    clients[i].data = &c.data;
    clients[i].data_id = order[i] + 1;
    clients[i].rng = &envs[i].rng();
  }
  auto got = trainer.Train(clients, options, 2);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  if (!got.ok()) return 0;
  for (size_t i = 0; i < order.size(); ++i) {
    batched_test::ClientOutcome o{std::move((*got)[i].params), std::move((*got)[i].velocity),
                                  std::move((*got)[i].epochs), envs[i].rng().NextU64()};
    batched_test::ExpectSameOutcome(o, batched_test::TrainSequentially(spec, picked[i], options, 2),
                                    0, "client " + std::to_string(order[i]));
  }
  return ops.uploaded;
}

// The clients' samples go to ops memory once: a Dataset two clients share is uploaded once,
// a second call with the same data ids uploads none of them, a call with another one
// uploads again (on the CPU only the last call's stay). Every call's results equal the
// sequential Trainer's.
TEST(BatchedTrainer, SamplesAreUploadedOnceAndSharedDatasetsOnce) {
  const ModelSpec spec = batched_test::SmallSpec("mlp", 0.1f);
  CountingOps* ops = nullptr;
  auto trainer = CountingTrainer(spec, BackendKind::kCpu, 4, &ops);
  ASSERT_TRUE(trainer.ok());
  TrainerOptions options = CountingOptions();
  options.sgd.momentum = 0.9f;
  auto cases = batched_test::MakeClients(spec, {23, 40, 23}, true, false);
  cases[2].data = cases[0].data;  // client 2 trains on client 0's Dataset object
  const std::vector<size_t> data_of = {0, 1, 0};
  const size_t sample_bytes = sizeof(float) * ShapeSize(spec.input_shape) + sizeof(int32_t);
  const size_t distinct = (23 + 40) * sample_bytes;  // what the first call must upload

  auto check = [&](const std::vector<batched_test::ClientOutcome>& got, const char* call) {
    for (size_t j = 0; j < cases.size(); ++j) {
      batched_test::ExpectSameOutcome(
          got[j], batched_test::TrainSequentially(spec, cases[j], options, 2), 0,
          std::string(call) + " client " + std::to_string(j));
    }
  };
  auto first = batched_test::TrainBatched(**trainer, cases, options, 2, data_of);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  check(*first, "first call");
  const size_t first_bytes = ops->uploaded;
  // The calls upload the same weights and steps; they differ in the samples (and the three
  // slots' row offsets) alone.
  const size_t offsets = 3 * sizeof(int64_t);
  ops->uploaded = 0;
  auto second = batched_test::TrainBatched(**trainer, cases, options, 2, data_of);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  check(*second, "second call");
  EXPECT_EQ(first_bytes - ops->uploaded, distinct + offsets);  // no samples this time

  ops->uploaded = 0;
  auto third = batched_test::TrainBatched(**trainer, cases, options, 2, {0, 1, 2});
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  check(*third, "third call");
  // Three Datasets now: all three uploaded (the CPU kept the last call's alone, and that
  // did not fit the new one beside it).
  EXPECT_EQ(ops->uploaded - first_bytes, 23 * sample_bytes);

  // Without data ids every call uploads.
  ops->uploaded = 0;
  ASSERT_TRUE(batched_test::TrainBatched(**trainer, cases, options, 2).ok());
  const size_t no_ids = ops->uploaded;
  ops->uploaded = 0;
  ASSERT_TRUE(batched_test::TrainBatched(**trainer, cases, options, 2).ok());
  EXPECT_EQ(ops->uploaded, no_ids);
  EXPECT_GE(no_ids, (23 + 40 + 23) * sample_bytes);
}

// On a GPU the samples stay resident across calls: clients trained one per call (the
// simulator's "one at a time") become resident, and then neither they nor all of them at
// once in another order upload samples.
TEST(BatchedTrainer, OnAGpuSamplesStayResidentAcrossCalls) {
  const ModelSpec spec = batched_test::SmallSpec("mlp");
  CountingOps* ops = nullptr;
  auto trainer = CountingTrainer(spec, BackendKind::kCuda, 3, &ops);
  ASSERT_TRUE(trainer.ok());
  const TrainerOptions options = CountingOptions();
  const auto cases = batched_test::MakeClients(spec, {23, 40, 17}, false, false);
  const size_t sample_bytes = sizeof(float) * ShapeSize(spec.input_shape) + sizeof(int32_t);
  const size_t sizes[3] = {23, 40, 17};
  size_t first[3];
  for (size_t j = 0; j < 3; ++j) {
    first[j] = TrainAndCount(**trainer, *ops, cases, {j}, spec, options);
    EXPECT_GE(first[j], sizes[j] * sample_bytes) << j;
  }
  // The buffer doubles as clients arrive (clearing what it held), so one round more makes
  // every client resident; the round after that uploads only weights, steps and offsets.
  for (size_t j = 0; j < 3; ++j) TrainAndCount(**trainer, *ops, cases, {j}, spec, options);
  for (size_t j = 0; j < 3; ++j) {
    // Less by the samples exactly, give or take the one slot's offset (8 bytes, sent only
    // when it changed since the call before).
    const double less = static_cast<double>(first[j]) -
                        static_cast<double>(TrainAndCount(**trainer, *ops, cases, {j}, spec, options));
    EXPECT_NEAR(less, static_cast<double>(sizes[j] * sample_bytes), sizeof(int64_t)) << j;
  }
  size_t without_samples = 0;
  for (size_t j = 0; j < 3; ++j) without_samples += first[j] - sizes[j] * sample_bytes;
  EXPECT_LT(TrainAndCount(**trainer, *ops, cases, {2, 0, 1}, spec, options), without_samples);
}

TEST(BatchedTrainer, RefusesModelsWithOtherLayers) {
  ModelSpec cnn;
  cnn.name = "cnn";
  auto t = BatchedTrainer::Create(cnn, MakeCpuBatchedOps(1), 4);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(HasCode(t.status(), StatusCode::kUnimplemented, "Conv2d"));
  EXPECT_TRUE(HasCode(t.status(), StatusCode::kUnimplemented, "logreg, mlp"));
  EXPECT_TRUE(HasCode(
      BatchedTrainer::Create(batched_test::SmallSpec("mlp"), MakeCpuBatchedOps(1), 0).status(),
      StatusCode::kInvalidArgument, "at least 1"));
}

TEST(BatchedTrainer, RefusesInputThatDoesNotFitNamingTheClient) {
  const ModelSpec spec = batched_test::SmallSpec("mlp");
  auto trainer = BatchedTrainer::Create(spec, MakeCpuBatchedOps(1), 2);
  ASSERT_TRUE(trainer.ok());
  TrainerOptions options;
  options.batch_size = 8;
  auto cases = batched_test::MakeClients(spec, {10, 12, 5}, false, false);
  auto run = [&](std::vector<ClientCase> c, const TrainerOptions& o = TrainerOptions{}) {
    return batched_test::TrainBatched(**trainer, c, o, 1).status();
  };
  // More clients than the capacity.
  EXPECT_TRUE(HasCode(run(cases), StatusCode::kInvalidArgument, "at most 2"));
  cases.pop_back();
  // Parameters of the wrong size.
  auto wrong = cases;
  wrong[1].params.pop_back();
  EXPECT_TRUE(HasCode(run(wrong), StatusCode::kInvalidArgument, "batched client 1"));
  // A momentum buffer of the wrong size.
  wrong = cases;
  wrong[0].velocity.assign(3, 0.0f);
  EXPECT_TRUE(HasCode(run(wrong), StatusCode::kInvalidArgument, "optimizer state"));
  // Data of another shape, and no data at all.
  wrong = cases;
  wrong[1].data.sample_shape = {5, 5, 1};
  wrong[1].data.features.resize(wrong[1].data.size() * 25);
  EXPECT_TRUE(HasCode(run(wrong), StatusCode::kInvalidArgument, "batched client 1"));
  wrong = cases;
  wrong[0].data = Dataset{{6, 6, 1}, 5, {}, {}, {}, 0, {}};
  EXPECT_TRUE(HasCode(run(wrong), StatusCode::kInvalidArgument, "empty dataset"));
  // FedProx anchors for some clients only.
  TrainerOptions prox;
  prox.sgd.prox_mu = 0.1f;
  wrong = cases;
  wrong[0].anchor = wrong[0].params;
  EXPECT_TRUE(HasCode(run(wrong, prox), StatusCode::kInvalidArgument, "every client"));
  // Bad options and epochs.
  TrainerOptions bad_lr;
  bad_lr.sgd.lr = -1;
  EXPECT_TRUE(HasCode(run(cases, bad_lr), StatusCode::kInvalidArgument, "learning rate"));
  std::vector<BatchedClient> none;
  EXPECT_TRUE(HasCode((*trainer)->Train(none, options, 0).status(), StatusCode::kInvalidArgument,
                      "epochs"));
  // The trainer still works after the refusals.
  EXPECT_TRUE(run(cases).ok());
}

// ---- the ops' contracts that the trainer relies on, checked directly ----------------------

TEST(CpuBatchedOps, InactiveClientsKeepWeightsAndVelocity) {
  auto ops = MakeCpuBatchedOps(2);
  constexpr int kN = 5, kStride = 8, kB = 3;
  auto w = OpsBuffer<float>::Make(ops.get(), kB * kStride);
  auto g = OpsBuffer<float>::Make(ops.get(), kB * kStride);
  auto v = OpsBuffer<float>::Make(ops.get(), kB * kStride);
  auto active = OpsBuffer<int32_t>::Make(ops.get(), kB);
  ASSERT_TRUE(w.ok() && g.ok() && v.ok() && active.ok());
  ops->Fill(w->data(), kB * kStride, 1.0f);
  ops->Fill(g->data(), kB * kStride, 0.5f);
  ops->Fill(v->data(), kB * kStride, 0.25f);
  const int32_t flags[kB] = {1, 0, 7};
  ops->CopyFromHost(active->data(), flags, sizeof flags);
  SgdStepParams p{0.1f, 0.9f, 0.0f, 0.0f};
  ops->SgdStep(w->data(), g->data(), v->data(), nullptr, kN, kStride, p, active->data(), kB);
  std::vector<float> hw(kB * kStride), hv(kB * kStride);
  ops->CopyToHost(hw.data(), w->data(), hw.size() * sizeof(float));
  ops->CopyToHost(hv.data(), v->data(), hv.size() * sizeof(float));
  for (int b = 0; b < kB; ++b) {
    for (int i = 0; i < kStride; ++i) {
      const bool stepped = flags[b] != 0 && i < kN;
      EXPECT_EQ(hv[b * kStride + i], stepped ? 0.9f * 0.25f + 0.5f : 0.25f) << b << "," << i;
      EXPECT_EQ(hw[b * kStride + i], stepped ? 1.0f - 0.1f * (0.9f * 0.25f + 0.5f) : 1.0f);
    }
  }
  EXPECT_TRUE(ops->Synchronize().ok());
}

TEST(CpuBatchedOps, SoftmaxPaddingRowsGetZeroGradientAndNoLoss) {
  auto ops = MakeCpuBatchedOps(1);
  auto backend = MakeCpuBackend(1);
  constexpr int kClasses = 3, kRowStride = 4, kB = 2;
  std::vector<float> logits(kB * kRowStride * kClasses);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  const std::vector<int32_t> labels = {0, 2, 1, 1, 2, 0, 0, 0};
  const int32_t rows[kB] = {3, 0};
  auto d_logits = OpsBuffer<float>::Make(ops.get(), logits.size());
  auto d_labels = OpsBuffer<int32_t>::Make(ops.get(), labels.size());
  auto d_rows = OpsBuffer<int32_t>::Make(ops.get(), kB);
  auto dlogits = OpsBuffer<float>::Make(ops.get(), logits.size());
  auto loss = OpsBuffer<double>::Make(ops.get(), kB);
  auto correct = OpsBuffer<int64_t>::Make(ops.get(), kB);
  ops->CopyFromHost(d_logits->data(), logits.data(), logits.size() * sizeof(float));
  ops->CopyFromHost(d_labels->data(), labels.data(), labels.size() * sizeof(int32_t));
  ops->CopyFromHost(d_rows->data(), rows, sizeof rows);
  ops->Fill(dlogits->data(), logits.size(), 9.0f);
  ops->SoftmaxCrossEntropy(d_logits->data(), d_labels->data(), kRowStride, kRowStride, kClasses,
                           d_rows->data(), dlogits->data(), loss->data(), correct->data(), kB);
  std::vector<float> got(logits.size());
  ops->CopyToHost(got.data(), dlogits->data(), got.size() * sizeof(float));
  std::vector<double> got_loss(kB);
  ops->CopyToHost(got_loss.data(), loss->data(), kB * sizeof(double));
  // Client 0's three rows are exactly the backend's; the rest are padding.
  std::vector<float> want(3 * kClasses);
  const auto r =
      backend->SoftmaxCrossEntropy(logits.data(), labels.data(), 3, kClasses, want.data());
  EXPECT_EQ(got_loss[0], r.loss_sum);
  EXPECT_EQ(got_loss[1], 0.0);
  for (int i = 0; i < 3 * kClasses; ++i) EXPECT_EQ(got[i], want[i]);
  for (size_t i = 3 * kClasses; i < got.size(); ++i) EXPECT_EQ(got[i], 0.0f) << i;
}

// ---- device selection --------------------------------------------------------------------

TEST(BatchedOpsFactory, NamesAndMissingGpu) {
  auto cpu = MakeBatchedOps("cpu", 1);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->kind(), BackendKind::kCpu);
  EXPECT_TRUE(HasCode(MakeBatchedOps("tpu", 1).status(), StatusCode::kInvalidArgument, "cuda:N"));
  EXPECT_TRUE(HasCode(ValidateDeviceName("cuda:x"), StatusCode::kInvalidArgument));
  EXPECT_TRUE(HasCode(ValidateDeviceName("cuda:-1"), StatusCode::kInvalidArgument));
  EXPECT_TRUE(ValidateDeviceName("cuda:3").ok());
  if (CudaDeviceCount() > 0)
    GTEST_SKIP() << "a CUDA device is present: " << CudaDeviceDescription(0);
  EXPECT_TRUE(HasCode(MakeBatchedOps("cuda", 1).status(), StatusCode::kUnavailable,
                      "use device cpu or auto"));
  EXPECT_TRUE(HasCode(MakeBatchedOps("cuda:1", 1).status(), StatusCode::kUnavailable));
  auto autod = MakeBatchedOps("auto", 1);
  ASSERT_TRUE(autod.ok());
  EXPECT_EQ((*autod)->kind(), BackendKind::kCpu);
}

}  // namespace
}  // namespace fedmesh
