// ExternalTrainer (node/external_trainer.h) against real trainer processes: a Python
// trainer built on the python/fedmesh package whose behaviour a file in its directory
// selects per task (answer well, crash, hang, garbage bytes, missing / extra / misshaped
// tensors, NaN, 0 examples, a reported error), one that never connects, and a program
// that does not exist. Each failure is a task error naming the cause, the node goes on,
// and the next task gets a restarted trainer that answers.
#include "node/external_trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr char kPython[] = "/usr/bin/python3";

// Reads `mode` at every task and misbehaves as told.
constexpr char kTrainer[] = R"PY(
import os, socket, struct, sys, time
import numpy as np
import fedmesh
site = fedmesh.connect(num_examples=123, name="test")
for task in site.tasks():
    mode = open("mode").read().strip()
    with open("seen", "a") as f:
        f.write("%s %s %d\n" % (task.kind, mode, task.round))
    w = {k: np.array(v) + 1.0 for k, v in task.weights.items()}
    if task.kind == "evaluate":
        task.reply(num_examples=40, metrics={"loss": 0.25, "accuracy": 0.5})
    elif mode == "ok":
        task.reply(weights=w, num_examples=77, metrics={"loss": 1.5})
    elif mode == "reorder":
        task.reply(weights=dict(reversed(list(w.items()))), num_examples=77)
    elif mode == "crash":
        os._exit(3)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "error":
        task.fail("out of GPU memory")
    else:
        # Answers fedmesh.Task.reply would refuse to send: write the frame by hand.
        names = list(task.weights)
        specs = [{"name": n, "shape": list(task.weights[n].shape), "dtype": "float32"} for n in names]
        arrays = [w[n].astype("<f4") for n in names]
        examples = 77
        if mode == "missing":
            specs, arrays = specs[:-1], arrays[:-1]
        elif mode == "extra":
            specs.append({"name": "bonus", "shape": [0], "dtype": "float32"})  # same payload size
            arrays.append(np.zeros(0, "<f4"))
        elif mode == "oversize":
            specs.append({"name": "bonus", "shape": [1], "dtype": "float32"})
            arrays.append(np.zeros(1, "<f4"))
        elif mode == "shape":
            specs[0]["shape"] = list(reversed(specs[0]["shape"]))
        elif mode == "nan":
            arrays[0].flat[1] = np.nan
        elif mode == "zero":
            examples = 0
        import json
        if mode == "garbage":
            site._sock.sendall(b"GARBAGE!" * 16)
        else:
            head = json.dumps({"type": "result", "task": task.id, "num_examples": examples,
                               "tensors": specs}).encode()
            payload = b"".join(a.tobytes() for a in arrays)
            site._sock.sendall(b"FMTR" + struct.pack("<IQ", len(head), len(payload)) + head + payload)
        task._answered = True
        time.sleep(3600)
)PY";

class ExternalTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kPython, X_OK) != 0 || std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
      GTEST_SKIP() << "needs Debian's /usr/bin/python3 with numpy";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("fedmesh_ext_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "trainer.py") << kTrainer;
    SetMode("ok");
    ::setenv("PYTHONPATH", (fs::path(FEDMESH_SOURCE_DIR) / "python").c_str(), 1);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  void SetMode(const std::string& mode) { std::ofstream(dir_ / "mode") << mode; }

  ExternalTrainerOptions Options() {
    ExternalTrainerOptions o;
    o.argv = {kPython, "trainer.py"};
    o.cwd = dir_.string();
    o.node_id = "site-1";
    o.timeout_ms = 20000;
    o.connect_timeout_ms = 20000;
    o.restart_backoff_ms = 50;
    return o;
  }

  static trainer::TaskRequest Fit(uint64_t round = 1) {
    trainer::TaskRequest r;
    r.kind = "fit";
    r.round = round;
    r.tensors = {{"w", {2, 3}}, {"b", {3}}};
    return r;
  }

  // 0..8: w then b.
  const std::vector<float> weights_ = {0, 1, 2, 3, 4, 5, 6, 7, 8};

  // Runs one fit task expecting the well-behaved answer (weights + 1, 77 examples).
  void ExpectGoodFit(ExternalTrainer& t, uint64_t round) {
    auto a = t.Run(Fit(round), weights_);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->num_examples, 77u);
    ASSERT_EQ(a->values.size(), weights_.size());
    for (size_t i = 0; i < weights_.size(); ++i) EXPECT_FLOAT_EQ(a->values[i], weights_[i] + 1) << i;
  }

  fs::path dir_;
};

