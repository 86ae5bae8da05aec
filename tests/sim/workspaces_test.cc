// Workspaces: background jobs under Serve (Submit/Wait), Run inside and outside Serve.
#include "sim/workspaces.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fedmesh {
namespace {

ModelSpec TinySpec() {
  ModelSpec spec;
  spec.name = "logreg";
  spec.input_shape = {4};
  spec.num_classes = 2;
  return spec;
}

// Polls `flag` for up to 20 s; true once it is set.
bool Eventually(const std::atomic<bool>& flag) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Models the batched trainer trains stay on the layer code (a client alone steps exactly as
// in a batch); the cnn, which it does not train, runs on the graph executor as nodes do.
TEST(Workspaces, EngineFollowsWhatTheBatchedTrainerTrains) {
  for (const char* name : {"logreg", "mlp", "cnn"}) {
    SCOPED_TRACE(name);
    ModelSpec spec;
    spec.name = name;
    spec.input_shape = {8, 8, 1};
    spec.num_classes = 3;
    spec.hidden = {5};
    const bool cnn = std::string(name) == "cnn";
    EXPECT_EQ(Workspaces::EngineFor(spec), cnn ? BuiltinEngine::kAuto : BuiltinEngine::kLayers);
    auto w = Workspaces::Create(spec, 1);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    bool on_graph = !cnn;
    ASSERT_TRUE(w->Run(1, [&](size_t, Model& m) {
                    on_graph = m.executor_graph() != nullptr;
                    return Status::OK();
                  }).ok());
    EXPECT_EQ(on_graph, cnn);
  }
}

TEST(Workspaces, SubmittedJobsRunInTheBackgroundWhileTheDriverWorks) {
  auto w = Workspaces::Create(TinySpec(), 2);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::atomic<bool> started{false};
  bool ran_without_wait = false;
  std::vector<int> out(6, -1);
  std::set<const Model*> models;
  w->Serve([&] {
    // Nobody waits for this job: only a background worker can start it.
    auto first = w->Submit([&](Model& m) {
      started = true;
      out[0] = 0;
      models.insert(&m);
    });
    ran_without_wait = Eventually(started);
    w->Wait(first);
    std::vector<Workspaces::Ticket> tickets;
    for (int j = 1; j < 6; ++j) {
      tickets.push_back(w->Submit([&out, j](Model&) { out[j] = j * j; }));
    }
    for (const auto& t : tickets) w->Wait(t);
  });
  EXPECT_TRUE(ran_without_wait);
  EXPECT_EQ(models.size(), 1u);
  EXPECT_NE(*models.begin(), &w->model(0));  // worker 1's model, not the driver's
  EXPECT_EQ(out, (std::vector<int>{0, 1, 4, 9, 16, 25}));
}

TEST(Workspaces, RunInsideServeGoesAheadOfQueuedJobsAndReturnsTheFirstError) {
  auto w = Workspaces::Create(TinySpec(), 2);
  ASSERT_TRUE(w.ok());
  std::atomic<bool> release{false}, blocker_started{false};
  std::vector<int> order;  // jobs the driver thread ran, in order
  Status run_status;
  std::vector<int> squares(10, 0);
  w->Serve([&] {
    // Occupy worker 1, then queue a background job behind it.
    auto blocker = w->Submit([&](Model&) {
      blocker_started = true;
      Eventually(release);
    });
    ASSERT_TRUE(Eventually(blocker_started));
    std::atomic<bool> queued_ran{false};
    auto queued = w->Submit([&](Model&) { queued_ran = true; });
    // Run's jobs go first: the driver runs all ten (worker 1 is busy) before `queued`.
    run_status = w->Run(10, [&](size_t j, Model&) {
      EXPECT_FALSE(queued_ran);
      squares[j] = static_cast<int>(j * j);
      return j == 3 ? Status::InvalidArgument("job 3") : j == 7 ? Status::Internal("job 7")
                                                               : Status::OK();
    });
    release = true;
    w->Wait(queued);
    EXPECT_TRUE(queued_ran);
    w->Wait(blocker);
  });
  EXPECT_EQ(run_status.code(), StatusCode::kInvalidArgument);  // job 3's, the first in order
  for (int j = 0; j < 10; ++j) EXPECT_EQ(squares[j], j * j);
}

TEST(Workspaces, OneWorkerRunsSubmittedJobsInWait) {
  auto w = Workspaces::Create(TinySpec(), 1);
  ASSERT_TRUE(w.ok());
  int value = 0;
  bool ran_before_wait = true;
  w->Serve([&] {
    auto t = w->Submit([&](Model& m) {
      EXPECT_EQ(&m, &w->model(0));
      value = 42;
    });
    ran_before_wait = value != 0;
    w->Wait(t);
  });
  EXPECT_FALSE(ran_before_wait);
  EXPECT_EQ(value, 42);
  // Outside Serve, Run is the plain parallel loop.
  std::vector<int> got(5, 0);
  ASSERT_TRUE(w->Run(5, [&](size_t j, Model&) {
                  got[j] = static_cast<int>(j) + 1;
                  return Status::OK();
                }).ok());
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace fedmesh
