// Gradient all-reduce is SGD with the ranks' combined batch (issue 21, "the same accuracy as
// one process with 4x the batch"): 4 ranks, each a Trainer on its own shard of Fashion-MNIST
// with batch 32 whose gradients the ring averages every step (what fedmesh-node's allreduce
// mode does, here over the in-process hub), against one process stepping the mlp with batch
// 128 made of the same 4 x 32 examples. The models agree to float rounding and so do their
// test accuracies; the ranks' models are bit-identical. (The real-process test in
// tests/node/allreduce_test.cc compares against one process that draws its own batches, so
// it also carries the spread between shuffles.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include "collective/communicator.h"
#include "collective/in_process_hub.h"
#include "core/data/fashion_mnist.h"
#include "core/env.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/trainer.h"

namespace fedmesh::collective {
namespace {

constexpr int kRanks = 4;
constexpr int kShard = 1024;  // examples per rank
constexpr int kBatch = 32;    // per rank
constexpr int kEpochs = 2;
constexpr float kLr = 0.1f;

uint64_t RankSeed(int r) { return 100 + static_cast<uint64_t>(r); }

std::unique_ptr<Model> Mlp(Backend* backend, const std::vector<float>& params) {
  auto m = BuildModel(ModelSpec{}, backend);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE((*m)->SetParams(params).ok());
  return std::move(*m);
}

TEST(DataParallelSgd, FourRanksAreOneProcessWithTheirCombinedBatch) {
  auto train = LoadFashionMnist(DataSplit::kTrain);
  auto test = LoadFashionMnist(DataSplit::kTest);
  if (!train.ok() || !test.ok()) GTEST_SKIP() << "no Fashion-MNIST (apt-get install dataset-fashion-mnist)";
  std::vector<uint32_t> first(kRanks * kShard), held_out(2000);
  std::iota(first.begin(), first.end(), 0u);
  std::iota(held_out.begin(), held_out.end(), 0u);
  const Dataset all = train->Subset(first);
  const Dataset eval = test->Subset(held_out);

  std::vector<float> init;
  {
    auto be = MakeCpuBackend(1);
    auto m = BuildModel(ModelSpec{}, be.get());
    ASSERT_TRUE(m.ok());
    (*m)->InitParams(7);
    init = (*m)->GetParams();
  }

  // The ranks: rank r trains on examples [r * kShard, (r + 1) * kShard).
  std::vector<std::vector<float>> rank_params(kRanks);
  std::vector<Status> result(kRanks);
  {
    InProcessHub hub(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        CommunicatorOptions co;
        co.ring.size = kRanks;
        co.ring.rank = r;
        auto comm = Communicator::Create(co, hub.endpoint(r));
        if (!comm.ok()) {
          result[r] = comm.status();
          return;
        }
        std::vector<uint32_t> mine(kShard);
        std::iota(mine.begin(), mine.end(), static_cast<uint32_t>(r * kShard));
        const Dataset shard = all.Subset(mine);
        auto be = MakeCpuBackend(1);
        std::unique_ptr<Model> model = Mlp(be.get(), init);
        TrainerOptions o;
        o.batch_size = kBatch;
        o.sgd.lr = kLr;
        o.gradient_hook = [&](std::span<float> g) { return (*comm)->Allreduce(g, ReduceOp::kAverage); };
        SeededEnv env(nullptr, RankSeed(r));
        Trainer trainer(model.get(), o, &env);
        for (int e = 0; e < kEpochs && result[r].ok(); ++e) result[r] = trainer.TrainEpoch(shard).status();
        rank_params[r] = model->GetParams();
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(result[r].ok()) << r << ": " << result[r].ToString();
    EXPECT_EQ(rank_params[r], rank_params[0]) << "rank " << r << "'s model differs from rank 0's";
  }

  // One process, batch 128: step k takes each rank's k-th batch of 32, in the order each
  // rank's Trainer shuffled its shard (the same seeded generators, one shuffle an epoch).
  auto be = MakeCpuBackend(1);
  std::unique_ptr<Model> one = Mlp(be.get(), init);
  one->Reserve(kRanks * kBatch);
  std::vector<Rng> rngs;  // SeededEnv(nullptr, seed)'s generator
  for (int r = 0; r < kRanks; ++r) rngs.emplace_back(RankSeed(r));
  uint64_t step = 0;
  for (int e = 0; e < kEpochs; ++e) {
    std::vector<std::vector<uint32_t>> orders(kRanks, std::vector<uint32_t>(kShard));
    for (int r = 0; r < kRanks; ++r) {
      std::iota(orders[r].begin(), orders[r].end(), 0u);
      rngs[r].Shuffle(orders[r]);
    }
    for (int k = 0; k < kShard / kBatch; ++k) {
      std::vector<uint32_t> batch;
      for (int r = 0; r < kRanks; ++r)
        for (int i = 0; i < kBatch; ++i) batch.push_back(static_cast<uint32_t>(r * kShard) + orders[r][k * kBatch + i]);
      one->LoadBatch(all, batch.data(), static_cast<int>(batch.size()));
      one->ForwardBackwardSgd(static_cast<int>(batch.size()), SplitMix64(step++), kLr);
    }
  }
  const std::vector<float> reference = one->GetParams();
  ASSERT_EQ(reference.size(), rank_params[0].size());
  double max_diff = 0, max_moved = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(reference[i] - rank_params[0][i])));
    max_moved = std::max(max_moved, static_cast<double>(std::fabs(reference[i] - init[i])));
  }
  EXPECT_LT(max_diff, 1e-4) << "the ranks did not step as one process with their combined batch";
  EXPECT_GT(max_moved, 1e-2) << "training did not move the model";

  // Both score the same held-out images alike.
  SystemEnv env(1);
  Trainer scorer(one.get(), TrainerOptions{}, &env);
  auto ref_eval = scorer.Evaluate(eval);
  ASSERT_TRUE(ref_eval.ok());
  ASSERT_TRUE(one->SetParams(rank_params[0]).ok());
  auto ranks_eval = scorer.Evaluate(eval);
  ASSERT_TRUE(ranks_eval.ok());
  EXPECT_GT(ranks_eval->accuracy, 0.70);
  EXPECT_NEAR(ranks_eval->accuracy, ref_eval->accuracy, 0.001)
      << "4 ranks " << ranks_eval->accuracy << ", one process with 4x the batch " << ref_eval->accuracy;
  std::printf("4 ranks x batch %d: test accuracy %.4f; one process, batch %d: %.4f; largest weight difference %.2e\n",
              kBatch, ranks_eval->accuracy, kRanks * kBatch, ref_eval->accuracy, max_diff);
}

}  // namespace
}  // namespace fedmesh::collective
