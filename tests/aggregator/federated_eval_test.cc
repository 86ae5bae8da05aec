// Federated evaluation in the round engine (aggregator/federated_eval.h): after each round
// every connected node gets an evaluate_only FitTask with the new model; its answers are
// reported per site and example-weighted; duplicates, answers for rounds not being
// evaluated and answers without examples are refused; the evaluation closes when every
// asked node answered or at its deadline; the federation finishes only after the last one.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/round_engine.h"
#include "aggregator/strategy.h"
#include "core/rng.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {

using Output = RoundEngine::Output;
constexpr char kFed[] = "fed-eval";

class FakeEnv final : public Env {
 public:
  double NowSeconds() const override { return now_; }
  Rng& rng() override { return rng_; }
  double now_ = 500.0;
  Rng rng_{3};
};

template <typename T>
std::vector<T> Filter(const std::vector<Output>& outs) {
  std::vector<T> found;
  for (const Output& o : outs)
    if (const T* t = std::get_if<T>(&o)) found.push_back(*t);
  return found;
}

class FederatedEvalEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    RoundEngineOptions o;
    o.federation_id = kFed;
    o.total_rounds = 2;
    o.clients_per_round = 2;
    o.min_clients = 2;
    o.timeout_s = 60;
    o.federated_eval.enabled = true;
    o.federated_eval.every = 1;
    o.federated_eval.min_sites = 2;
    o.federated_eval.timeout_s = 30;
    auto e = RoundEngine::Create(o, &env_, std::make_unique<FedAvg>(), {1.0f, 2.0f});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_.emplace(std::move(*e));
    Absorb(engine_->Start());
  }

  void Absorb(const std::vector<Output>& outs) {
    for (const Output& o : outs) {
      if (const auto* s = std::get_if<RoundEngine::Send>(&o)) {
        inbox_[s->to].push_back(s->message);
      } else if (const auto* t = std::get_if<RoundEngine::SetTimer>(&o)) {
        timers_.push_back(t->at_seconds);
      } else {
        events_.push_back(o);
      }
    }
  }
  std::vector<Output> Deliver(const std::string& from, wire::Body body, uint64_t round) {
    wire::Message m{wire::Header{kFed, from, round, 0, next_id_++}, std::move(body)};
    auto outs = engine_->OnMessage(from, m);
    Absorb(outs);
    return outs;
  }
  void Register(const std::string& id) { Deliver(id, wire::Register{id, 10, {}}, 0); }
  // The node's tasks of `round`: the training task or the evaluation task.
  std::optional<wire::FitTask> Task(const std::string& id, uint64_t round, bool evaluate) {
    for (const wire::Message& m : inbox_[id])
      if (const auto* t = std::get_if<wire::FitTask>(&m.body))
        if (t->round == round && t->evaluate_only == evaluate) return *t;
    return std::nullopt;
  }
  std::vector<Output> Train(const std::string& id, uint64_t round) {
    wire::FitResult r;
    r.round = round;
    r.num_examples = 10;
    r.train_loss = 0.5;
    r.update = wire::FloatPayload(std::vector<float>{0.5f, -0.5f});
    r.bytes_before_codec = r.bytes_after_codec = 8;
    return Deliver(id, r, round);
  }
  std::vector<Output> Evaluate(const std::string& id, uint64_t round, uint64_t n, double loss,
                               double accuracy) {
    wire::FitResult r;
    r.round = round;
    r.num_examples = n;
    r.train_loss = loss;
    r.update = wire::FloatPayload({});
    r.evaluation = true;
    r.metrics = {{"accuracy", accuracy}};
    return Deliver(id, r, round);
  }
  std::vector<Output> FireLastTimer() {
    env_.now_ = timers_.back();
    auto outs = engine_->OnTimer(env_.now_);
    Absorb(outs);
    return outs;
  }

  FakeEnv env_;
  std::optional<RoundEngine> engine_;
  std::map<std::string, std::vector<wire::Message>> inbox_;
  std::vector<double> timers_;
  std::vector<Output> events_;
  uint64_t next_id_ = 1;
};

