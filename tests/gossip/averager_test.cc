// Gossip averaging protocols (gossip/averager.h) driven by hand, message by message: option
// errors name their field, hostile payloads change nothing, push-pull pairs end exactly at
// their mean, push-sum conserves mass, D-PSGD mixes with Metropolis-Hastings weights and
// gives a silent neighbour's weight to self, pull requests serve a joining node, CHOCO
// resynchronises a copy after a gap, and Snapshot/Restore round-trips. Issue 26 item 4:
// push-sum weights outside (0, max_push_weight], steps above kMaxGossipStep and PullReplies
// nobody asked for are refused and change nothing.
#include "gossip/averager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/codec/payload.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {

using wire::GossipKind;

// A hand-driven clock and a seeded generator.
class TestEnv final : public Env {
 public:
  explicit TestEnv(uint64_t seed) : rng_(seed) {}
  double NowSeconds() const override { return now_; }
  Rng& rng() override { return rng_; }
  void Set(double t) { now_ = t; }

 private:
  double now_ = 0.0;
  Rng rng_;
};

std::unique_ptr<Averager> Make(GossipProtocol protocol, const std::string& id, std::vector<float> x,
                               Env& env, std::string codec = "none") {
  AveragingOptions options;
  options.protocol = protocol;
  options.codec = std::move(codec);
  auto a = Averager::Create(options, id, std::move(x), env);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(a).value();
}

std::vector<float> Values(const Averager& a) { return {a.params().begin(), a.params().end()}; }

std::vector<float> Random(uint64_t seed, size_t n) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

// What `s` delivers to `to`, which must accept it.
std::vector<ModelSend> Deliver(Averager& to, const std::string& from, const ModelSend& s,
                               std::span<const std::string> view) {
  EXPECT_EQ(s.to, to.self_id());
  auto replies = to.OnModel(from, s.message, view);
  EXPECT_TRUE(replies.ok()) << replies.status().ToString();
  return replies.ok() ? *replies : std::vector<ModelSend>{};
}

Status Validated(void (*edit)(AveragingOptions&)) {
  AveragingOptions options;
  edit(options);
  return Validate(options);
}

void ExpectInvalid(const Status& s, const std::string& mentions) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(mentions), std::string::npos)
      << "\"" << s.message() << "\" does not mention " << mentions;
}

