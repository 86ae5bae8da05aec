// Split training (vertical/): a label party and feature parties in one process over the
// in-process transport.
//  - Breast cancer cut by columns, ids overlapping about 70%: the label party holds only
//    noise columns and the label, so every bit of accuracy comes through the cut (the
//    feature party's activations forward, its gradients back). It reaches the accuracy of
//    an uncut mlp trained centrally on the same rows (and tested on the same held-out ones)
//    within 2 points on the mean of twelve jobs (each ~80 test rows; jobs differ by their seed,
//    which orders the aligned rows and so picks the held-out ones).
//    The same with staleness 1, with int8 on the cut and every message signed, and with the
//    top over the summed bottom outputs.
//  - Micro-batching changes the schedule, not the result: 1 and 4 micro-batches per step
//    end with the same parameters on both sides.
//  - Three parties: the job trains on the rows all three hold.
//  - Out-of-protocol messages (another step, wrong rows, a dead party), a message not signed
//    by its sender's enrolled key, bottoms of the wrong width for a summed cut are errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "collective/in_process_hub.h"
#include "core/data/data_source.h"
#include "core/env.h"
#include "core/rng.h"
#include "core/trainer.h"
#include "tests/vertical/split_test_util.h"
#include "vertical/split_job.h"

namespace fedmesh::vertical {
namespace {

using ::testing::HasSubstr;
using namespace fedmesh::vertical::testing;  // NOLINT

class SplitJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    all_ = BreastCancer();
    if (all_.size() == 0) GTEST_SKIP() << "no " << kBreastCancerCsv << " (apt-get install python3-sklearn)";
  }
  Dataset all_;
};

// Rows each party holds: every row with probability `p`, drawn per party.
std::vector<uint32_t> Holds(size_t n, double p, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint32_t> rows;
  for (uint32_t r = 0; r < n; ++r)
    if (rng.Uniform() < p) rows.push_back(r);
  return rows;
}
std::vector<std::string> IdsOf(const std::vector<uint32_t>& rows) {
  std::vector<std::string> ids;
  for (uint32_t r : rows) ids.push_back("patient-" + std::to_string(r));
  return ids;
}

// Both sides of a two-party job over the in-process transport, the feature party on a thread.
struct BothResults {
  Result<SplitJobReport> label = Status::Internal("not run");
  Result<SplitJobReport> feature = Status::Internal("not run");
};
BothResults RunBoth(LabelJob label, FeatureJob feature, const SplitJobOptions& lo, const SplitJobOptions& fo) {
  collective::InProcessHub hub(2);
  BothResults r;
  std::thread t([&] { r.feature = RunFeatureJob(*hub.endpoint(1), std::move(feature), fo); });
  r.label = RunLabelJob(*hub.endpoint(0), std::move(label), lo);
  t.join();
  return r;
}

// How a job's cut is run: the schedule, the wire, how the top joins the bottoms, and
// whether every message is signed (as fedmesh-node does).
struct Cut {
  uint32_t staleness = 0;
  uint32_t microbatches = 2;
  CutWire wire = CutWire::kFloat32;
  CutCombine combine = CutCombine::kConcat;
  bool sign = false;
};

