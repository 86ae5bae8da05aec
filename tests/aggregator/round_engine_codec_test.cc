// Round engine with codec chains (issue 4): coded updates, prescribed and downlink codecs,
// and update prediction.
#include "aggregator/round_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aggregator/strategy.h"
#include "core/codec/payload.h"
#include "core/env.h"
#include "core/wire/wire_codec.h"
#include "crypto/dp/rdp_accountant.h"
#include "tests/aggregator/round_engine_harness.h"

namespace fedmesh {
namespace {

using namespace round_engine_testing;  // NOLINT: the fixture's vocabulary
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Output = RoundEngine::Output;

RoundEngineOptions TwoNodes(RoundEngineOptions o = TestOptions()) {
  o.total_rounds = 1;
  o.clients_per_round = 2;
  o.min_clients = 2;
  return o;
}

wire::Message CodedResult(Harness& h, const std::string& id, const wire::TensorPayload& update) {
  wire::FitResult r;
  r.round = h.engine->round();
  r.num_examples = h.nodes[id].num_examples;
  r.train_loss = 0.5;
  r.update = update;
  r.bytes_before_codec = 4 * update.element_count;
  r.bytes_after_codec = update.bytes.size();
  return wire::Message{h.HeaderFrom(id, r.round), r};
}

std::vector<float> SparseDelta(size_t n, float scale) {
  // 97 is coprime with every n used here, so the ten indices are distinct and in range.
  std::vector<float> d(n, 0.0f);
  for (size_t i = 0; i < 10; ++i) d[(i * 97 + 3) % n] = scale * static_cast<float>(i + 1);
  return d;
}

TEST(RoundEngineCodec, CodedUpdatesAreDecodedAddedToTheGlobalAndCounted) {
  const std::vector<float> global(1000, 0.5f);
  Harness h(TwoNodes(), global);
  h.Register("a", 100);
  h.Register("b", 300);
  ASSERT_THAT(h.engine->selected(), ElementsAre("a", "b"));
  EXPECT_EQ(h.LastFitTask("a")->update_codec, "");  // nodes choose
  const codec::Chain chain = codec::Chain::Parse("topk:0.01|int8|zstd").value();
  const std::vector<float> da = SparseDelta(1000, 1.0f), db = SparseDelta(1000, -0.5f);
  auto pa = codec::EncodePayload(chain, da, 1).value();
  auto pb = codec::EncodePayload(chain, db, 2).value();
  h.Deliver("a", CodedResult(h, "a", pa));
  h.Deliver("b", CodedResult(h, "b", pb));
  auto closed = h.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(closed.size(), 1u);
  // FedAvg of the decoded deltas (100:300) added to the global; int8 error <= 10/254.
  for (size_t i = 0; i < global.size(); ++i) {
    const double want = 0.5 + (100.0 * da[i] + 300.0 * db[i]) / 400.0;
    EXPECT_NEAR(closed[0].global[i], want, 10.0 / 254.0) << i;
  }
  EXPECT_EQ(closed[0].global[1], 0.5f);  // not among the kept: exactly unchanged
  const RoundEngine::RoundMetrics& m = closed[0].metrics;
  EXPECT_EQ(m.update_bytes_raw, 2u * 4000u);
  EXPECT_EQ(m.update_bytes, pa.bytes.size() + pb.bytes.size());
  EXPECT_DOUBLE_EQ(m.compression_ratio, 8000.0 / static_cast<double>(m.update_bytes));
  EXPECT_GT(m.compression_ratio, 50.0);
  // What the store persists (UpdateAccepted) is the node's new weights: global + decoded.
  auto accepted = h.Events<RoundEngine::UpdateAccepted>();
  ASSERT_EQ(accepted.size(), 2u);
  EXPECT_EQ(accepted[0].params[1], 0.5f);
  EXPECT_NEAR(accepted[0].params[3], 1.5f, 10.0 / 254.0);  // 0.5 + int8(1.0)
  EXPECT_NE(accepted[0].params[3], 1.5f);                   // int8 is lossy
}

// The simulator keeps no store: with report_update_params off, UpdateAccepted leaves the
// weights out and nothing else changes.
TEST(RoundEngineCodec, UpdateAcceptedCanLeaveTheWeightsOut) {
  const std::vector<float> global(1000, 0.5f);
  std::vector<float> closed_global[2];
  for (bool report : {true, false}) {
    RoundEngineOptions o = TwoNodes();
    o.report_update_params = report;
    Harness h(o, global);
    h.Register("a", 100);
    h.Register("b", 300);
    h.Deliver("a", CodedResult(h, "a", wire::FloatPayload(SparseDelta(1000, 0.1f))));
    h.Deliver("b", CodedResult(h, "b", wire::FloatPayload(SparseDelta(1000, -0.3f))));
    auto accepted = h.Events<RoundEngine::UpdateAccepted>();
    ASSERT_EQ(accepted.size(), 2u);
    for (const auto& a : accepted) {
      EXPECT_EQ(a.params.size(), report ? global.size() : 0u);
      EXPECT_EQ(a.num_examples, a.node_id == "a" ? 100u : 300u);
    }
    if (report) {
      EXPECT_FLOAT_EQ(accepted[0].params[3], 0.6f);  // 0.5 + a's 0.1 at index 3
    }
    auto closed = h.Events<RoundEngine::RoundClosed>();
    ASSERT_EQ(closed.size(), 1u);
    closed_global[report ? 0 : 1] = closed[0].global;
  }
  EXPECT_EQ(closed_global[0], closed_global[1]);
  EXPECT_NE(closed_global[0], global);
}

TEST(RoundEngineCodec, PrescribedCodecIsSentAndEnforced) {
  RoundEngineOptions o = TwoNodes();
  o.update_codec = "topk:0.1|int8";
  Harness h(o, std::vector<float>(100, 0.0f));
  h.Register("a", 100);
  h.Register("b", 100);
  EXPECT_EQ(h.LastFitTask("a")->update_codec, "topk:0.1|int8:256");  // canonical
  const std::vector<float> d = SparseDelta(100, 0.01f);
  h.Deliver("a", CodedResult(h, "a", wire::FloatPayload(d)));
  auto rejected = h.Events<RoundEngine::UpdateRejected>();
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].cause, RejectCause::kMalformed);
  EXPECT_THAT(rejected[0].text, HasSubstr("\"none\" is not the prescribed \"topk:0.1|int8:256\""));
  // The same chain spelled without its defaults is the same chain.
  auto p = codec::EncodePayload(codec::Chain::Parse("topk:0.1|int8").value(), d, 1).value();
  p.codec = "topk:0.1|int8";
  h.Deliver("a", CodedResult(h, "a", p));
  h.Deliver("b", CodedResult(h, "b", p));
  EXPECT_EQ(h.Events<RoundEngine::UpdateAccepted>().size(), 2u);
  EXPECT_EQ(h.Events<RoundEngine::RoundClosed>().size(), 1u);
}