TEST(Averager, ProtocolNamesParseAndUnknownIsRefused) {
  for (const std::string& name : KnownGossipProtocolNames()) {
    auto p = ParseGossipProtocol(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(GossipProtocolName(*p), name);
  }
  auto bad = ParseGossipProtocol("flooding");
  ExpectInvalid(bad.status(), "flooding");
  for (const char* name : {"pushpull", "dpsgd", "choco", "pushsum"}) {
    EXPECT_NE(bad.status().message().find(name), std::string::npos) << name;
  }
}

TEST(Averager, ValidateNamesTheField) {
  EXPECT_TRUE(Validate(AveragingOptions{}).ok());
  ExpectInvalid(Validated([](auto& o) { o.codec = "topk:2"; }), "codec");
  ExpectInvalid(Validated([](auto& o) { o.codec = "gzip"; }), "codec");
  ExpectInvalid(Validated([](auto& o) { o.choco_gamma = 0.0; }), "choco_gamma");
  ExpectInvalid(Validated([](auto& o) { o.choco_gamma = 1.5; }), "choco_gamma");
  ExpectInvalid(Validated([](auto& o) { o.choco_gamma = std::nan(""); }), "choco_gamma");
  ExpectInvalid(Validated([](auto& o) { o.fanout = 0; }), "fanout");
  ExpectInvalid(Validated([](auto& o) { o.exchange_timeout_s = 0; }), "exchange_timeout_s");
  ExpectInvalid(Validated([](auto& o) { o.max_push_weight = -1; }), "max_push_weight");
  ExpectInvalid(Validated([](auto& o) { o.max_push_weight = std::nan(""); }), "max_push_weight");
  for (GossipProtocol p : {GossipProtocol::kDpsgd, GossipProtocol::kChoco}) {
    AveragingOptions o;
    o.protocol = p;
    o.topology = Topology::kRandom;
    const Status s = Validate(o);
    ExpectInvalid(s, "symmetric");
    ExpectInvalid(s, "pushsum");
  }
  ExpectInvalid(Validated([](auto& o) {
                  o.protocol = GossipProtocol::kChoco;
                  o.topology = Topology::kOnePeerExponential;
                }),
                "one_peer_exponential");
  // The protocols that need no symmetric graph take the random topology.
  for (GossipProtocol p : {GossipProtocol::kPushPull, GossipProtocol::kPushSum}) {
    AveragingOptions o;
    o.protocol = p;
    o.topology = Topology::kRandom;
    EXPECT_TRUE(Validate(o).ok());
  }
}

TEST(Averager, CreateRefusesBadInputs) {
  TestEnv env(1);
  AveragingOptions options;
  ExpectInvalid(Averager::Create(options, "a", {}, env).status(), "empty");
  ExpectInvalid(Averager::Create(options, "", {1.0f}, env).status(), "self_id");
  ExpectInvalid(Averager::Create(options, "a", {1.0f, std::nanf("")}, env).status(), "non-finite");
  options.fanout = 0;
  ExpectInvalid(Averager::Create(options, "a", {1.0f}, env).status(), "fanout");
}

// Every protocol: a bad payload is an error and leaves x unchanged.
TEST(Averager, BadPayloadsChangeNothing) {
  const std::vector<std::string> view = {"a", "b"};
  const std::vector<float> x = {1.0f, 2.0f, 3.0f};
  std::vector<float> with_nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f};
  wire::TensorPayload nan_payload = wire::FloatPayload(with_nan);
  wire::TensorPayload wrong_size = wire::FloatPayload(std::vector<float>{1.0f, 2.0f});
  wire::TensorPayload short_bytes = wire::FloatPayload(std::vector<float>{1.0f, 2.0f, 3.0f});
  short_bytes.bytes.resize(7);
  auto int8 = codec::Chain::Parse("int8").value();
  wire::TensorPayload garbage = codec::EncodePayload(int8, x, 1).value();
  std::memset(garbage.bytes.data(), 0xff, 4);  // the block scale becomes NaN
  struct Case {
    GossipProtocol protocol;
    GossipKind kind;
  };
  for (Case c : {Case{GossipProtocol::kPushPull, GossipKind::kExchange},
                 Case{GossipProtocol::kPushPull, GossipKind::kExchangeReply},
                 Case{GossipProtocol::kDpsgd, GossipKind::kPush},
                 Case{GossipProtocol::kChoco, GossipKind::kPush},
                 Case{GossipProtocol::kChoco, GossipKind::kSync},
                 Case{GossipProtocol::kPushSum, GossipKind::kPush},
                 Case{GossipProtocol::kDpsgd, GossipKind::kPullReply}}) {
    TestEnv env(2);
    auto a = Make(c.protocol, "a", x, env);
    const auto before = a->Snapshot();
    for (const auto& payload : {nan_payload, wrong_size, short_bytes, garbage}) {
      wire::GossipModel m;
      m.kind = c.kind;
      m.step = 1;
      m.model = payload;
      auto r = a->OnModel("b", m, view);
      EXPECT_FALSE(r.ok()) << GossipProtocolName(c.protocol) << " " << payload.codec;
      EXPECT_EQ(Values(*a), x);
    }
    const auto after = a->Snapshot();
    EXPECT_EQ(after.x_hat, before.x_hat);
    EXPECT_EQ(after.step, before.step);
  }
}