// One job and its central baseline: (split test accuracy, central test accuracy).
std::pair<double, double> SplitAndCentral(const Dataset& all_, const Cut& cut = {}, uint64_t seed = 3) {
  const auto hospital_rows = Holds(all_.size(), 0.85, 1), lab_rows = Holds(all_.size(), 0.85, 2);
  // The label party: 4 columns of noise and the label. The lab: the 30 measurements.
  Dataset hospital;
  Rng noise(7);
  for (uint32_t r : hospital_rows) {
    for (int c = 0; c < 4; ++c) hospital.features.push_back(static_cast<float>(noise.Normal()));
    hospital.labels.push_back(all_.labels[r]);
  }
  hospital.sample_shape = {4};
  hospital.num_classes = 2;
  SplitPartOptions po;
  po.lr = 0.05f;
  po.momentum = 0.9f;
  LabelJob label;
  label.ids = IdsOf(hospital_rows);
  label.data = hospital;
  const bool sum = cut.combine == CutCombine::kSum;
  label.bottom = Part(4, 8, sum ? 8 : 4, 11, po);
  SplitPartOptions top_o = po;
  top_o.input_gradients = true;
  label.top = Part(sum ? 8 : 4 + 8, 0, 2, 12, top_o);
  label.feature_ranks = {1};
  label.party.wire = cut.wire;
  label.party.combine = cut.combine;
  FeatureJob lab;
  lab.party.wire = cut.wire;
  lab.ids = IdsOf(lab_rows);
  lab.data = Columns(all_, 0, 30, lab_rows);
  lab.bottom = Part(30, 16, 8, 13, po);
  lab.label_rank = 0;
  SplitJobOptions o;
  o.epochs = 8;
  o.batch = 32;
  o.microbatches = cut.microbatches;
  o.staleness = cut.staleness;
  o.seed = seed;
  std::vector<std::string> lines;
  o.metrics = [&](const std::string& l) { lines.push_back(l); };
  SplitJobOptions lo = o, fo = o;
  Identity hospital_key = Identity::Generate("hospital").value(), lab_key = Identity::Generate("lab").value();
  if (cut.sign) {
    lo.members = fo.members = {hospital_key.public_identity(), lab_key.public_identity()};
    lo.signer = &hospital_key;
    fo.signer = &lab_key;
  }
  auto [lr, fr] = RunBoth(std::move(label), std::move(lab), lo, fo);
  EXPECT_TRUE(lr.ok()) << lr.status().ToString();
  EXPECT_TRUE(fr.ok()) << fr.status().ToString();
  if (!lr.ok() || !fr.ok()) return {0, 0};
  // About 0.85 * 0.85 of 569 rows are held by both.
  EXPECT_NEAR(static_cast<double>(lr->aligned_rows), 0.7225 * 569, 40);
  EXPECT_EQ(lr->aligned_rows, fr->aligned_rows);
  EXPECT_EQ(lr->steps, fr->steps);
  EXPECT_EQ(lines.size(), 8u);
  EXPECT_THAT(lines.back(), HasSubstr("\"test_auc\""));
  const double split_acc = lr->test_metrics.at("accuracy");

  // Central: an uncut mlp over the 30 measurements, trained alike on the same rows and
  // tested on the same held-out rows.
  std::vector<uint32_t> joined_rows;
  for (uint32_t r : lr->aligned) joined_rows.push_back(hospital_rows[r]);
  Dataset joined = Columns(all_, 0, 30, joined_rows);
  std::vector<uint32_t> test_rows(lr->test.begin(), lr->test.end()), train_rows;
  for (uint32_t i = 0; i < joined.size(); ++i)
    if (!std::binary_search(test_rows.begin(), test_rows.end(), i)) train_rows.push_back(i);
  Dataset train = joined.Subset(train_rows), test = joined.Subset(test_rows);
  auto backend = MakeCpuBackend(1);
  ModelSpec spec;
  spec.input_shape = {30};
  spec.num_classes = 2;
  spec.hidden = {16};
  auto model = BuildModel(spec, backend.get());
  EXPECT_TRUE(model.ok());
  (*model)->InitParams(13);
  TrainerOptions to;
  to.batch_size = 32;
  to.sgd.lr = 0.05f;
  to.sgd.momentum = 0.9f;
  SystemEnv env(3);
  Trainer trainer(model->get(), to, &env);
  for (int e = 0; e < 8; ++e) EXPECT_TRUE(trainer.TrainEpoch(train).ok());
  auto central = trainer.Evaluate(test);
  EXPECT_TRUE(central.ok());
  std::cout << "split test accuracy " << split_acc << " (auc " << lr->test_metrics.at("auc") << ", "
            << lr->test_rows << " rows); central " << central->accuracy << " (" << test.size() << " rows)\n";
  return {split_acc, central->accuracy};
}

// kJobs jobs run as `cut` says, seeds 3, 4, ...: each seed orders the aligned rows its own
// way, so its own held-out rows (about 80 of them); the means compare the methods rather than
// the draws. Every job >= 0.88, the mean within 2 points of central training's. (When the
// PSI's random order still chose the rows, five jobs' mean for the summed cut spread about
// 0.8 points and once fell to -2.2 in CI; twelve narrowed it to about 0.5. Now each seed
// gives the same jobs in every run.)
constexpr int kJobs = 12;

void ExpectJobsAsGoodAsCentral(const Dataset& all, const Cut& cut, const char* what) {
  double split = 0, central = 0;
  for (int k = 0; k < kJobs; ++k) {
    const auto [s, c] = SplitAndCentral(all, cut, 3 + k);
    EXPECT_GE(s, 0.88);
    split += s / kJobs;
    central += c / kJobs;
  }
  std::cout << what << ": mean split accuracy " << split << ", central " << central << "\n";
  EXPECT_GE(split, central - 0.02);
}