TEST_F(ExternalTrainerTest, TrainsEvaluatesAndReportsItsExamples) {
  auto t = ExternalTrainer::Create(Options());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto hello = (*t)->Connect();
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  EXPECT_EQ(*hello, std::optional<uint64_t>(123));
  ExpectGoodFit(**t, 1);
  auto a = (*t)->Run(Fit(1), weights_);
  ASSERT_TRUE(a.ok());
  EXPECT_DOUBLE_EQ(a->metrics.at("loss"), 1.5);
  SetMode("reorder");  // tensors in another order than asked: mapped back by name
  ExpectGoodFit(**t, 2);
  trainer::TaskRequest eval = Fit(2);
  eval.kind = "evaluate";
  auto e = (*t)->Run(eval, weights_);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->num_examples, 40u);
  EXPECT_TRUE(e->values.empty());
  EXPECT_DOUBLE_EQ(e->metrics.at("accuracy"), 0.5);
  EXPECT_EQ((*t)->starts(), 1u);
  EXPECT_EQ((*t)->tasks_failed(), 0u);
  // The socket lives in a private directory, removed with the trainer.
  const std::string path = (*t)->endpoint().substr(6);
  struct stat st{};
  ASSERT_EQ(::stat(fs::path(path).parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  t->reset();
  EXPECT_FALSE(fs::exists(fs::path(path).parent_path()));
}

// Every bad answer fails its task with the reason, and the restarted trainer answers the
// next one.
TEST_F(ExternalTrainerTest, EachBadAnswerFailsTheTaskAndTheTrainerComesBack) {
  struct Case {
    const char* mode;
    StatusCode code;
    const char* reason;
  };
  const Case cases[] = {
      {"crash", StatusCode::kUnavailable, "exited with code 3"},
      {"missing", StatusCode::kInvalidArgument, "lacks tensor 'b'"},
      {"extra", StatusCode::kInvalidArgument, "sent tensor 'bonus', which the federation's model does not have"},
      {"oversize", StatusCode::kInvalidArgument, "carries 40 payload bytes; at most 36 are expected"},
      {"shape", StatusCode::kInvalidArgument, "'w' with shape [3, 2]"},
      {"nan", StatusCode::kInvalidArgument, "tensor 'w' holds nan at index 1"},
      {"zero", StatusCode::kInvalidArgument, "reports 0 examples"},
      {"error", StatusCode::kFailedPrecondition, "the trainer reported: out of GPU memory"},
      {"garbage", StatusCode::kInvalidArgument, "not a fedmesh trainer message (they start 47 41 52 42"},
  };
  auto t = ExternalTrainer::Create(Options());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  uint64_t round = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mode);
    SetMode(c.mode);
    auto bad = (*t)->Run(Fit(round++), weights_);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), c.code) << bad.status().ToString();
    EXPECT_THAT(bad.status().message(), HasSubstr(c.reason));
    SetMode("ok");
    ExpectGoodFit(**t, round++);
  }
  EXPECT_EQ((*t)->tasks_failed(), std::size(cases));
  EXPECT_EQ((*t)->starts(), 1 + std::size(cases));  // one restart per failure
}

