// Server optimisers (aggregator/server_optimizer.h): hand-computed steps for FedAvgM,
// FedAdam, FedYogi and FedAdagrad over two rounds; FedAvgM with no momentum and step 1 is
// FedAvg; the moments survive SaveState/RestoreState bit for bit; bad options, bad updates,
// a state that does not fit and a step that overflows are refused and change nothing.
#include "aggregator/server_optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace fedmesh {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Strategy> Make(const std::string& name, StrategyOptions o = {}) {
  auto s = MakeStrategy(name, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// One round from `global` to a mean at global + delta (two clients straddling it).
float Round(Strategy& s, float global, float delta) {
  std::vector<float> g = {global}, out(1);
  std::vector<ClientUpdate> u = {{"a", 10, {global + delta - 1.0f}}, {"b", 10, {global + delta + 1.0f}}};
  Status st = s.Aggregate(g, u, out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out[0];
}

TEST(ServerOptimizer, FedAvgMWithoutMomentumIsFedAvg) {
  StrategyOptions o;
  o.server_momentum = 0;
  auto m = Make("fedavgm", o);
  FedAvg avg;
  std::vector<float> g = {0.5f, -2.0f, 3.0f};
  std::vector<ClientUpdate> u = {{"a", 30, {1.0f, 2.0f, 3.0f}}, {"b", 10, {-1.0f, 0.0f, 7.0f}}};
  std::vector<float> a(3), b(3);
  ASSERT_TRUE(m->Aggregate(g, u, a).ok());
  ASSERT_TRUE(avg.Aggregate(g, u, b).ok());
  EXPECT_EQ(a, b);
}

TEST(ServerOptimizer, FedAvgMAccumulatesVelocity) {
  StrategyOptions o;
  o.server_lr = 0.5;
  o.server_momentum = 0.9;
  auto s = Make("fedavgm", o);
  // v = 1, w = 0.5; then v = 0.9 + 1 = 1.9, w = 0.5 + 0.95.
  const float w1 = Round(*s, 0.0f, 1.0f);
  EXPECT_FLOAT_EQ(w1, 0.5f);
  EXPECT_FLOAT_EQ(Round(*s, w1, 1.0f), 1.45f);
}

TEST(ServerOptimizer, AdaptiveStepsMatchTheHandComputation) {
  // eta 0.1, beta1 0.9, beta2 0.99, tau 1e-3, v0 = tau^2; deltas 1 then 0.5. Expected values
  // from the formulas in aggregator/server_optimizer.h evaluated in double (Python).
  struct Case {
    const char* name;
    double w1, w2;
  };
  for (const Case& c : {Case{"fedadam", 0.0990050489, 0.223604897},
                        Case{"fedyogi", 0.0990049999, 0.223109815},
                        Case{"fedadagrad", 0.009990005, 0.0225007907}}) {
    StrategyOptions o;
    o.server_lr = 0.1;
    auto s = Make(c.name, o);
    const float w1 = Round(*s, 0.0f, 1.0f);
    EXPECT_NEAR(w1, c.w1, 1e-6) << c.name;
    EXPECT_NEAR(Round(*s, w1, 0.5f), c.w2, 1e-6) << c.name;
  }
}

TEST(ServerOptimizer, DefaultStepSizes) {
  auto m = ServerOptimizer::Create(ServerOptimizerKind::kMomentum, {});
  auto a = ServerOptimizer::Create(ServerOptimizerKind::kAdam, {});
  ASSERT_TRUE(m.ok() && a.ok());
  EXPECT_NEAR((*m)->server_lr(), 0.1, 1e-15);  // 1 - momentum 0.9
  EXPECT_EQ((*a)->server_lr(), 0.01);
}

TEST(ServerOptimizer, StateRoundTripsAndARestartContinuesBitForBit) {
  for (const char* name : {"fedavgm", "fedadam", "fedyogi", "fedadagrad"}) {
    auto first = Make(name);
    std::vector<float> g = {0.1f, 0.2f, -0.3f, 0.4f};
    std::vector<ClientUpdate> r1 = {{"a", 5, {0.3f, 0.1f, -0.1f, 0.5f}}, {"b", 7, {0.0f, 0.4f, -0.6f, 0.2f}}};
    std::vector<float> g1(4);
    ASSERT_TRUE(first->Aggregate(g, r1, g1).ok());
    const std::vector<float> saved = first->SaveState();
    EXPECT_EQ(saved.size(), std::string(name) == "fedavgm" ? 4u : 8u) << name;

    auto restarted = Make(name);
    ASSERT_TRUE(restarted->RestoreState(saved, 4).ok()) << name;
    EXPECT_EQ(restarted->SaveState(), saved);
    std::vector<ClientUpdate> r2 = {{"a", 5, {0.5f, 0.0f, 0.1f, 0.3f}}, {"c", 1, {0.2f, 0.2f, 0.2f, 0.2f}}};
    std::vector<float> a(4), b(4);
    ASSERT_TRUE(first->Aggregate(g1, r2, a).ok());
    ASSERT_TRUE(restarted->Aggregate(g1, r2, b).ok());
    EXPECT_EQ(a, b) << name;
    // Without the restored moments the step differs: the state matters.
    auto fresh = Make(name);
    std::vector<float> c(4);
    ASSERT_TRUE(fresh->Aggregate(g1, r2, c).ok());
    EXPECT_NE(a, c) << name;
  }
}

TEST(ServerOptimizer, BadOptionsNameTheField) {
  auto expect = [](const char* name, void (*edit)(StrategyOptions&), const char* field) {
    StrategyOptions o;
    edit(o);
    auto s = MakeStrategy(name, o);
    ASSERT_FALSE(s.ok()) << name << " " << field;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(field));
  };
  expect("fedavgm", [](StrategyOptions& o) { o.server_lr = -1; }, "server_lr");
  expect("fedadam", [](StrategyOptions& o) { o.server_lr = std::numeric_limits<double>::infinity(); }, "server_lr");
  expect("fedavgm", [](StrategyOptions& o) { o.server_momentum = 1.0; }, "server_momentum");
  expect("fedadam", [](StrategyOptions& o) { o.beta1 = -0.1; }, "beta1");
  expect("fedyogi", [](StrategyOptions& o) { o.beta2 = std::numeric_limits<double>::quiet_NaN(); }, "beta2");
  expect("fedadagrad", [](StrategyOptions& o) { o.tau = 0; }, "tau");
}

TEST(ServerOptimizer, RefusedInputsChangeNothing) {
  StrategyOptions o;
  o.server_lr = 0.5;
  auto s = Make("fedadam", o);
  ASSERT_NE(Round(*s, 0.0f, 1.0f), 0.0f);
  const std::vector<float> state = s->SaveState();
  std::vector<float> g = {1.0f}, out = {7.0f};

  Status st = s->Aggregate(g, {{"x", 1, {std::numeric_limits<float>::quiet_NaN()}}}, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("fedadam"));
  EXPECT_THAT(st.message(), HasSubstr("node x"));
  st = s->Aggregate(g, {{"x", 1, {1.0f, 2.0f}}}, out);
  EXPECT_THAT(st.message(), HasSubstr("has 2 values but the model has 1"));
  st = s->Aggregate(std::vector<float>{1.0f, 2.0f}, {{"x", 1, {1.0f, 2.0f}}}, out);
  EXPECT_THAT(st.message(), HasSubstr("new global model has 1 elements"));
  std::vector<float> two(2);
  st = s->Aggregate(std::vector<float>{1.0f, 2.0f}, {{"x", 1, {1.0f, 2.0f}}}, two);
  EXPECT_THAT(st.message(), HasSubstr("optimiser state is for a model of 1 values"));
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(s->SaveState(), state);

  // A state that does not fit is refused and the old one kept.
  st = s->RestoreState(std::vector<float>{1.0f, 2.0f, 3.0f}, 1);
  EXPECT_THAT(st.message(), HasSubstr("does not fit a model of 1"));
  st = s->RestoreState(std::vector<float>{0.0f, -1.0f}, 1);
  EXPECT_THAT(st.message(), HasSubstr("second moments must be finite and >= 0"));
  st = s->RestoreState(std::vector<float>{std::numeric_limits<float>::infinity(), 1.0f}, 1);
  EXPECT_THAT(st.message(), HasSubstr("must be finite"));
  EXPECT_EQ(s->SaveState(), state);

  // A step that overflows float: refused, nothing written.
  StrategyOptions huge;
  huge.server_lr = 1e38;
  auto m = Make("fedavgm", huge);
  st = m->Aggregate(g, {{"x", 1, {100.0f}}}, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("not finite"));
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_TRUE(m->SaveState().empty());

  // Stateless strategies refuse a non-empty state.
  FedAvg avg;
  EXPECT_TRUE(avg.RestoreState({}, 3).ok());
  EXPECT_THAT(avg.RestoreState(std::vector<float>{1.0f}, 1).message(), HasSubstr("keeps no state"));
}

}  // namespace
}  // namespace fedmesh