TEST(RoundEngineCodec, DownlinkCodecEncodesTheGlobalModel) {
  RoundEngineOptions o = TwoNodes();
  o.downlink_codec = "fp16|zstd";
  std::vector<float> global(5000);
  for (size_t i = 0; i < global.size(); ++i) global[i] = 0.001f * static_cast<float>(i % 77);
  Harness h(o, global);
  h.Register("a", 100);
  h.Register("b", 100);
  const wire::FitTask task = *h.LastFitTask("a");
  EXPECT_EQ(task.global_model.codec, "fp16|zstd:3");
  EXPECT_LT(task.global_model.bytes.size(), 2 * global.size());
  std::vector<float> got = codec::DecodePayload(task.global_model).value();
  for (size_t i = 0; i < global.size(); ++i) {
    EXPECT_NEAR(got[i], global[i], std::fabs(global[i]) * 0x1p-11f) << i;
  }
  // A model fp16 cannot hold is sent exact rather than not at all.
  global[10] = 1e6f;
  Harness big(o, global);
  big.Register("a", 100);
  big.Register("b", 100);
  EXPECT_EQ(big.LastFitTask("a")->global_model.codec, "none");
}

TEST(RoundEngineCodec, BadCodecOptionsAreRefused) {
  RoundEngineOptions o = TestOptions();
  o.downlink_codec = "topk:0.1";
  EXPECT_THAT(Validate(o).message(), HasSubstr("downlink_codec \"topk:0.1\" sparsifies"));
  o = TestOptions();
  o.downlink_codec = "fp16|fp16";
  EXPECT_THAT(Validate(o).message(), HasSubstr("downlink_codec"));
  o = TestOptions();
  o.update_codec = "gzip";
  EXPECT_THAT(Validate(o).message(), HasSubstr("update_codec"));
  EXPECT_THAT(Validate(o).message(), HasSubstr("\"gzip\" is unknown"));
}

