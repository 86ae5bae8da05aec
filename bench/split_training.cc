// Split training benchmarks (issue 22), two parties in one process (a thread each, one core
// each) over the in-process transport:
//   --mode accuracy   Fashion-MNIST cut into left and right image halves (14 of 28 columns
//                     each): the label party holds the left half and the label, the feature
//                     party the right half. Reports the split model's test accuracy beside
//                     an uncut mlp trained centrally on the same rows (same held-out rows).
//                     --compression none|fp16|bf16|int8 and --combine concat|sum choose the
//                     cut's wire and how the top joins the bottoms; the bytes are reported.
//   --sign            every message signed and verified (vertical/split_signature.h), as
//                     fedmesh-node does; without it, unsigned (CurveZMQ only).
//   --mode pipeline   steps over a link with --delay-ms one-way latency added to every
//                     message (collective/delayed_transport.h: this kernel has no sch_netem),
//                     timed with 1 micro-batch per step, with --microbatches, and with
//                     those and staleness 1; reports the step-time ratios and the label
//                     party's idle fraction.
//   --party label|feature --peers LABEL_HOST:PORT,FEATURE_HOST:PORT
//                     the pipeline mode with one party in this process and the other in
//                     another (e.g. another network namespace, bench/netns/split_pipeline.sh),
//                     over CurveZMQ or --security aes-256-gcm | none (keys from fixed seeds:
//                     a benchmark convenience); the link's delay is the network's, no
//                     wrapper. Setting k uses PORT + k.
//   bench/split_training.sh
#include <chrono>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>

#include "collective/delayed_transport.h"
#include "collective/in_process_hub.h"
#include "collective/zmq_ring_transport.h"
#include "core/sha256.h"
#include "crypto/identity.h"
#include "core/data/data_source.h"
#include "core/data/fashion_mnist.h"
#include "core/env.h"
#include "core/model.h"
#include "core/trainer.h"
#include "vertical/split_job.h"

namespace {

using namespace fedmesh;

// Columns [from, to) of every 28-pixel image row: a vertical strip of the image.
Dataset Strip(const Dataset& d, int from, int to) {
  Dataset out;
  out.sample_shape = {28 * (to - from)};
  out.num_classes = d.num_classes;
  out.labels = d.labels;
  out.features.reserve(d.size() * 28 * static_cast<size_t>(to - from));
  for (size_t i = 0; i < d.size(); ++i)
    for (int y = 0; y < 28; ++y)
      for (int x = from; x < to; ++x) out.features.push_back(d.sample(i)[y * 28 + x]);
  return out;
}

struct Setup {
  int hidden = 256, label_hidden = 256, cut = 64, top_hidden = 64;
  float lr = 0.05f, momentum = 0.9f;
  vertical::CutWire wire = vertical::CutWire::kFloat32;
  vertical::CutCombine combine = vertical::CutCombine::kConcat;
  bool sign = false;  // every message signed, as fedmesh-node does
  collective::RingSecurity security = collective::RingSecurity::kCurve;  // --party: the link's
};

std::unique_ptr<vertical::SplitPart> Part(int in, int hidden, int out, uint64_t seed, const Setup& s, bool top) {
  ModelSpec spec;
  spec.name = "mlp";
  spec.input_shape = {in};
  spec.num_classes = out;
  spec.hidden = {hidden};
  vertical::SplitPartOptions o;
  o.lr = s.lr;
  o.momentum = s.momentum;
  o.input_gradients = top;
  return std::move(vertical::SplitPart::FromBuiltin(spec, seed, o)).value();
}

std::vector<std::string> Ids(const Dataset& all) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < all.size(); ++i) ids.push_back("img-" + std::to_string(i));
  return ids;
}

vertical::LabelJob MakeLabelJob(const Dataset& all, const Setup& s) {
  vertical::LabelJob label;
  label.ids = Ids(all);
  label.data = Strip(all, 0, 14);
  label.bottom = Part(392, s.label_hidden, s.cut, 1, s, false);
  label.top = Part(s.combine == vertical::CutCombine::kSum ? s.cut : 2 * s.cut, s.top_hidden, 10, 2, s, true);
  label.feature_ranks = {1};
  label.party.wire = s.wire;
  label.party.combine = s.combine;
  return label;
}

