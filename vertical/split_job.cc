#include "vertical/split_job.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>

#include "core/data/data_source.h"
#include "core/json_line.h"
#include "core/rng.h"
#include "vertical/psi_exchange.h"

namespace fedmesh::vertical {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Split messages over the transport, with byte counts and the time spent waiting.
class Link {
 public:
  Link(collective::CollectiveTransport& t, const SplitJobOptions& o, SplitJobReport& r) : t_(t), o_(o), r_(r) {}

  Status Send(int to, const SplitMessage& m) {
    FM_ASSIGN_OR_RETURN(std::string bytes, EncodeSplitMessage(m));
    r_.bytes_sent += bytes.size();
    collective::Chunk c;
    c.kind = collective::OpKind::kMessage;
    c.op = seq_++;
    c.bytes = collective::Payload(std::move(bytes));
    return t_.Send(to, std::move(c));
  }
  Status SendAll(std::vector<Outgoing>& out) {
    for (auto& [to, m] : out) FM_RETURN_IF_ERROR(Send(to, m));
    out.clear();
    return Status::OK();
  }
  // The next split message and its sender. An error message from the sender is Unavailable.
  Result<std::pair<int, SplitMessage>> Receive(const std::string& waiting_for) {
    FM_ASSIGN_OR_RETURN(auto got, Poll(o_.timeout_ms));
    if (!got) {
      return Status::DeadlineExceeded("split: heard nothing for " + std::to_string(o_.timeout_ms) + " ms while waiting for " +
                                      waiting_for);
    }
    return std::move(*got);
  }
  // The same, waiting at most timeout_ms (0: only what is there); nullopt when nothing came.
  Result<std::optional<std::pair<int, SplitMessage>>> Poll(int timeout_ms) {
    const auto t0 = Clock::now();
    FM_ASSIGN_OR_RETURN(auto got, t_.Receive(timeout_ms));
    waited_s_ += Since(t0);
    if (!got) return std::optional<std::pair<int, SplitMessage>>();
    auto& [from, chunk] = *got;
    r_.bytes_received += chunk.bytes.size();
    const std::string who = "rank " + std::to_string(from) + ": ";
    if (chunk.kind != collective::OpKind::kMessage) return Status::Corruption(who + "a ring chunk during split training");
    auto m = DecodeSplitMessage(chunk.bytes.view());
    if (!m.ok()) return Status::Corruption(who + m.status().message());
    if (m->type == SplitMessageType::kError) return Status::Unavailable(who + "stopped: " + m->text);
    return std::optional<std::pair<int, SplitMessage>>(std::make_pair(from, std::move(*m)));
  }
  // Best effort: tell `ranks` this side stopped, and why.
  void Abort(const std::vector<int>& ranks, const Status& why) {
    SplitMessage e;
    e.type = SplitMessageType::kError;
    e.text = why.message();
    for (int r : ranks) (void)Send(r, e);
  }
  double waited_s() const { return waited_s_; }