TEST(RoundEngineCodec, UndecodableOrMisshapenCodedUpdatesAreRejected) {
  Harness h(TwoNodes(), std::vector<float>(1000, 0.0f));
  h.Register("a", 100);
  h.Register("b", 100);
  const codec::Chain chain = codec::Chain::Parse("topk:0.01|int8").value();
  auto p = codec::EncodePayload(chain, SparseDelta(1000, 1.0f), 1).value();
  auto cut = p;
  cut.bytes.pop_back();
  h.Deliver("a", CodedResult(h, "a", cut));
  auto wrong = codec::EncodePayload(chain, SparseDelta(2000, 1.0f), 1).value();
  h.Deliver("a", CodedResult(h, "a", wrong));
  auto rejected = h.Events<RoundEngine::UpdateRejected>();
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_EQ(rejected[0].cause, RejectCause::kMalformed);
  EXPECT_THAT(rejected[0].text, HasSubstr("update payload"));
  EXPECT_EQ(rejected[1].cause, RejectCause::kWrongShape);
  // The node can still send a good one.
  h.Deliver("a", CodedResult(h, "a", p));
  EXPECT_EQ(h.Events<RoundEngine::UpdateAccepted>().size(), 1u);
}

// ---- Update prediction -------------------------------------------------------------------

// A FitResult whose update is `change` minus the task's prediction, marked as such.
wire::Message PredictedResult(Harness& h, const std::string& id, const std::vector<float>& change,
                              const std::vector<float>& prediction) {
  std::vector<float> u = change;
  for (size_t i = 0; i < u.size(); ++i) u[i] -= prediction[i];
  wire::Message m = CodedResult(h, id, wire::FloatPayload(u));
  std::get<wire::FitResult>(m.body).applied_prediction = true;
  return m;
}

TEST(RoundEngineCodec, UpdatePredictionIsSentFromRoundTwoAndAddedBack) {
  RoundEngineOptions o = TwoNodes();
  o.total_rounds = 3;
  o.update_prediction = 0.5;
  Harness h(o, {1.0f, 2.0f, 3.0f});
  h.Register("a", 100);
  h.Register("b", 300);
  // Round 1: nothing to predict from yet.
  wire::FitTask t1 = *h.LastFitTask("a");
  EXPECT_FALSE(t1.with_prediction);
  EXPECT_EQ(t1.global_model.element_count, 3u);
  h.Deliver("a", CodedResult(h, "a", wire::FloatPayload(std::vector<float>{4, 0, 0})));
  h.Deliver("b", CodedResult(h, "b", wire::FloatPayload(std::vector<float>{0, 4, -8})));
  auto closed = h.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_THAT(closed[0].global, ElementsAre(2.0f, 5.0f, -3.0f));  // + (1, 3, -6)

  // Round 2: the model, then 0.5 x (1, 3, -6).
  wire::FitTask t2 = *h.LastFitTask("a");
  ASSERT_EQ(t2.round, 2u);
  EXPECT_TRUE(t2.with_prediction);
  EXPECT_EQ(t2.global_model.element_count, 6u);
  EXPECT_THAT(wire::PayloadFloats(t2.global_model).value(),
              ElementsAre(2.0f, 5.0f, -3.0f, 0.5f, 1.5f, -3.0f));
  const std::vector<float> p = {0.5f, 1.5f, -3.0f};
  // "a" sends its change minus p; "b" (an older node) sends its plain change. Both count
  // as the change they made.
  h.Deliver("a", PredictedResult(h, "a", {2, 2, 2}, p));
  h.Deliver("b", CodedResult(h, "b", wire::FloatPayload(std::vector<float>{-2, 2, 6})));
  auto accepted = h.Events<RoundEngine::UpdateAccepted>();
  ASSERT_EQ(accepted.size(), 4u);
  EXPECT_THAT(accepted[2].params, ElementsAre(4.0f, 7.0f, -1.0f));
  closed = h.Events<RoundEngine::RoundClosed>();
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_THAT(closed[1].global, ElementsAre(1.0f, 7.0f, 2.0f));  // + (-1, 2, 5)
  // Round 3 predicts from round 2's change.
  EXPECT_THAT(wire::PayloadFloats(h.LastFitTask("a")->global_model).value(),
              ElementsAre(1.0f, 7.0f, 2.0f, -0.5f, 1.0f, 2.5f));
}