TEST(Averager, WrongKindsAndPushSumWeightsAreRefused) {
  const std::vector<std::string> view = {"a", "b"};
  TestEnv env(3);
  auto dpsgd = Make(GossipProtocol::kDpsgd, "a", {1.0f}, env);
  wire::GossipModel m;
  m.kind = GossipKind::kExchange;
  m.model = wire::FloatPayload(std::vector<float>{5.0f});
  ExpectInvalid(dpsgd->OnModel("b", m, view).status(), "Exchange");
  EXPECT_EQ(Values(*dpsgd), std::vector<float>{1.0f});

  auto pushsum = Make(GossipProtocol::kPushSum, "a", {1.0f}, env);
  m.kind = GossipKind::kPush;
  for (double w : {-1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    m.weight = w;
    ExpectInvalid(pushsum->OnModel("b", m, view).status(), "weight");
    EXPECT_EQ(Values(*pushsum), std::vector<float>{1.0f});
    EXPECT_EQ(pushsum->weight(), 1.0);
  }
}

// Issue 26 item 4: one share of weight 1e30 made its receiver adopt the sender's model
// outright (x = (w x + w_m x_m) / (w + w_m)) and push it on. NaN and negative weights were
// refused before; 1e30 and 0 were not.
TEST(Averager, Issue26PushSumWeightIsCappedByTheView) {
  TestEnv env(3);
  const std::vector<std::string> view = {"a", "b", "c", "d"};
  wire::GossipModel m;
  m.kind = GossipKind::kPush;
  m.model = wire::FloatPayload(std::vector<float>{1000.0f});
  for (double w :
       {1e30, 4.0 + 1e-9, 0.0, -1.0, -0.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto a = Make(GossipProtocol::kPushSum, "a", {1.0f}, env);
    m.weight = w;
    ExpectInvalid(a->OnModel("b", m, view).status(), "max_push_weight");
    EXPECT_EQ(Values(*a), std::vector<float>{1.0f}) << w;
    EXPECT_EQ(a->weight(), 1.0) << w;
  }
  // The default cap is the view's size (self included): 4 here, the mass 4 nodes start with.
  auto a = Make(GossipProtocol::kPushSum, "a", {1.0f}, env);
  m.weight = 4.0;
  ASSERT_TRUE(a->OnModel("b", m, view).ok());
  EXPECT_EQ(a->weight(), 5.0);
  EXPECT_FLOAT_EQ(a->params()[0], (1.0f + 4.0f * 1000.0f) / 5.0f);
  // An explicit cap replaces it.
  AveragingOptions o;
  o.protocol = GossipProtocol::kPushSum;
  o.max_push_weight = 0.5;
  auto capped = Averager::Create(o, "a", {1.0f}, env).value();
  m.weight = 0.75;
  ExpectInvalid(capped->OnModel("b", m, view).status(), "max_push_weight");
  m.weight = 0.5;
  EXPECT_TRUE(capped->OnModel("b", m, view).ok());
  EXPECT_EQ(capped->weight(), 1.5);
}

// Issue 26 item 4: a PullReply replaces the receiver's model outright; any peer could send
// one (the old code adopted it unasked, from anyone, while joining).
TEST(Averager, Issue26PullReplyOnlyFromThePeerAskedWhileItIsOutstanding) {
  TestEnv env(4);
  const std::vector<std::string> view = {"a", "b", "c"};
  wire::GossipModel reply;
  reply.kind = GossipKind::kPullReply;
  reply.step = 7;
  reply.model = wire::FloatPayload(std::vector<float>{1000.0f});
  for (GossipProtocol p : {GossipProtocol::kPushPull, GossipProtocol::kDpsgd,
                           GossipProtocol::kChoco, GossipProtocol::kPushSum}) {
    SCOPED_TRACE(GossipProtocolName(p));
    auto a = Make(p, "a", {1.0f}, env);
    // Unsolicited.
    Status s = a->OnModel("b", reply, view).status();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_EQ(Values(*a), std::vector<float>{1.0f});
    EXPECT_EQ(a->step(), 0u);
    // From a peer other than the one asked.
    (void)a->PullRequest("c");
    EXPECT_TRUE(a->PullOutstanding("c"));
    EXPECT_FALSE(a->PullOutstanding("b"));
    EXPECT_EQ(a->OnModel("b", reply, view).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(Values(*a), std::vector<float>{1.0f});
    // The one asked: adopted, and every request is then answered.
    (void)a->PullRequest("b");
    ASSERT_TRUE(a->OnModel("c", reply, view).ok());
    EXPECT_EQ(Values(*a), std::vector<float>{1000.0f});
    EXPECT_EQ(a->step(), 7u);
    EXPECT_FALSE(a->PullOutstanding("b"));
    reply.model = wire::FloatPayload(std::vector<float>{-5.0f});
    EXPECT_EQ(a->OnModel("b", reply, view).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(Values(*a), std::vector<float>{1000.0f});
    // Given up on (the node started on its own): a late answer is refused too.
    (void)a->PullRequest("b");
    a->CancelPulls();
    EXPECT_EQ(a->OnModel("b", reply, view).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(Values(*a), std::vector<float>{1000.0f});
    reply.model = wire::FloatPayload(std::vector<float>{1000.0f});
  }
}

// Issue 26 item 4: a PullReply's step is adopted (step = max(step, its step)), so one of
// 2^64 - 1 made the next tick wrap the step counter to 0.
TEST(Averager, Issue26StepsAboveTheBoundAreRefused) {
  TestEnv env(5);
  const std::vector<std::string> view = {"a", "b"};
  auto a = Make(GossipProtocol::kPushSum, "a", {1.0f}, env);
  (void)a->PullRequest("b");
  wire::GossipModel m;
  m.kind = GossipKind::kPullReply;
  m.model = wire::FloatPayload(std::vector<float>{2.0f});
  for (uint64_t step : {std::numeric_limits<uint64_t>::max(), kMaxGossipStep + 1}) {
    m.step = step;
    ExpectInvalid(a->OnModel("b", m, view).status(), "step");
    EXPECT_EQ(a->step(), 0u);
    EXPECT_EQ(Values(*a), std::vector<float>{1.0f});
  }
  m.kind = GossipKind::kPush;
  m.weight = 1.0;
  ExpectInvalid(a->OnModel("b", m, view).status(), "step");
  EXPECT_EQ(a->weight(), 1.0);
  m.kind = GossipKind::kPullReply;
  m.step = kMaxGossipStep;
  ASSERT_TRUE(a->OnModel("b", m, view).ok());
  EXPECT_EQ(a->step(), kMaxGossipStep);
  a->OnTick(view);
  EXPECT_EQ(a->step(), kMaxGossipStep + 1);
}

TEST(Averager, PushPullPairAveragesExactly) {
  const std::vector<std::string> view = {"a", "b"};
  TestEnv env(4);
  const std::vector<float> xa = Random(1, 257), xb = Random(2, 257);
  auto a = Make(GossipProtocol::kPushPull, "a", xa, env);
  auto b = Make(GossipProtocol::kPushPull, "b", xb, env);
  auto sends = a->OnTick(view);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].message.kind, GossipKind::kExchange);
  auto replies = Deliver(*b, "a", sends[0], view);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].message.kind, GossipKind::kExchangeReply);
  EXPECT_EQ(wire::PayloadFloats(replies[0].message.model).value(), xb);  // from before mixing
  EXPECT_TRUE(Deliver(*a, "b", replies[0], view).empty());
  std::vector<float> mean(xa.size());
  for (size_t i = 0; i < mean.size(); ++i) mean[i] = (xa[i] + xb[i]) * 0.5f;
  EXPECT_EQ(Values(*a), mean);
  EXPECT_EQ(Values(*b), mean);
  // The same reply again (its exchange is answered) is not mixed twice.
  EXPECT_TRUE(Deliver(*a, "b", replies[0], view).empty());
  EXPECT_EQ(Values(*a), mean);
}

TEST(Averager, PushPullAbandonsAnUnansweredExchange) {
  const std::vector<std::string> view = {"a", "b"};
  TestEnv env(5);
  auto a = Make(GossipProtocol::kPushPull, "a", {1.0f}, env);  // timeout 2 s
  ASSERT_EQ(a->OnTick(view).size(), 1u);
  env.Set(1.0);
  EXPECT_TRUE(a->OnTick(view).empty());  // one outstanding Exchange at a time
  env.Set(2.0);
  auto retry = a->OnTick(view);  // abandoned: the step goes on
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].message.step, 3u);
  EXPECT_EQ(a->step(), 3u);
  // A peer that left the view is not waited for at all.
  env.Set(2.5);
  auto alone = a->OnTick(std::vector<std::string>{"a", "c"});
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].to, "c");
}