TEST_F(SplitJobTest, BreastCancerLearnsThroughTheCutAsWellAsCentralTraining) {
  ExpectJobsAsGoodAsCentral(all_, {}, "exact steps");
}

// Staleness 1 (the next step's forwards before this step's gradients are in) learns as
// well: the same jobs with 4 micro-batches, held to the same bars as exact steps.
TEST_F(SplitJobTest, StalenessOneLearnsAsWellAsCentralTraining) {
  ExpectJobsAsGoodAsCentral(all_, {.staleness = 1, .microbatches = 4}, "staleness 1");
}

// Activations and gradients as int8 (one scale per 256 values), every message signed: the
// same jobs, held to the same bars.
TEST_F(SplitJobTest, Int8CutSignedLearnsAsWellAsCentralTraining) {
  ExpectJobsAsGoodAsCentral(all_, {.wire = CutWire::kInt8, .sign = true}, "int8, signed");
}

// The top over the sum of the bottoms' outputs (each 8 wide) instead of their concatenation.
TEST_F(SplitJobTest, SummedCutLearnsAsWellAsCentralTraining) {
  ExpectJobsAsGoodAsCentral(all_, {.combine = CutCombine::kSum}, "sum");
}

// Drives a label party and one feature party by hand, message by message.
struct Pair {
  std::unique_ptr<LabelParty> label;
  std::unique_ptr<FeatureParty> feature;
};

Pair MakePair(const Dataset& all, int n, const LabelPartyOptions& lo = {}) {
  std::vector<uint32_t> rows;
  for (int r = 0; r < n; ++r) rows.push_back(static_cast<uint32_t>(r));
  SplitPartOptions po;
  po.lr = 0.1f;
  po.momentum = 0.5f;
  SplitPartOptions top_o = po;
  top_o.input_gradients = true;
  Pair p;
  p.label = std::move(LabelParty::Create(Part(10, 8, 4, 1, po), Part(4 + 6, 0, 2, 2, top_o), Columns(all, 0, 10, rows),
                                         {1}, lo))
                .value();
  p.feature = std::move(FeatureParty::Create(Part(20, 8, 6, 3, po), Columns(all, 10, 30, rows), {})).value();
  SplitMessage align;
  align.type = SplitMessageType::kAlign;
  for (int r = 0; r < n; ++r) align.indices.push_back(static_cast<uint64_t>(r));
  std::vector<SplitMessage> none;
  EXPECT_TRUE(p.feature->Handle(align, &none).ok());
  return p;
}

// One pass, every message through the wire encoding.
Status Pump(Pair& p, const std::vector<uint64_t>& rows, uint32_t micro, bool training) {
  FM_ASSIGN_OR_RETURN(std::vector<Outgoing> out, p.label->Begin(rows, micro, training));
  while (!out.empty()) {
    std::vector<Outgoing> next;
    for (auto& [to, m] : out) {
      FM_ASSIGN_OR_RETURN(std::string bytes, EncodeSplitMessage(m));
      FM_ASSIGN_OR_RETURN(SplitMessage back, DecodeSplitMessage(bytes));
      std::vector<SplitMessage> replies;
      FM_RETURN_IF_ERROR(p.feature->Handle(back, &replies));
      for (auto& r : replies) FM_RETURN_IF_ERROR(p.label->OnActivations(to, r, &next));
    }
    out = std::move(next);
  }
  return p.label->pass_done() ? Status::OK() : Status::Internal("pass not done");
}