TEST_F(FederatedEvalEngine, EveryConnectedSiteEvaluatesAndTheTotalIsExampleWeighted) {
  for (const char* id : {"a", "b", "c"}) Register(id);
  const std::vector<std::string> first = engine_->selected();
  ASSERT_EQ(first.size(), 2u);
  for (const std::string& id : first) Train(id, 1);
  ASSERT_EQ(Filter<RoundEngine::RoundClosed>(events_).size(), 1u);
  // All three connected sites are asked, with the new model (version 1), not only the
  // two that trained; the next round is already open.
  const std::vector<float> global = engine_->global();
  for (const char* id : {"a", "b", "c"}) {
    std::optional<wire::FitTask> t = Task(id, 1, /*evaluate=*/true);
    ASSERT_TRUE(t.has_value()) << id;
    EXPECT_EQ(wire::PayloadFloats(t->global_model).value(), global);
    EXPECT_FALSE(t->secagg.has_value());
  }
  EXPECT_EQ(engine_->round(), 2u);
  EXPECT_EQ(engine_->phase(), RoundEngine::Phase::kRoundOpen);

  Evaluate("a", 1, 100, 0.5, 0.9);
  auto dup = Evaluate("a", 1, 100, 0.5, 0.9);
  ASSERT_EQ(Filter<RoundEngine::UpdateRejected>(dup).size(), 1u);
  EXPECT_EQ(Filter<RoundEngine::UpdateRejected>(dup)[0].cause, RejectCause::kDuplicate);
  auto wrong_round = Evaluate("b", 7, 100, 0.5, 0.9);
  ASSERT_EQ(Filter<RoundEngine::UpdateRejected>(wrong_round).size(), 1u);
  auto empty = Evaluate("c", 1, 0, 0.5, 0.9);
  ASSERT_EQ(Filter<RoundEngine::UpdateRejected>(empty).size(), 1u);
  EXPECT_EQ(Filter<RoundEngine::UpdateRejected>(empty)[0].cause, RejectCause::kMalformed);
  Evaluate("b", 1, 300, 0.3, 0.7);
  EXPECT_TRUE(Filter<RoundEngine::EvalClosed>(events_).empty()) << "c has not answered";

  // Round 2 closes: the open evaluation of round 1 reports what it has (a and b), the
  // evaluation of round 2 starts, and the federation waits for it.
  for (const std::string& id : engine_->selected()) Train(id, 2);
  auto closed = Filter<RoundEngine::EvalClosed>(events_);
  ASSERT_EQ(closed.size(), 1u);
  const FederatedEvalReport& r1 = closed[0].report;
  EXPECT_EQ(r1.round, 1u);
  EXPECT_EQ(r1.model_version, 1u);
  EXPECT_EQ(r1.asked, 3u);
  ASSERT_EQ(r1.sites.size(), 2u);
  EXPECT_EQ(r1.sites.at("b").num_examples, 300u);
  ASSERT_TRUE(r1.total.has_value());
  EXPECT_EQ(r1.total->num_examples, 400u);
  EXPECT_DOUBLE_EQ(r1.total->loss, (100 * 0.5 + 300 * 0.3) / 400);
  EXPECT_DOUBLE_EQ(r1.total->metrics.at("accuracy"), (100 * 0.9 + 300 * 0.7) / 400);
  EXPECT_TRUE(Filter<RoundEngine::Finished>(events_).empty());

  // A registration while only the last evaluation is open starts no round.
  Register("d");
  EXPECT_FALSE(Task("d", 3, false).has_value());
  // One answer of the two min_sites asks for, then the deadline: reported without a total,
  // and then the federation finishes.
  Evaluate("c", 2, 50, 0.2, 1.0);
  FireLastTimer();
  closed = Filter<RoundEngine::EvalClosed>(events_);
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_DOUBLE_EQ(closed[1].report.duration_s, 30.0);  // closed at its deadline
  EXPECT_EQ(closed[1].report.round, 2u);
  EXPECT_EQ(closed[1].report.sites.size(), 1u);
  EXPECT_FALSE(closed[1].report.total.has_value());
  auto finished = Filter<RoundEngine::Finished>(events_);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].status.ok());
  EXPECT_EQ(finished[0].rounds_completed, 2u);
  EXPECT_EQ(engine_->phase(), RoundEngine::Phase::kFinished);
}

TEST_F(FederatedEvalEngine, LastEvaluationClosesAsSoonAsEverySiteAnswered) {
  for (const char* id : {"a", "b"}) Register(id);
  for (uint64_t round = 1; round <= 2; ++round) {
    for (const std::string& id : engine_->selected()) Train(id, round);
    Evaluate("a", round, 10, 1.0, 0.5);
    Evaluate("b", round, 30, 2.0, 0.25);
  }
  auto closed = Filter<RoundEngine::EvalClosed>(events_);
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_DOUBLE_EQ(closed[1].report.total->loss, (10 * 1.0 + 30 * 2.0) / 40);
  ASSERT_EQ(Filter<RoundEngine::Finished>(events_).size(), 1u);
  // The Finished event comes after the last evaluation.
  size_t eval_at = 0, finish_at = 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (std::holds_alternative<RoundEngine::EvalClosed>(events_[i])) eval_at = i;
    if (std::holds_alternative<RoundEngine::Finished>(events_[i])) finish_at = i;
  }
  EXPECT_LT(eval_at, finish_at);
}

TEST(FederatedEvalOptions, ValidateNamesTheField) {
  RoundEngineOptions o;
  o.federation_id = kFed;
  o.federated_eval.enabled = true;
  o.federated_eval.every = 0;
  EXPECT_NE(Validate(o).message().find("federated_eval.every"), std::string::npos);
  o.federated_eval.every = 1;
  o.federated_eval.timeout_s = 0;
  EXPECT_NE(Validate(o).message().find("federated_eval.timeout_s"), std::string::npos);
}

}  // namespace
}  // namespace fedmesh