vertical::FeatureJob MakeFeatureJob(const Dataset& all, const Setup& s) {
  vertical::FeatureJob feature;
  feature.ids = Ids(all);
  feature.data = Strip(all, 14, 28);
  feature.bottom = Part(392, s.hidden, s.cut, 3, s, false);
  feature.party.wire = s.wire;
  return feature;
}

// One party of a job over CurveZMQ to the other's process: rank 0 the label party at
// peers[0], rank 1 the feature party at peers[1], both on port + `setting`.
Result<vertical::SplitJobReport> RunParty(const Dataset& all, const Setup& s, const vertical::SplitJobOptions& o,
                                          bool label, const std::vector<std::string>& peers, int setting) {
  std::vector<Identity> ids;
  std::vector<collective::RingMember> members;
  for (int r = 0; r < 2; ++r) {
    const Sha256Digest curve = Sha256::Hash("fedmesh-bench-split-curve-" + std::to_string(r));
    const Sha256Digest sign = Sha256::Hash("fedmesh-bench-split-sign-" + std::to_string(r));
    FM_ASSIGN_OR_RETURN(Identity id, Identity::FromSecrets(r == 0 ? "label" : "feature", curve, sign));
    ids.push_back(std::move(id));
    const std::string& hp = peers[static_cast<size_t>(r)];
    const int port = std::stoi(hp.substr(hp.rfind(':') + 1)) + setting;
    members.push_back({"tcp://" + hp.substr(0, hp.rfind(':')) + ":" + std::to_string(port), ids.back().public_identity()});
  }
  const int me = label ? 0 : 1;
  const std::string& mine = members[static_cast<size_t>(me)].endpoint;
  collective::ZmqRingTransportOptions to;
  to.max_chunk_bytes = uint64_t{1} << 30;
  to.security = s.security;
  FM_ASSIGN_OR_RETURN(auto t, collective::ZmqRingTransport::Create(ids[static_cast<size_t>(me)], members,
                                                                   "tcp://0.0.0.0:" + mine.substr(mine.rfind(':') + 1), to));
  vertical::SplitJobOptions so = o;
  if (s.sign) {
    so.signer = &ids[static_cast<size_t>(me)];
    so.members = {ids[0].public_identity(), ids[1].public_identity()};
  }
  if (label) return vertical::RunLabelJob(*t, MakeLabelJob(all, s), so);
  return vertical::RunFeatureJob(*t, MakeFeatureJob(all, s), so);
}