TEST_F(SplitJobTest, MicroBatchesChangeTheScheduleNotTheResult) {
  std::vector<std::vector<float>> params[2];
  for (int k = 0; k < 2; ++k) {
    Pair p = MakePair(all_, 200);
    for (int step = 0; step < 12; ++step) {
      std::vector<uint64_t> rows;
      for (int i = 0; i < 48; ++i) rows.push_back(static_cast<uint64_t>((step * 48 + i * 7) % 200));
      ASSERT_TRUE(Pump(p, rows, k == 0 ? 1 : 4, true).ok());
    }
    ASSERT_TRUE(p.label->Flush().ok());
    for (SplitPart* part : {&p.label->bottom(), &p.label->top(), &p.feature->bottom()}) {
      params[k].emplace_back(part->model().params(), part->model().params() + part->model().num_flat());
    }
    EXPECT_EQ(p.label->steps_completed(), 12u);
    EXPECT_EQ(p.feature->steps_completed(), 12u);
  }
  for (size_t i = 0; i < params[0].size(); ++i) {
    ASSERT_EQ(params[0][i].size(), params[1][i].size());
    double diff = 0, norm = 0;
    for (size_t j = 0; j < params[0][i].size(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(params[0][i][j] - params[1][i][j])));
      norm = std::max(norm, static_cast<double>(std::fabs(params[0][i][j])));
    }
    EXPECT_LT(diff, 1e-4 * std::max(1.0, norm)) << "part " << i;
  }
}