 private:
  collective::CollectiveTransport& t_;
  const SplitJobOptions& o_;
  SplitJobReport& r_;
  uint64_t seq_ = 0;
  double waited_s_ = 0.0;
};

void Log(const SplitJobOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

Status Stopped(const SplitJobOptions& o) {
  if (o.stop != nullptr && o.stop->load()) return Status::Unavailable("stopped by a signal");
  return Status::OK();
}

// Runs one pass (a step or an evaluation) to its end.
Status RunPass(LabelParty& party, Link& link, std::span<const uint64_t> rows, uint32_t micro, bool training,
               bool overlap) {
  FM_ASSIGN_OR_RETURN(std::vector<Outgoing> out, party.Begin(rows, micro, training));
  FM_RETURN_IF_ERROR(link.SendAll(out));
  while (!party.pass_done()) {
    // What has arrived first (the critical path), then own-bottom work, then wait.
    FM_ASSIGN_OR_RETURN(auto got, link.Poll(0));
    if (!got && overlap) {
      FM_ASSIGN_OR_RETURN(bool worked, party.DoIdleWork());
      if (worked) continue;
    }
    if (!got) {
      FM_ASSIGN_OR_RETURN(got, link.Receive("activations"));
    }
    FM_RETURN_IF_ERROR(party.OnActivations(got->first, got->second, &out));
    FM_RETURN_IF_ERROR(link.SendAll(out));
  }
  if (!overlap) FM_RETURN_IF_ERROR(party.Flush());  // the whole step before the next one starts
  return Status::OK();
}

Result<SplitJobReport> LabelSide(collective::CollectiveTransport& transport, LabelJob& job, const SplitJobOptions& o,
                                 Link& link, SplitJobReport& report, std::unique_ptr<LabelParty>* party_out) {
  const auto start = Clock::now();
  report.my_ids = job.ids.size();
  // 1. PSI with every feature party at once.
  std::vector<std::unique_ptr<psi::PsiParty>> parties;
  std::vector<psi::PsiParty*> raw;
  for (size_t i = 0; i < job.feature_ranks.size(); ++i) {
    FM_ASSIGN_OR_RETURN(auto p, psi::PsiParty::Create(job.ids, o.psi));
    raw.push_back(p.get());
    parties.push_back(std::move(p));
  }
  PsiExchangeOptions xo;
  xo.timeout_ms = o.timeout_ms;
  PsiExchangeStats ps;
  FM_ASSIGN_OR_RETURN(std::vector<psi::PsiResult> psi, RunPsiWithEach(transport, job.feature_ranks, raw, xo, &ps));
  report.bytes_sent += ps.bytes_sent;
  report.bytes_received += ps.bytes_received;
  // 2. The rows every party holds, in the order of the first intersection; each feature
  //    party is told their positions in its own intersection.
  std::vector<std::vector<int64_t>> pos(psi.size(), std::vector<int64_t>(job.ids.size(), -1));
  for (size_t k = 0; k < psi.size(); ++k)
    for (size_t j = 0; j < psi[k].rows.size(); ++j) pos[k][psi[k].rows[j]] = static_cast<int64_t>(j);
  std::vector<uint32_t> rows;
  for (uint64_t r : psi[0].rows) {
    bool everywhere = true;
    for (size_t k = 1; k < psi.size(); ++k) everywhere = everywhere && pos[k][r] >= 0;
    if (everywhere) rows.push_back(static_cast<uint32_t>(r));
  }
  if (rows.size() < 2) {
    return Status::FailedPrecondition("the parties share " + std::to_string(rows.size()) +
                                      " record ids; split training needs rows that every party holds");
  }
  for (size_t k = 0; k < psi.size(); ++k) {
    SplitMessage a;
    a.type = SplitMessageType::kAlign;
    for (uint32_t r : rows) a.indices.push_back(static_cast<uint64_t>(pos[k][r]));
    FM_RETURN_IF_ERROR(link.Send(job.feature_ranks[k], a));
  }
  report.aligned_rows = rows.size();
  Dataset data = job.data.Subset(rows);
  const HeldOutRows split = SplitHeldOut(data.labels, o.test_fraction, o.seed);
  std::vector<uint64_t> train(split.train.begin(), split.train.end()), test(split.test.begin(), split.test.end());
  report.train_rows = train.size();
  report.test_rows = test.size();
  report.aligned = rows;
  report.test = test;
  Log(o, "psi: " + std::to_string(job.ids.size()) + " ids here; " + std::to_string(rows.size()) +
             " rows shared by every party: " + std::to_string(train.size()) + " to train, " +
             std::to_string(test.size()) + " held out");
  FM_ASSIGN_OR_RETURN(std::unique_ptr<LabelParty> party,
                      LabelParty::Create(std::move(job.bottom), std::move(job.top), std::move(data), job.feature_ranks,
                                         job.party));
  // 3. Epochs of steps, an evaluation after each.
  Rng rng(o.seed ^ 0x5b1d);
  double train_s = 0.0, waited_train_s = 0.0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    for (size_t i = train.size(); i > 1; --i) std::swap(train[i - 1], train[rng.UniformInt(i)]);
    double loss_sum = 0.0;
    const auto t_epoch = Clock::now();
    const double waited0 = link.waited_s();
    for (size_t b = 0; b < train.size(); b += static_cast<size_t>(o.batch)) {
      FM_RETURN_IF_ERROR(Stopped(o));
      if (o.max_steps > 0 && party->steps_completed() >= o.max_steps) break;
      const size_t e = std::min(train.size(), b + static_cast<size_t>(o.batch));
      FM_RETURN_IF_ERROR(
          RunPass(*party, link, std::span<const uint64_t>(train).subspan(b, e - b), o.microbatches, true, o.overlap));
      loss_sum += party->pass_loss() * static_cast<double>(e - b);
    }
    train_s += Since(t_epoch);
    waited_train_s += link.waited_s() - waited0;
    std::map<std::string, double> metrics;
    double test_loss = 0.0;
    if (!test.empty()) {
      // One pass over every test row keeps the metrics exact (AUC is not a mean of batches).
      FM_RETURN_IF_ERROR(RunPass(*party, link, test, o.microbatches, false, o.overlap));
      test_loss = party->pass_loss();
      metrics = party->pass_metrics();
    }
    report.steps = party->steps_completed();
    report.idle_fraction = train_s > 0 ? waited_train_s / train_s : 0.0;
    report.step_ms = report.steps > 0 ? 1000.0 * train_s / static_cast<double>(report.steps) : 0.0;
    report.test_metrics = metrics;
    report.test_loss = test_loss;
    JsonLine line;
    line.Add("epoch", epoch).Add("steps", static_cast<int64_t>(report.steps));
    line.Add("train_loss", loss_sum / static_cast<double>(train.size())).Add("test_loss", test_loss);
    for (const auto& [k, v] : metrics) line.Add("test_" + k, v);
    line.Add("rows", static_cast<int64_t>(report.aligned_rows)).Add("microbatches", static_cast<int64_t>(o.microbatches));
    line.Add("idle_fraction", report.idle_fraction).Add("step_ms", report.step_ms);
    line.Add("bytes_sent", static_cast<int64_t>(report.bytes_sent)).Add("bytes_received", static_cast<int64_t>(report.bytes_received));
    if (o.metrics) o.metrics(line.str());
    std::string acc = metrics.count("accuracy") ? ", test accuracy " + std::to_string(metrics["accuracy"]) : "";
    Log(o, "epoch " + std::to_string(epoch) + ": train loss " + std::to_string(loss_sum / static_cast<double>(train.size())) +
               acc + ", idle " + std::to_string(report.idle_fraction));
  }
  FM_RETURN_IF_ERROR(party->Flush());
  SplitMessage done;
  done.type = SplitMessageType::kDone;
  done.step = party->steps_completed();
  for (int r : job.feature_ranks) FM_RETURN_IF_ERROR(link.Send(r, done));
  report.seconds = Since(start);
  if (party_out != nullptr) *party_out = std::move(party);
  return report;
}

}  // namespace