// Runs one job; `delay_us` > 0 wraps both endpoints in a DelayedTransport.
Result<vertical::SplitJobReport> RunJob(const Dataset& all, const Setup& s, const vertical::SplitJobOptions& o,
                                        int delay_us) {
  vertical::LabelJob label = MakeLabelJob(all, s);
  vertical::FeatureJob feature = MakeFeatureJob(all, s);
  collective::InProcessHub hub(2);
  std::unique_ptr<collective::CollectiveTransport> d0, d1;
  collective::CollectiveTransport* t0 = hub.endpoint(0);
  collective::CollectiveTransport* t1 = hub.endpoint(1);
  if (delay_us > 0) {
    d0 = std::make_unique<collective::DelayedTransport>(t0, std::chrono::microseconds(delay_us));
    d1 = std::make_unique<collective::DelayedTransport>(t1, std::chrono::microseconds(delay_us));
    t0 = d0.get();
    t1 = d1.get();
  }
  vertical::SplitJobOptions lo = o, fo = o;
  Identity lk = std::move(Identity::Generate("label")).value(), fk = std::move(Identity::Generate("feature")).value();
  if (s.sign) {
    lo.members = fo.members = {lk.public_identity(), fk.public_identity()};
    lo.signer = &lk;
    fo.signer = &fk;
  }
  Result<vertical::SplitJobReport> fr = Status::Internal("");
  std::thread t([&] { fr = vertical::RunFeatureJob(*t1, std::move(feature), fo); });
  auto lr = vertical::RunLabelJob(*t0, std::move(label), lo);
  t.join();
  if (!fr.ok()) return fr.status();
  return lr;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedmesh split-training benchmarks on Fashion-MNIST halves"};
  std::string mode = "pipeline";
  int epochs = 5, batch = 64, microbatches = 4, steps = 20, rows = 70000;
  double delay_ms = 20;
  Setup s;
  app.add_option("--mode", mode, "accuracy | pipeline");
  app.add_option("--epochs", epochs, "accuracy: epochs (default 5)");
  app.add_option("--batch", batch, "rows per step (default 64)");
  app.add_option("--microbatches", microbatches, "micro-batches per step (default 4)");
  uint32_t staleness = 0;
  app.add_option("--staleness", staleness, "accuracy: 0 (exact steps, default) or 1");
  std::string compression = "none", combine = "concat";
  app.add_option("--compression", compression, "activations and gradients: none (default), fp16, bf16, int8");
  app.add_option("--combine", combine, "the top's input: concat (default) or sum");
  app.add_flag("--sign", s.sign, "sign every message and verify it (as fedmesh-node does)");
  app.add_option("--steps", steps, "pipeline: timed steps per setting (default 20)");
  app.add_option("--delay-ms", delay_ms, "pipeline: one-way latency per message (default 20)");
  app.add_option("--rows", rows, "rows of Fashion-MNIST used (train then test images; default all 70000)");
  app.add_option("--hidden", s.hidden, "the feature party's bottom hidden width (default 256)");
  app.add_option("--label-hidden", s.label_hidden, "the label party's bottom hidden width (default 256)");
  std::string party;
  std::vector<std::string> peers;
  app.add_option("--party", party, "pipeline over CurveZMQ: this process's party, label or feature");
  app.add_option("--peers", peers, "with --party: LABEL_HOST:PORT,FEATURE_HOST:PORT")->delimiter(',');
  std::string security = "curve";
  app.add_option("--security", security, "with --party: curve (default), aes-256-gcm or none")
      ->check(CLI::IsMember({"curve", "aes-256-gcm", "none"}));
  CLI11_PARSE(app, argc, argv);
  s.security = collective::ParseRingSecurity(security).value();
  auto wire = vertical::CutWireOfCompression(compression);
  auto comb = vertical::CutCombineOf(combine);
  if (!wire.ok() || !comb.ok()) {
    std::fprintf(stderr, "%s\n", (wire.ok() ? comb.status() : wire.status()).ToString().c_str());
    return 2;
  }
  s.wire = *wire;
  s.combine = *comb;
  if (!party.empty() && ((party != "label" && party != "feature") || peers.size() != 2 || mode != "pipeline")) {
    std::fprintf(stderr, "--party label|feature needs --peers LABEL_HOST:PORT,FEATURE_HOST:PORT and --mode pipeline\n");
    return 2;
  }
  auto train = LoadFashionMnist(DataSplit::kTrain);
  auto test = LoadFashionMnist(DataSplit::kTest);
  if (!train.ok() || !test.ok()) {
    std::fprintf(stderr, "Fashion-MNIST: %s\n", train.status().ToString().c_str());
    return 1;
  }
  Dataset all = *train;
  all.features.insert(all.features.end(), test->features.begin(), test->features.end());
  all.labels.insert(all.labels.end(), test->labels.begin(), test->labels.end());
  if (static_cast<size_t>(rows) < all.size()) {
    all.features.resize(static_cast<size_t>(rows) * 784);
    all.labels.resize(static_cast<size_t>(rows));
  }
  vertical::SplitJobOptions o;
  o.batch = batch;
  o.test_fraction = 1.0 / 7;
  o.seed = 1;
  o.timeout_ms = 600000;
  if (mode == "accuracy") {
    o.epochs = epochs;
    o.microbatches = static_cast<uint32_t>(microbatches);
    o.staleness = staleness;
    o.log = [](const std::string& l) { std::printf("  %s\n", l.c_str()); };
    auto r = RunJob(all, s, o, 0);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
    // Central: an uncut mlp over all 784 pixels (hidden: both bottoms' widths), on the same rows.
    Dataset joined = all.Subset(r->aligned);
    std::vector<uint32_t> test_rows(r->test.begin(), r->test.end()), train_rows;
    for (uint32_t i = 0; i < joined.size(); ++i)
      if (!std::binary_search(test_rows.begin(), test_rows.end(), i)) train_rows.push_back(i);
    joined.sample_shape = {784};
    Dataset tr = joined.Subset(train_rows), te = joined.Subset(test_rows);
    auto backend = MakeCpuBackend(1);
    ModelSpec spec;
    spec.input_shape = {784};
    spec.num_classes = 10;
    spec.hidden = {s.hidden + s.label_hidden, s.top_hidden};
    auto model = std::move(BuildModel(spec, backend.get())).value();
    model->InitParams(1);
    TrainerOptions to;
    to.batch_size = batch;
    to.sgd.lr = s.lr;
    to.sgd.momentum = s.momentum;
    SystemEnv env(1);
    Trainer trainer(model.get(), to, &env);
    for (int e = 0; e < epochs; ++e) (void)trainer.TrainEpoch(tr);
    auto c = trainer.Evaluate(te);
    std::printf(
        "accuracy: split (left | right halves, %d epochs, batch %d, %d micro-batches, staleness %u, %s, %s) %.4f on %llu "
        "held-out rows; central uncut mlp 784-%d-%d-10 %.4f on the same rows; difference %+.2f points; label party sent "
        "%.1f MB, received %.1f MB\n",
        epochs, batch, microbatches, staleness, vertical::CutWireName(s.wire), vertical::CutCombineName(s.combine),
        r->test_metrics.at("accuracy"), static_cast<unsigned long long>(r->test_rows), s.hidden + s.label_hidden,
        s.top_hidden, c->accuracy, 100 * (r->test_metrics.at("accuracy") - c->accuracy), r->bytes_sent / 1e6,
        r->bytes_received / 1e6);
    return 0;
  }
  o.epochs = 1;
  o.max_steps = static_cast<uint64_t>(steps);
  o.psi.batch = 65536;
  // Sequential (no pipelining: 1 micro-batch, the label party's own work in line), then
  // 1 micro-batch with the label party's own work overlapped, then --microbatches.
  // Last, --microbatches with staleness 1 (the next step's forwards before this step's
  // gradients are back).
  struct Setting {
    uint32_t micro;
    bool overlap;
    uint32_t staleness;
    const char* name;
  };
  const Setting settings[4] = {{1, false, 0, "sequential (no pipelining)"},
                               {1, true, 0, "1 micro-batch, own work overlapped"},
                               {static_cast<uint32_t>(microbatches), true, 0, "micro-batches, own work overlapped"},
                               {static_cast<uint32_t>(microbatches), true, 1, "micro-batches, staleness 1"}};
  double ms[4];
  for (int k = 0; k < 4; ++k) {
    o.microbatches = settings[k].micro;
    o.overlap = settings[k].overlap;
    o.staleness = settings[k].staleness;
    auto r = party.empty() ? RunJob(all, s, o, static_cast<int>(delay_ms * 1000))
                           : RunParty(all, s, o, party == "label", peers, k);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
    if (party == "feature") continue;  // the label party reports
    ms[k] = r->step_ms;
    const std::string link = party.empty() ? std::to_string(static_cast<int>(delay_ms)) + " ms one-way delay (wrapper)"
                                           : "the network's link";
    std::printf("pipeline: %-36s %u micro-batch(es) per step of %d rows, %s: %.1f ms per step, "
                "label party idle %.2f\n",
                settings[k].name, settings[k].micro, batch, link.c_str(), ms[k], r->idle_fraction);
  }
  if (party == "feature") return 0;
  std::printf("pipeline: %d micro-batches take %.2fx the sequential step time (%.2fx that of 1 micro-batch with overlap)\n",
              microbatches, ms[2] / ms[0], ms[2] / ms[1]);
  std::printf("pipeline: %d micro-batches with staleness 1 take %.2fx the sequential step time\n", microbatches,
              ms[3] / ms[0]);
  return 0;
}