// A part goes back only through a training forward its slot still holds: not an untouched
// slot, not an evaluation forward, not the same forward twice; a slot past the most a step
// may have is refused at the forward. Another slot's forward in between changes nothing.
TEST(SplitPartSlots, BackwardOnlyThroughTheSlotsOwnTrainingForward) {
  SplitPartOptions o;
  o.lr = 0.1f;
  std::unique_ptr<SplitPart> part = Part(4, 8, 3, 11, o);
  const std::vector<float> x0(2 * 4, 0.5f), x1(2 * 4, -1.0f), dout(2 * 3, 1.0f);
  EXPECT_EQ(part->BackwardSlot(0, dout.data()).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(part->Forward(x0.data(), 2, /*training=*/false, 1, 0).ok());
  EXPECT_EQ(part->BackwardSlot(0, dout.data()).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(part->Forward(x0.data(), 2, true, 1, 0).ok());
  ASSERT_TRUE(part->Forward(x1.data(), 2, true, 1, 1).ok());
  EXPECT_TRUE(part->BackwardSlot(0, dout.data()).ok());
  EXPECT_EQ(part->BackwardSlot(0, dout.data()).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(part->BackwardSlot(1, dout.data()).ok());
  EXPECT_EQ(part->Forward(x0.data(), 2, true, 1, SplitPart::kMaxSlots).code(), StatusCode::kInvalidArgument);
}

// A stale forward's backward runs on the weights the forward used, not on the ones a
// Step has made since: the update equals a reference part's, computed at the old weights.
TEST(SplitPartSlots, AStaleForwardGoesBackThroughTheWeightsItRanOn) {
  SplitPartOptions o;
  o.lr = 0.5f;
  std::unique_ptr<SplitPart> part = Part(4, 8, 3, 11, o), ref = Part(4, 8, 3, 11, o);
  const std::vector<float> x0(2 * 4, 0.5f), x1 = {1, -2, 0.5f, 3, -1, 0.25f, 2, -0.5f}, dout = {1, -1, 2, 0.5f, -3, 1};
  const size_t n = part->model().num_flat();
  const std::vector<float> w0(part->model().params(), part->model().params() + n);
  // The reference: the gradient of micro-batch 1 at w0 is (w0 - its update) / lr.
  ASSERT_TRUE(ref->Forward(x1.data(), 2, true, 1, 1).ok());
  ASSERT_TRUE(ref->BackwardSlot(1, dout.data()).ok());
  ref->Step();
  // The part: both forwards at w0, then step 0's backward and update, then step 1's.
  ASSERT_TRUE(part->Forward(x0.data(), 2, true, 1, 0).ok());
  ASSERT_TRUE(part->Forward(x1.data(), 2, true, 1, 1).ok());
  ASSERT_TRUE(part->BackwardSlot(0, dout.data()).ok());
  part->Step();
  EXPECT_EQ(part->stashed(), 1u);  // w0, for slot 1
  const std::vector<float> w1(part->model().params(), part->model().params() + n);
  ASSERT_TRUE(part->BackwardSlot(1, dout.data()).ok());
  EXPECT_EQ(part->stashed(), 0u);
  // Between the backward and the Step the model holds the current weights again.
  EXPECT_EQ(std::vector<float>(part->model().params(), part->model().params() + n), w1);
  part->Step();
  double worst = 0, moved = 0;
  for (size_t i = 0; i < n; ++i) {
    const double expect = w1[i] + (ref->model().params()[i] - w0[i]);
    worst = std::max(worst, std::fabs(part->model().params()[i] - expect));
    moved = std::max(moved, std::fabs(static_cast<double>(w1[i] - w0[i])));
  }
  EXPECT_GT(moved, 1e-3);   // the first step changed the weights the second backward must not use
  EXPECT_LT(worst, 1e-6);
}

// Staleness 1 by hand: two training steps in flight at most (a third Begin, an evaluation,
// a feature party asked for a third step: refused); activations of the second step that come
// first wait for the first; gradients go back step by step and the feature party keeps the
// old weights for the second step's backward until it ran.
TEST_F(SplitJobTest, StalenessOneKeepsTwoStepsInFlightAndNoMore) {
  LabelPartyOptions lo;
  lo.staleness = 1;
  Pair p = MakePair(all_, 40, lo);
  const std::vector<uint64_t> s0 = {0, 1, 2, 3}, s1 = {4, 5, 6, 7}, s2 = {8, 9, 10, 11};
  auto out0 = p.label->Begin(s0, 2, true);
  auto out1 = p.label->Begin(s1, 2, true);
  ASSERT_TRUE(out0.ok() && out1.ok());
  EXPECT_EQ(out1->at(0).second.step, 1u);
  EXPECT_EQ(p.label->passes_in_flight(), 2u);
  EXPECT_THAT(p.label->Begin(s2, 2, true).status().message(), HasSubstr("a pass is still running"));
  EXPECT_EQ(p.label->Begin(s2, 2, false).status().code(), StatusCode::kFailedPrecondition);
  std::vector<SplitMessage> acts0, acts1;
  for (auto& [to, m] : *out0) ASSERT_TRUE(p.feature->Handle(m, &acts0).ok());
  for (auto& [to, m] : *out1) ASSERT_TRUE(p.feature->Handle(m, &acts1).ok());
  SplitMessage third = out1->at(0).second;
  third.step = 2;
  std::vector<SplitMessage> none;
  EXPECT_THAT(p.feature->Handle(third, &none).message(), HasSubstr("at most 2 steps wait"));
  // Step 1's activations first: nothing can be processed before step 0's.
  std::vector<Outgoing> grads;
  for (auto& a : acts1) ASSERT_TRUE(p.label->OnActivations(1, a, &grads).ok());
  EXPECT_TRUE(grads.empty());
  for (auto& a : acts0) ASSERT_TRUE(p.label->OnActivations(1, a, &grads).ok());
  ASSERT_EQ(grads.size(), 4u);
  EXPECT_EQ(grads[0].second.step, 0u);
  EXPECT_EQ(grads[3].second.step, 1u);
  EXPECT_EQ(p.label->steps_completed(), 2u);
  EXPECT_TRUE(p.label->pass_done());
  // Step 1's gradients before step 0's are all in: refused.
  EXPECT_THAT(p.feature->Handle(grads[2].second, &none).message(), HasSubstr("(step 0 waits)"));
  ASSERT_TRUE(p.feature->Handle(grads[0].second, &none).ok());
  ASSERT_TRUE(p.feature->Handle(grads[1].second, &none).ok());
  EXPECT_EQ(p.feature->steps_completed(), 1u);
  EXPECT_EQ(p.feature->bottom().stashed(), 1u);
  EXPECT_FALSE(p.feature->between_steps());
  ASSERT_TRUE(p.feature->Handle(grads[2].second, &none).ok());
  ASSERT_TRUE(p.feature->Handle(grads[3].second, &none).ok());
  EXPECT_EQ(p.feature->steps_completed(), 2u);
  EXPECT_EQ(p.feature->bottom().stashed(), 0u);
  EXPECT_TRUE(p.feature->between_steps());
  // The label party's parts run one step at a time: they never keep old weights.
  ASSERT_TRUE(p.label->Flush().ok());
  EXPECT_EQ(p.label->top().stashed(), 0u);
  EXPECT_EQ(p.label->bottom().stashed(), 0u);
  // Exact steps (staleness 0) refuse the second Begin.
  Pair exact = MakePair(all_, 40);
  ASSERT_TRUE(exact.label->Begin(s0, 2, true).ok());
  EXPECT_EQ(exact.label->Begin(s1, 2, true).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(SplitJobTest, OutOfProtocolMessagesAreErrors) {
  Pair p = MakePair(all_, 50);
  std::vector<uint64_t> rows = {1, 2, 3, 4};
  auto out = p.label->Begin(rows, 2, true);
  ASSERT_TRUE(out.ok());
  std::vector<SplitMessage> replies;
  ASSERT_TRUE(p.feature->Handle(out->at(0).second, &replies).ok());
  std::vector<Outgoing> next;
  // Activations for another step.
  SplitMessage other = replies[0];
  other.step = 5;
  EXPECT_THAT(p.label->OnActivations(1, other, &next).message(), HasSubstr("activations for training step 5"));
  // Of another row count.
  SplitMessage rows3 = replies[0];
  rows3.rows = 3;
  rows3.values.resize(3 * rows3.cols);
  EXPECT_THAT(p.label->OnActivations(1, rows3, &next).message(), HasSubstr("activations of 3 x 6, expected 2 rows"));
  // From a rank that is no feature party.
  EXPECT_THAT(p.label->OnActivations(7, replies[0], &next).message(), HasSubstr("not a feature party"));
  ASSERT_TRUE(p.label->OnActivations(1, replies[0], &next).ok());
  EXPECT_THAT(p.label->OnActivations(1, replies[0], &next).message(), HasSubstr("came twice"));
  // The feature party: rows past the job, a micro-batch past the most a step has, an
  // evaluation while a step waits for gradients (its forward would take the place of the
  // activations they go back through), gradients never asked for, a stale step.
  SplitMessage fwd = out->at(1).second;
  fwd.indices = {60};
  EXPECT_THAT(p.feature->Handle(fwd, &replies).message(), HasSubstr("names row 60, the job has 50 rows"));
  SplitMessage far = out->at(1).second;
  far.micro = SplitPart::kMaxSlots;
  EXPECT_THAT(p.feature->Handle(far, &replies).message(), HasSubstr("a step has at most 4096"));
  SplitMessage eval = out->at(1).second;
  eval.training = false;
  EXPECT_THAT(p.feature->Handle(eval, &replies).message(),
              HasSubstr("an evaluation forward while step 0 waits for gradients"));
  SplitMessage grads;
  grads.type = SplitMessageType::kGradients;
  grads.step = 0;
  grads.micro = 9;
  EXPECT_THAT(p.feature->Handle(grads, &replies).message(), HasSubstr("was not asked to compute"));
  SplitMessage stale = out->at(1).second;
  stale.step = 3;
  EXPECT_THAT(p.feature->Handle(stale, &replies).message(), HasSubstr("for step 3 while step 0 waits"));
  SplitMessage done;
  done.type = SplitMessageType::kDone;
  EXPECT_THAT(p.feature->Handle(done, &replies).message(), HasSubstr("waits for gradients"));
  // Malformed bytes and non-finite activations.
  EXPECT_THAT(DecodeSplitMessage("FMSPxx").status().message(), HasSubstr("shorter than the 48-byte header"));
  SplitMessage nan = replies[0];
  nan.values[3] = std::nanf("");
  auto bytes = EncodeSplitMessage(nan);
  ASSERT_TRUE(bytes.ok());
  EXPECT_THAT(DecodeSplitMessage(*bytes).status().message(), HasSubstr("non-finite value at row 0, column 3"));
  auto good = EncodeSplitMessage(replies[0]);
  ASSERT_TRUE(good.ok());
  EXPECT_THAT(DecodeSplitMessage(*good + "x").status().message(), HasSubstr("expected"));
  SplitMessageLimits tight;
  tight.max_values = 4;
  EXPECT_THAT(DecodeSplitMessage(*good, tight).status().message(), HasSubstr("over the limit of 4"));
}

TEST_F(SplitJobTest, ThreePartiesTrainOnTheRowsAllThreeHold) {
  const auto a = Holds(all_.size(), 0.9, 21), b = Holds(all_.size(), 0.9, 22), c = Holds(all_.size(), 0.9, 23);
  SplitPartOptions po;
  po.lr = 0.05f;
  po.momentum = 0.9f;
  SplitPartOptions top_o = po;
  top_o.input_gradients = true;
  LabelJob label;
  label.ids = IdsOf(a);
  label.data = Columns(all_, 0, 10, a);
  label.bottom = Part(10, 8, 4, 1, po);
  label.top = Part(4 + 4 + 4, 0, 2, 2, top_o);
  label.feature_ranks = {1, 2};
  FeatureJob f1, f2;
  f1.ids = IdsOf(b);
  f1.data = Columns(all_, 10, 20, b);
  f1.bottom = Part(10, 8, 4, 3, po);
  f2.ids = IdsOf(c);
  f2.data = Columns(all_, 20, 30, c);
  f2.bottom = Part(10, 8, 4, 4, po);
  SplitJobOptions o;
  o.epochs = 8;
  o.batch = 64;
  o.microbatches = 3;
  collective::InProcessHub hub(3);
  Result<SplitJobReport> r1 = Status::Internal(""), r2 = Status::Internal("");
  std::thread t1([&] { r1 = RunFeatureJob(*hub.endpoint(1), std::move(f1), o); });
  std::thread t2([&] { r2 = RunFeatureJob(*hub.endpoint(2), std::move(f2), o); });
  auto r0 = RunLabelJob(*hub.endpoint(0), std::move(label), o);
  t1.join();
  t2.join();
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  ASSERT_TRUE(r1.ok() && r2.ok()) << r1.status().ToString() << r2.status().ToString();
  size_t all3 = 0;
  for (uint32_t r : a) all3 += std::binary_search(b.begin(), b.end(), r) && std::binary_search(c.begin(), c.end(), r);
  EXPECT_EQ(r0->aligned_rows, all3);
  EXPECT_EQ(r1->aligned_rows, all3);
  EXPECT_EQ(r2->aligned_rows, all3);
  EXPECT_EQ(r1->steps, r0->steps);
  EXPECT_GE(r0->test_metrics.at("accuracy"), 0.9);
}

// A label party with columns 0-9 of `rows` and a feature party with columns 10-19, small
// mlp bottoms (4 wide each) and a logreg top over their concatenation.
std::pair<LabelJob, FeatureJob> SmallJobs(const Dataset& all, const std::vector<uint32_t>& rows) {
  SplitPartOptions po;
  SplitPartOptions top_o = po;
  top_o.input_gradients = true;
  LabelJob label;
  label.ids = IdsOf(rows);
  label.data = Columns(all, 0, 10, rows);
  label.bottom = Part(10, 8, 4, 1, po);
  label.top = Part(8, 0, 2, 2, top_o);
  label.feature_ranks = {1};
  FeatureJob f;
  f.ids = IdsOf(rows);
  f.data = Columns(all, 10, 20, rows);
  f.bottom = Part(10, 8, 4, 3, po);
  return {std::move(label), std::move(f)};
}

// A feature party whose messages are not signed by the key enrolled for it (an impostor
// under its name, or no signature at all) fails the job at the label party, naming it; the
// feature party is told why.
TEST_F(SplitJobTest, AMessageNotSignedByItsSendersEnrolledKeyFailsTheJob) {
  std::vector<uint32_t> rows;
  for (uint32_t r = 0; r < 120; ++r) rows.push_back(r);
  Identity hospital = Identity::Generate("hospital").value(), lab = Identity::Generate("lab").value(),
           impostor = Identity::Generate("lab").value();
  for (bool unsigned_lab : {false, true}) {
    auto [label, f] = SmallJobs(all_, rows);
    SplitJobOptions lo;
    lo.batch = 16;
    lo.timeout_ms = 5000;
    SplitJobOptions fo = lo;
    lo.members = {hospital.public_identity(), lab.public_identity()};
    lo.signer = &hospital;
    if (!unsigned_lab) {
      fo.members = {hospital.public_identity(), impostor.public_identity()};
      fo.signer = &impostor;
    }
    auto [lr, fr] = RunBoth(std::move(label), std::move(f), lo, fo);
    ASSERT_FALSE(lr.ok());
    EXPECT_EQ(lr.status().code(), StatusCode::kPermissionDenied);
    EXPECT_THAT(lr.status().message(), HasSubstr(unsigned_lab ? "rank 1: split message from lab is unsigned"
                                                              : "rank 1: split message from lab has a bad signature"));
    ASSERT_FALSE(fr.ok());
    EXPECT_THAT(fr.status().message(), HasSubstr("stopped"));
  }
  // Keys for signing must cover the label party and include the signer.
  SplitJobOptions o;
  o.signer = &hospital;
  o.members = {lab.public_identity()};
  collective::InProcessHub hub(2);
  LabelJob empty;
  EXPECT_THAT(RunLabelJob(*hub.endpoint(0), std::move(empty), o).status().message(),
              HasSubstr("the signer hospital (its public keys) is not the member at rank 0"));
}

// A label party with combine sum over 6 rows: its own bottom 10 -> 8 -> 4, a logreg top
// taking `top_in`, feature parties `peers`.
Result<std::unique_ptr<LabelParty>> SummedLabel(const Dataset& all, int top_in, std::vector<int> peers) {
  SplitPartOptions po;
  SplitPartOptions top_o = po;
  top_o.input_gradients = true;
  LabelPartyOptions lo;
  lo.combine = CutCombine::kSum;
  return LabelParty::Create(Part(10, 8, 4, 1, po), Part(top_in, 0, 2, 2, top_o), Columns(all, 0, 10, {0, 1, 2, 3, 4, 5}),
                            std::move(peers), lo);
}

// combine sum adds bottom outputs of one width: a top of another width, or a feature
// party's bottom of another width, is refused naming both.
TEST_F(SplitJobTest, SummedCutNeedsBottomsOfTheTopsWidth) {
  auto wrong_top = SummedLabel(all_, 6, {1});
  ASSERT_FALSE(wrong_top.ok());
  EXPECT_THAT(wrong_top.status().message(), HasSubstr("the top model takes 6 inputs, the own bottom model gives 4"));
  auto label = SummedLabel(all_, 4, {1});
  ASSERT_TRUE(label.ok()) << label.status().ToString();
  auto begun = (*label)->Begin(std::vector<uint64_t>{0, 1}, 1, true);
  ASSERT_TRUE(begun.ok());
  SplitMessage a;
  a.type = SplitMessageType::kActivations;
  a.training = true;
  a.rows = 2;
  a.cols = 6;
  a.values.assign(12, 0.5f);
  std::vector<Outgoing> out;
  EXPECT_THAT((*label)->OnActivations(1, a, &out).message(),
              HasSubstr("combine sum adds bottom outputs of one width: the top model takes 4 inputs, rank 1's bottom "
                        "model gives 6"));
}

// combine sum: every feature party gets the whole gradient of the top's input, the same for
// all (and the one the label party's own bottom learns from).
TEST_F(SplitJobTest, SummedCutSendsEveryPartyTheWholeInputGradient) {
  auto label = SummedLabel(all_, 4, {1, 2});
  ASSERT_TRUE(label.ok()) << label.status().ToString();
  ASSERT_TRUE((*label)->Begin(std::vector<uint64_t>{0, 1, 2}, 1, true).ok());
  std::vector<Outgoing> out;
  for (int rank : {1, 2}) {
    SplitMessage a;
    a.type = SplitMessageType::kActivations;
    a.training = true;
    a.rows = 3;
    a.cols = 4;
    for (int i = 0; i < 12; ++i) a.values.push_back(0.1f * static_cast<float>(i - rank * 3));
    ASSERT_TRUE((*label)->OnActivations(rank, a, &out).ok());
  }
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first, 1);
  EXPECT_EQ(out[1].first, 2);
  ASSERT_EQ(out[0].second.values.size(), 12u);
  EXPECT_EQ(out[0].second.values, out[1].second.values);
  const float* gin = (*label)->top().input_grad();
  double norm = 0;
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(out[0].second.values[static_cast<size_t>(i)], gin[i]) << i;
    norm += std::fabs(gin[i]);
  }
  EXPECT_GT(norm, 0.0);
}

TEST_F(SplitJobTest, ADeadFeaturePartyStopsTheJobWithAReasonNotAHang) {
  std::vector<uint32_t> rows;
  for (uint32_t r = 0; r < 300; ++r) rows.push_back(r);
  auto [label, f] = SmallJobs(all_, rows);
  SplitJobOptions o;
  o.epochs = 100000;  // until the feature party is gone
  o.batch = 8;
  o.timeout_ms = 1500;
  std::atomic<bool> stop{false};
  SplitJobOptions fo = o;
  fo.stop = &stop;
  collective::InProcessHub hub(2);
  Result<SplitJobReport> fr = Status::Internal("");
  std::thread t([&] { fr = RunFeatureJob(*hub.endpoint(1), std::move(f), fo); });
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    hub.Disconnect(1);  // the feature party's machine is gone
    stop = true;
  });
  auto lr = RunLabelJob(*hub.endpoint(0), std::move(label), o);
  t.join();
  killer.join();
  ASSERT_FALSE(lr.ok());
  EXPECT_EQ(lr.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(lr.status().message(), HasSubstr("heard nothing for 1500 ms while waiting for activations"));
}

}  // namespace
}  // namespace fedmesh::vertical
