// fedmesh-sim with [sim] batched_clients (core/batched/): the aggregator mode trains the
// pending clients in groups through the BatchedTrainer instead of one model per worker.
// On the CPU that changes nothing in the results: the metrics, the bytes on the wire and
// the final model equal the per-client run's, and stay deterministic. Config checks name
// the key; a CUDA device that is not there is Unavailable.
#include <gtest/gtest.h>

#include <cmath>

#include "core/cuda/device_info.h"
#include "core/data/data_source.h"
#include "sim/sim_config.h"
#include "sim/simulation.h"
#include "tests/sim/sim_test_util.h"

namespace fedmesh {
namespace {

SimOptions Small() { return SmallSim(3); }

void ExpectSameRun(const SimReport& batched, const SimReport& per_client) {
  ASSERT_EQ(batched.rounds.size(), per_client.rounds.size());
  for (size_t i = 0; i < per_client.rounds.size(); ++i) {
    const SimRoundMetrics &a = batched.rounds[i], &b = per_client.rounds[i];
    SCOPED_TRACE("round " + std::to_string(b.round));
    ASSERT_TRUE(a.test_accuracy && b.test_accuracy);
    EXPECT_NEAR(*a.test_accuracy, *b.test_accuracy, 1e-6);
    EXPECT_NEAR(*a.test_loss, *b.test_loss, 1e-6);
    EXPECT_EQ(a.bytes_up, b.bytes_up);
    EXPECT_EQ(a.bytes_down, b.bytes_down);
    EXPECT_EQ(a.participants, b.participants);
    EXPECT_EQ(a.dropped, b.dropped);
    EXPECT_EQ(a.sim_time_s, b.sim_time_s);
  }
  EXPECT_EQ(batched.client_updates, per_client.client_updates);
  // On the CPU the batched trainer runs the very kernels of the per-client one.
  EXPECT_TRUE(batched.final_model == per_client.final_model);
}

TEST(BatchedSimulation, FourAtOnceGiveThePerClientMetrics) {
  REQUIRE_DATA();
  SimOptions per_client = Small();
  SimOptions batched = per_client;
  batched.batched_clients = 4;  // 5 per round: a group of 4 and one of 1
  auto a = RunSimulation(batched);
  auto b = RunSimulation(per_client);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectSameRun(*a, *b);
  EXPECT_NE(a->training.find("batched, up to 4 clients at once on cpu"), std::string::npos)
      << a->training;
  EXPECT_NE(b->training.find("per client"), std::string::npos) << b->training;
  EXPECT_GT(*a->rounds.back().test_accuracy, 0.5);
}

// Momentum buffers carried between selections, FedProx anchors, dropout masks, a lossy codec
// with error feedback (its seed is drawn after the batched shuffles), dropped clients and
// two local epochs: still the per-client run.
TEST(BatchedSimulation, CarriedStateProxDropoutAndCodecsStayEqual) {
  REQUIRE_DATA();
  SimOptions per_client = Small();
  per_client.clients = 8;
  per_client.rounds = 4;
  per_client.local_epochs = 2;
  per_client.model.dropout = 0.2f;
  per_client.model.hidden = {32};
  per_client.trainer.sgd.momentum = 0.5f;
  per_client.strategy = "fedprox";
  per_client.codec = "topk:0.05|int8";
  per_client.dropout = 0.2;
  per_client.min_clients = 1;
  SimOptions batched = per_client;
  batched.batched_clients = 3;
  auto a = RunSimulation(batched);
  auto b = RunSimulation(per_client);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectSameRun(*a, *b);
}

TEST(BatchedSimulation, DeterministicWhateverTheThreads) {
  REQUIRE_DATA();
  SimOptions o = Small();
  o.batched_clients = 5;
  o.codec = "topk:0.05|int8";
  SimOptions one = o;
  one.threads = 1;
  auto a = RunSimulation(o);
  auto b = RunSimulation(one);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  ASSERT_EQ(a->rounds.size(), b->rounds.size());
  for (size_t i = 0; i < a->rounds.size(); ++i) {
    EXPECT_EQ(a->rounds[i].ToJson().str(), b->rounds[i].ToJson().str());
  }
  EXPECT_TRUE(a->final_model == b->final_model);
}

TEST(BatchedSimulation, OptionsAreCheckedWithTheKey) {
  SimOptions o = Small();
  o.batched_clients = 4;
  o.model.name = "cnn";
  EXPECT_NE(Validate(o).message().find("batched_clients trains models of Dense"), std::string::npos)
      << Validate(o).ToString();
  o = Small();
  o.batched_clients = 4;
  o.mode = SimMode::kGossip;
  EXPECT_NE(Validate(o).message().find("aggregator mode only"), std::string::npos);
  o = Small();
  o.device = "cuda";  // without batched_clients: per-client training is CPU only
  EXPECT_NE(Validate(o).message().find("set batched_clients >= 1"), std::string::npos);
  o.device = "gpu";
  EXPECT_EQ(Validate(o).code(), StatusCode::kInvalidArgument);

  auto bad = LoadSimConfig("", {"sim.batched_clients=8", "sim.model=cnn"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[sim] batched_clients"), std::string::npos)
      << bad.status().ToString();
  bad = LoadSimConfig("", {"sim.device=tpu"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[sim] device"), std::string::npos)
      << bad.status().ToString();
  auto good = LoadSimConfig("", {"sim.batched_clients=16", "sim.device=cuda:1"});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->batched_clients, 16u);
  EXPECT_EQ(good->device, "cuda:1");
}

TEST(BatchedSimulation, CudaWithoutAGpuIsUnavailableWithAHint) {
  if (CudaDeviceCount() > 0)
    GTEST_SKIP() << "a CUDA device is present: " << CudaDeviceDescription(0);
  SimOptions o = Small();
  o.batched_clients = 4;
  o.device = "cuda";
  auto r = RunSimulation(o);  // fails before loading any data
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("use device cpu or auto"), std::string::npos);
}

// On a GPU the batched run learns like the per-client one (float rounding apart).
TEST(BatchedSimulation, OnCudaLearnsLikeThePerClientRun) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason();
  REQUIRE_DATA();
  SimOptions per_client = Small();
  SimOptions batched = per_client;
  batched.batched_clients = 5;
  batched.device = "cuda";
  auto a = RunSimulation(batched);
  auto b = RunSimulation(per_client);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(a->rounds.size(), b->rounds.size());
  for (size_t i = 0; i < a->rounds.size(); ++i) {
    EXPECT_NEAR(*a->rounds[i].test_accuracy, *b->rounds[i].test_accuracy, 0.01);
    EXPECT_EQ(a->rounds[i].bytes_up, b->rounds[i].bytes_up);  // codec none: sizes fixed
  }
  EXPECT_NE(a->training.find("cuda:0"), std::string::npos) << a->training;
}

}  // namespace
}  // namespace fedmesh