TEST(Averager, PushSumConservesMass) {
  const std::vector<std::string> view = {"a", "b"};
  TestEnv env(6);
  const std::vector<float> xa = Random(3, 64), xb = Random(4, 64);
  auto a = Make(GossipProtocol::kPushSum, "a", xa, env);
  auto b = Make(GossipProtocol::kPushSum, "b", xb, env);
  auto mass = [&](size_t i) { return a->weight() * a->params()[i] + b->weight() * b->params()[i]; };
  for (int step = 0; step < 30; ++step) {
    auto from_a = a->OnTick(view);
    auto from_b = b->OnTick(view);
    ASSERT_EQ(from_a.size(), 1u);
    ASSERT_EQ(from_b.size(), 1u);
    EXPECT_EQ(from_a[0].message.weight, a->weight());  // half kept, half sent
    Deliver(*b, "a", from_a[0], view);
    Deliver(*a, "b", from_b[0], view);
    EXPECT_NEAR(a->weight() + b->weight(), 2.0, 1e-12);
    for (size_t i = 0; i < xa.size(); ++i) EXPECT_NEAR(mass(i), xa[i] + xb[i], 1e-5);
  }
  for (size_t i = 0; i < xa.size(); ++i) {
    EXPECT_NEAR(a->params()[i], 0.5 * (xa[i] + xb[i]), 1e-5);
    EXPECT_NEAR(b->params()[i], 0.5 * (xa[i] + xb[i]), 1e-5);
  }
  // Unequal weights: x = (w x + w_m x_m) / (w + w_m). (Up to 3 is a share 3 nodes' mass
  // allows: the cap is the view's size.)
  auto c = Make(GossipProtocol::kPushSum, "c", {0.0f}, env);
  wire::GossipModel share;
  share.weight = 3.0;
  share.model = wire::FloatPayload(std::vector<float>{4.0f});
  ASSERT_TRUE(c->OnModel("a", share, std::vector<std::string>{"a", "b", "c"}).ok());
  EXPECT_FLOAT_EQ(c->params()[0], 3.0f);
  EXPECT_DOUBLE_EQ(c->weight(), 4.0);
}