Result<SplitJobReport> RunLabelJob(collective::CollectiveTransport& transport, LabelJob job,
                                   const SplitJobOptions& options, std::unique_ptr<LabelParty>* party_out) {
  if (options.epochs < 1 || options.batch < 1 || options.microbatches < 1 || options.test_fraction < 0 ||
      options.test_fraction >= 1) {
    return Status::InvalidArgument("split job: epochs, batch and microbatches must be >= 1, test_fraction in [0, 1)");
  }
  SplitJobReport report;
  Link link(transport, options, report);
  const std::vector<int> ranks = job.feature_ranks;
  auto r = LabelSide(transport, job, options, link, report, party_out);
  if (!r.ok()) link.Abort(ranks, r.status());  // the others would otherwise wait out their timeout
  return r;
}

Result<SplitJobReport> RunFeatureJob(collective::CollectiveTransport& transport, FeatureJob job,
                                     const SplitJobOptions& options, std::unique_ptr<FeatureParty>* party_out) {
  SplitJobReport report;
  Link link(transport, options, report);
  const auto start = Clock::now();
  report.my_ids = job.ids.size();
  auto side = [&]() -> Result<std::unique_ptr<FeatureParty>> {
    FM_ASSIGN_OR_RETURN(auto p, psi::PsiParty::Create(job.ids, options.psi));
    PsiExchangeOptions xo;
    xo.timeout_ms = options.timeout_ms;
    PsiExchangeStats ps;
    FM_ASSIGN_OR_RETURN(psi::PsiResult psi, RunPsi(transport, job.label_rank, *p, xo, &ps));
    report.bytes_sent += ps.bytes_sent;
    report.bytes_received += ps.bytes_received;
    std::vector<uint32_t> rows(psi.rows.begin(), psi.rows.end());
    FM_ASSIGN_OR_RETURN(std::unique_ptr<FeatureParty> party,
                        FeatureParty::Create(std::move(job.bottom), job.data.Subset(rows), job.party));
    Log(options, "psi: " + std::to_string(job.ids.size()) + " ids here, " + std::to_string(rows.size()) +
                     " shared with the label party");
    std::vector<SplitMessage> out;
    while (!party->done()) {
      FM_RETURN_IF_ERROR(Stopped(options));
      FM_ASSIGN_OR_RETURN(auto got, link.Receive("the label party"));
      if (got.first != job.label_rank) {
        return Status::Corruption("rank " + std::to_string(got.first) + " is not the label party");
      }
      const Status s = party->Handle(got.second, &out);
      if (!s.ok()) return Status(s.code(), "from the label party: " + s.message());
      for (SplitMessage& m : out) FM_RETURN_IF_ERROR(link.Send(job.label_rank, m));
      out.clear();
      if (party->aligned() && report.aligned_rows == 0) report.aligned_rows = party->rows();
    }
    return party;
  };
  auto party = side();
  if (!party.ok()) {
    if (party.status().code() != StatusCode::kUnavailable) link.Abort({job.label_rank}, party.status());
    return party.status();
  }
  report.steps = (*party)->steps_completed();
  report.seconds = Since(start);
  if (party_out != nullptr) *party_out = std::move(*party);
  return report;
}

}  // namespace fedmesh::vertical