TEST_F(ExternalTrainerTest, AHangIsCutAtTheDeadlineAndStopIsPrompt) {
  ExternalTrainerOptions o = Options();
  o.timeout_ms = 1500;  // [train] external_timeout_s
  auto t = ExternalTrainer::Create(o);
  ASSERT_TRUE(t.ok());
  ExpectGoodFit(**t, 1);
  SetMode("hang");
  const auto t0 = Clock::now();
  auto hung = (*t)->Run(Fit(2), weights_);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_FALSE(hung.ok());
  EXPECT_EQ(hung.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(hung.status().message(), HasSubstr("did not answer the fit task of round 2 within 1.5 s"));
  EXPECT_GE(waited, 1.4);
  EXPECT_LT(waited, 5.0);
  // The task's own deadline (FitTask::deadline_unix_ms) applies too, when sooner.
  trainer::TaskRequest soon = Fit(3);
  soon.deadline_unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count() + 1000);
  EXPECT_EQ((*t)->Run(soon, weights_).status().code(), StatusCode::kDeadlineExceeded);
  // A node that stops does not wait for a hung trainer.
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    stop = true;
  });
  ExternalTrainerOptions longer = Options();
  auto t2 = ExternalTrainer::Create(longer);
  ASSERT_TRUE(t2.ok());
  const auto t1 = Clock::now();
  auto stopped = (*t2)->Run(Fit(4), weights_, [&] { return stop.load(); });
  stopper.join();
  EXPECT_FALSE(stopped.ok());
  EXPECT_THAT(stopped.status().message(), HasSubstr("stopping"));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 5.0);
}

TEST_F(ExternalTrainerTest, ATrainerThatNeverConnectsOrCannotStartFailsTheTask) {
  ExternalTrainerOptions o = Options();
  o.argv = {kPython, "-c", "import time; time.sleep(60)"};
  o.connect_timeout_ms = 800;
  auto t = ExternalTrainer::Create(o);
  ASSERT_TRUE(t.ok());
  auto r = (*t)->Run(Fit(1), weights_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("did not connect to ipc://"));
  // One that exits before connecting says how it ended.
  o.argv = {kPython, "-c", "import sys; sys.exit(7)"};
  auto t2 = ExternalTrainer::Create(o);
  ASSERT_TRUE(t2.ok());
  auto r2 = (*t2)->Run(Fit(1), weights_);
  EXPECT_THAT(r2.status().message(), HasSubstr("exited with code 7 before it connected"));
  // A program that does not exist is a configuration error at once.
  o.argv = {"/nonexistent/trainer-binary"};
  auto t3 = ExternalTrainer::Create(o);
  ASSERT_FALSE(t3.ok());
  EXPECT_EQ(t3.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(t3.status().message(), HasSubstr("cannot start the trainer '/nonexistent/trainer-binary'"));
}

TEST_F(ExternalTrainerTest, PerTaskLaunchStartsAFreshTrainerForEachTask) {
  ExternalTrainerOptions o = Options();
  o.per_task = true;
  auto t = ExternalTrainer::Create(o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->starts(), 0u);
  ExpectGoodFit(**t, 1);
  ExpectGoodFit(**t, 2);
  EXPECT_EQ((*t)->starts(), 2u);
}

// external_endpoint: the site runs the trainer; the node only listens, in a directory that
// must be private.
TEST_F(ExternalTrainerTest, AttachesToATrainerTheSiteRuns) {
  fs::create_directories(dir_ / "sock");
  fs::permissions(dir_ / "sock", fs::perms::owner_all, fs::perm_options::replace);
  ExternalTrainerOptions o;
  o.endpoint = "ipc://" + (dir_ / "sock" / "t.sock").string();
  o.connect_timeout_ms = 20000;
  o.timeout_ms = 20000;
  auto t = ExternalTrainer::Create(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::string cmd = "cd " + dir_.string() + " && FEDMESH_TRAINER_ENDPOINT=" + o.endpoint +
                          " /usr/bin/python3 trainer.py >attached.log 2>&1 &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ExpectGoodFit(**t, 1);
  t->reset();  // sends shutdown: the site's trainer ends its loop
  fs::permissions(dir_ / "sock", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec,
                  fs::perm_options::replace);
  auto open = ExternalTrainer::Create(o);
  ASSERT_FALSE(open.ok());
  EXPECT_THAT(open.status().message(), HasSubstr("has mode 0750; it must be 0700"));
  o.endpoint = "tcp://127.0.0.1:5000";
  EXPECT_THAT(ExternalTrainer::Create(o).status().message(), HasSubstr("ipc:// followed by an absolute path"));
}

}  // namespace
}  // namespace fedmesh