TEST(Averager, DpsgdMixesWithMetropolisHastingsAndDoesNotWait) {
  // Ring of 4: every node has degree 2, so w_ij = 1/3 for the two neighbours and self.
  const std::vector<std::string> view = {"n0", "n1", "n2", "n3"};
  TestEnv env(7);
  std::vector<std::unique_ptr<Averager>> n;
  for (int i = 0; i < 4; ++i) {
    AveragingOptions o;
    o.topology = Topology::kRing;
    n.push_back(Averager::Create(o, view[i], {float(i * i)}, env).value());
  }
  std::vector<std::vector<ModelSend>> sent(4);
  for (int i = 0; i < 4; ++i) sent[i] = n[i]->OnTick(view);
  ASSERT_EQ(sent[0].size(), 2u);
  EXPECT_EQ(n[0]->params()[0], 0.0f);  // nothing had arrived: no change
  for (int i = 0; i < 4; ++i) {
    for (const auto& s : sent[i]) {
      if (s.to == "n0" && view[i] == "n3") continue;  // n3 -> n0 is lost
      Deliver(*n[s.to[1] - '0'], view[i], s, view);
    }
  }
  for (int i = 0; i < 4; ++i) n[i]->OnTick(view);
  EXPECT_FLOAT_EQ(n[1]->params()[0], (0.0f + 1.0f + 4.0f) / 3.0f);
  EXPECT_FLOAT_EQ(n[2]->params()[0], (1.0f + 4.0f + 9.0f) / 3.0f);
  // n0 heard only from n1: n3's weight stayed with n0.
  EXPECT_FLOAT_EQ(n[0]->params()[0], (2 * 0.0f + 1.0f) / 3.0f);
}

// Live neighbours whose step counters differ by a constant (one joined or resumed later)
// still mix both ways: a model's age is counted in the receiver's own steps. Comparing step
// numbers across nodes made the one ahead treat the other as permanently stale, the mixing
// one-way, and label-skewed sites drifted apart (a CI run of the 6-site gossip test).
TEST(Averager, DpsgdMixesBothWaysWhenStepCountersAreOffset) {
  const std::vector<std::string> view = {"a", "b"};
  TestEnv env(9);
  auto a = Make(GossipProtocol::kDpsgd, "a", {0.0f}, env);
  auto b = Make(GossipProtocol::kDpsgd, "b", {4.0f}, env);
  Averager::State ahead = b->Snapshot();
  ahead.step = 10;
  ASSERT_TRUE(b->Restore(ahead).ok());
  auto exchange = [&] {
    const auto from_a = a->OnTick(view);
    const auto from_b = b->OnTick(view);
    for (const auto& s : from_a) Deliver(*b, "a", s, view);
    for (const auto& s : from_b) Deliver(*a, "b", s, view);
  };
  exchange();  // first pushes; nothing to mix yet
  exchange();  // each mixes the other's model with weight 1/2
  EXPECT_FLOAT_EQ(a->params()[0], 2.0f);
  EXPECT_FLOAT_EQ(b->params()[0], 2.0f);
  // A neighbour that falls silent is left out after kMaxStaleness of the receiver's steps.
  // b keeps a's last model (2) for the two steps after the one it arrived in, then mixes
  // with itself alone.
  b->params()[0] = 6.0f;
  b->OnTick(view);
  EXPECT_FLOAT_EQ(b->params()[0], 4.0f);
  b->OnTick(view);
  b->OnTick(view);
  EXPECT_FLOAT_EQ(b->params()[0], 2.5f);
  b->OnTick(view);
  EXPECT_FLOAT_EQ(b->params()[0], 2.5f) << "a stale model was still mixed";
}