TEST(RoundEngineCodec, UpdatePredictionInALossyDownlinkIsAddedBackAsNodesDecodeIt) {
  RoundEngineOptions o = TwoNodes();
  o.total_rounds = 2;
  o.update_prediction = 1.0;
  o.downlink_codec = "int8";
  std::vector<float> global(300);
  for (size_t i = 0; i < global.size(); ++i) global[i] = 0.01f * static_cast<float>(i % 13);
  Harness h(o, global);
  h.Register("a", 100);
  h.Register("b", 100);
  std::vector<float> change(300);
  for (size_t i = 0; i < change.size(); ++i) change[i] = 0.003f * static_cast<float>(i % 7);
  h.Deliver("a", CodedResult(h, "a", wire::FloatPayload(change)));
  h.Deliver("b", CodedResult(h, "b", wire::FloatPayload(change)));
  const wire::FitTask t2 = *h.LastFitTask("a");
  ASSERT_TRUE(t2.with_prediction);
  EXPECT_EQ(t2.global_model.codec, "int8:256");
  std::vector<float> decoded = codec::DecodePayload(t2.global_model).value();
  const std::vector<float> p(decoded.begin() + 300, decoded.end());
  // A zero update on top of the prediction: the node's new weights are exactly the
  // engine's global plus the prediction it decoded, not plus the engine's exact change.
  h.Deliver("a", PredictedResult(h, "a", p, p));
  auto accepted = h.Events<RoundEngine::UpdateAccepted>();
  ASSERT_EQ(accepted.size(), 3u);
  const std::vector<float> g1 = h.Events<RoundEngine::RoundClosed>()[0].global;
  bool any_lossy = false;
  for (size_t i = 0; i < 300; ++i) {
    EXPECT_FLOAT_EQ(accepted[2].params[i], g1[i] + p[i]) << i;
    any_lossy |= std::fabs(p[i] - (g1[i] - global[i])) > 1e-6f;
  }
  EXPECT_TRUE(any_lossy);  // int8 changed the prediction, so the check above can fail
}

TEST(RoundEngineCodec, AnUpdateClaimingAnUnsentPredictionIsRejected) {
  Harness h(TwoNodes(), {1.0f, 2.0f});
  h.Register("a", 100);
  h.Register("b", 100);
  h.Deliver("a", PredictedResult(h, "a", {1, 1}, {0.5f, 0.5f}));
  auto rejected = h.Events<RoundEngine::UpdateRejected>();
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].cause, RejectCause::kMalformed);
  EXPECT_THAT(rejected[0].text, HasSubstr("applied an update prediction but round 1's FitTask "
                                          "carried none"));
  EXPECT_TRUE(h.Events<RoundEngine::UpdateAccepted>().empty());
}

TEST(RoundEngineCodec, BadUpdatePredictionOptionsAreRefused) {
  for (double beta : {-0.1, 1.5, std::nan("")}) {
    RoundEngineOptions o = TestOptions();
    o.update_prediction = beta;
    EXPECT_THAT(Validate(o).message(), HasSubstr("update_prediction is")) << beta;
    EXPECT_THAT(Validate(o).message(), HasSubstr("in [0, 1]")) << beta;
  }
  RoundEngineOptions o = TestOptions();
  o.update_prediction = 0.9;
  EXPECT_TRUE(Validate(o).ok());
  o.mode = RoundMode::kBuffered;
  o.buffer_size = 2;
  EXPECT_THAT(Validate(o).message(), HasSubstr("update_prediction needs synchronous rounds"));
  o = TestOptions();
  o.update_prediction = 0.9;
  o.secagg.enabled = true;
  EXPECT_THAT(Validate(o).message(), HasSubstr("update_prediction does not work with secagg"));
}


}  // namespace
}  // namespace fedmesh