TEST(Averager, PullRequestServesAJoiningNode) {
  TestEnv env(8);
  const std::vector<float> xa = Random(5, 100);
  for (GossipProtocol p : {GossipProtocol::kPushPull, GossipProtocol::kDpsgd,
                           GossipProtocol::kChoco, GossipProtocol::kPushSum}) {
    auto a = Make(p, "a", xa, env, p == GossipProtocol::kChoco ? "topk:0.1|int8" : "none");
    for (int i = 0; i < 5; ++i) a->OnTick(std::vector<std::string>{"a"});  // alone
    auto b = Make(p, "b", std::vector<float>(100, 0.0f), env);
    const std::vector<std::string> view = {"a", "b"};
    ModelSend request = b->PullRequest("a");
    EXPECT_EQ(request.message.kind, GossipKind::kPullRequest);
    EXPECT_EQ(request.message.model.element_count, 0u);
    auto replies = Deliver(*a, "b", request, view);
    ASSERT_EQ(replies.size(), 1u);
    EXPECT_EQ(replies[0].message.kind, GossipKind::kPullReply);
    EXPECT_EQ(replies[0].message.step, 5u);
    EXPECT_TRUE(Deliver(*b, "a", replies[0], view).empty());
    EXPECT_EQ(Values(*b), xa) << GossipProtocolName(p);  // choco's reply is uncompressed
    EXPECT_EQ(b->step(), 5u);
  }
}

TEST(Averager, ChocoResynchronisesACopyAfterAGap) {
  const std::vector<std::string> view = {"a", "b"};
  TestEnv env(9);
  auto a = Make(GossipProtocol::kChoco, "a", Random(6, 50), env);
  auto b = Make(GossipProtocol::kChoco, "b", Random(7, 50), env);
  // First contact at step 1 needs no sync: both copies start at zero.
  auto q1 = a->OnTick(view);
  b->OnTick(view);
  ASSERT_EQ(q1.size(), 1u);
  EXPECT_TRUE(Deliver(*b, "a", q1[0], view).empty());
  a->OnTick(view);  // q2 is lost
  auto q3 = a->OnTick(view);
  auto request = Deliver(*b, "a", q3[0], view);
  ASSERT_EQ(request.size(), 1u);
  EXPECT_EQ(request[0].message.kind, GossipKind::kSyncRequest);
  // Further gaps while the request is pending do not ask again, until the timeout.
  auto q4 = a->OnTick(view);
  EXPECT_TRUE(Deliver(*b, "a", q4[0], view).empty());
  auto sync = Deliver(*a, "b", request[0], view);
  ASSERT_EQ(sync.size(), 1u);
  EXPECT_EQ(sync[0].message.kind, GossipKind::kSync);
  EXPECT_EQ(sync[0].message.step, 4u);
  EXPECT_EQ(wire::PayloadFloats(sync[0].message.model).value(), a->Snapshot().x_hat);
  EXPECT_TRUE(Deliver(*b, "a", sync[0], view).empty());
  // With the copy back, b's next step moves x by gamma * w_ab * (x_hat_a - x_hat_b),
  // w_ab = 1/2 for two nodes.
  const auto sa = a->Snapshot(), sb = b->Snapshot();
  b->OnTick(view);
  for (size_t i = 0; i < sb.x.size(); ++i) {
    EXPECT_NEAR(b->params()[i], sb.x[i] + 0.5 * 0.5 * (sa.x_hat[i] - sb.x_hat[i]), 1e-6) << i;
  }
  // And the following q applies in step.
  auto q5 = a->OnTick(view);
  EXPECT_TRUE(Deliver(*b, "a", q5[0], view).empty());
}

TEST(Averager, ChocoRequestsAgainAfterTheTimeout) {
  const std::vector<std::string> view = {"a", "b"};
  TestEnv env(10);
  auto a = Make(GossipProtocol::kChoco, "a", Random(8, 10), env);
  auto b = Make(GossipProtocol::kChoco, "b", Random(9, 10), env);
  b->OnTick(view);
  a->OnTick(view);
  auto q2 = a->OnTick(view);  // q1 lost
  EXPECT_EQ(Deliver(*b, "a", q2[0], view).size(), 1u);
  env.Set(1.0);
  auto q3 = a->OnTick(view);
  EXPECT_TRUE(Deliver(*b, "a", q3[0], view).empty());
  env.Set(2.0);  // the request (or its answer) was lost: ask again
  auto q4 = a->OnTick(view);
  auto again = Deliver(*b, "a", q4[0], view);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].message.kind, GossipKind::kSyncRequest);
}

TEST(Averager, SnapshotRestoreRoundTrips) {
  const std::vector<std::string> view = {"a", "b"};
  for (GossipProtocol p : {GossipProtocol::kPushPull, GossipProtocol::kDpsgd,
                           GossipProtocol::kChoco, GossipProtocol::kPushSum}) {
    TestEnv env(11);
    auto a = Make(p, "a", Random(10, 40), env, p == GossipProtocol::kChoco ? "int8" : "none");
    auto b = Make(p, "b", Random(11, 40), env);
    for (int i = 0; i < 3; ++i) {
      for (const auto& s : a->OnTick(view)) Deliver(*b, "a", s, view);
    }
    const Averager::State saved = a->Snapshot();
    EXPECT_EQ(saved.step, 3u);
    EXPECT_EQ(saved.x_hat.empty(), p != GossipProtocol::kChoco);
    if (p == GossipProtocol::kPushSum) {
      EXPECT_EQ(saved.weight, 0.125);
    }
    auto restored = Make(p, "a", std::vector<float>(40, 0.0f), env);
    ASSERT_TRUE(restored->Restore(saved).ok());
    const Averager::State again = restored->Snapshot();
    EXPECT_EQ(again.x, saved.x);
    EXPECT_EQ(again.x_hat, saved.x_hat);
    EXPECT_EQ(again.weight, saved.weight);
    EXPECT_EQ(again.step, saved.step);
    EXPECT_EQ(restored->weight(), saved.weight);

    Averager::State bad = saved;
    bad.x.pop_back();
    ExpectInvalid(restored->Restore(bad), "x has 39 values");
    bad = saved;
    bad.x_hat.assign(7, 0.0f);
    ExpectInvalid(restored->Restore(bad), "x_hat");
    bad = saved;
    bad.weight = 0;
    ExpectInvalid(restored->Restore(bad), "weight");
    EXPECT_EQ(restored->Snapshot().x, saved.x);  // refused restores change nothing
  }
}

TEST(Averager, ChocoRestartResynchronisesItsNeighbours) {
  // A node restored from an older checkpoint sends steps its neighbours already saw.
  const std::vector<std::string> view = {"a", "b"};
  TestEnv env(12);
  auto a = Make(GossipProtocol::kChoco, "a", Random(12, 20), env);
  auto b = Make(GossipProtocol::kChoco, "b", Random(13, 20), env);
  b->OnTick(view);
  for (const auto& s : a->OnTick(view)) Deliver(*b, "a", s, view);
  const auto checkpoint = a->Snapshot();
  for (const auto& s : a->OnTick(view)) Deliver(*b, "a", s, view);
  ASSERT_TRUE(a->Restore(checkpoint).ok());
  auto q = a->OnTick(view);  // step 2 again, from another x_hat
  auto request = Deliver(*b, "a", q[0], view);
  ASSERT_EQ(request.size(), 1u);
  EXPECT_EQ(request[0].message.kind, GossipKind::kSyncRequest);
}

}  // namespace
}  // namespace fedmesh
