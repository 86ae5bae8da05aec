#include "vertical/split_job.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>

#include "core/data/data_source.h"
#include "core/graph/inference_graph.h"
#include "core/json_line.h"
#include "core/onnx/onnx_writer.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "vertical/psi_exchange.h"
#include "vertical/split_signature.h"

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
    if (o_.signer != nullptr) {
      FM_ASSIGN_OR_RETURN(bytes, SignSplitMessage(*o_.signer, o_.federation, o_.members[static_cast<size_t>(to)].name, std::move(bytes)));
    }
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
    if (!IsSplitMessage(chunk.bytes.view()) && chunk.bytes.view().starts_with("FMPS")) {
      return Status::Corruption(who + "a PSI message: that party started a new job (its store keeps no checkpoint of "
                                      "this one)");
    }
    if (o_.signer != nullptr) {
      if (from < 0 || static_cast<size_t>(from) >= o_.members.size()) return Status::Corruption(who + "not a member");
      Status v = VerifySplitMessage(o_.members[static_cast<size_t>(from)], o_.federation, o_.signer->name(),
                                    chunk.bytes.view());
      if (!v.ok()) return Status::PermissionDenied(who + v.message());
    }
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

// Signing needs a key for every rank this party talks to (`ranks`), and the signer's own
// public identity at its rank `me` (-1: at any rank).
Status CheckSigning(const SplitJobOptions& o, const std::vector<int>& ranks, int me) {
  if (o.signer == nullptr) {
    if (!o.members.empty()) return Status::InvalidArgument("split job: members' keys without a signer");
    return Status::OK();
  }
  for (int r : ranks) {
    if (r < 0 || static_cast<size_t>(r) >= o.members.size()) {
      return Status::InvalidArgument("split job: signing needs every party's public key; rank " + std::to_string(r) +
                                     " has none (" + std::to_string(o.members.size()) + " given)");
    }
  }
  const PublicIdentity& mine = o.signer->public_identity();
  for (size_t r = 0; r < o.members.size(); ++r) {
    if (o.members[r] == mine && (me < 0 || static_cast<int>(r) == me)) return Status::OK();
  }
  return Status::InvalidArgument("split job: the signer " + o.signer->name() + " (its public keys) is not the member at " +
                                 (me < 0 ? std::string("any rank") : "rank " + std::to_string(me)));
}

void Log(const SplitJobOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

Status Stopped(const SplitJobOptions& o) {
  if (o.stop != nullptr && o.stop->load()) return Status::Unavailable("stopped by a signal");
  return Status::OK();
}

// A feature party said hello: it restarted, so the job must go back to a checkpoint.
Status Restarted(const std::pair<int, SplitMessage>& hello) {
  return Status::Unavailable("rank " + std::to_string(hello.first) + " restarted (its newest checkpoint: step " +
                             std::to_string(hello.second.step) + ")");
}

// Takes activations and sends what they produce until `done`: what has arrived first (the
// critical path), then own-bottom work, then wait.
template <typename Done>
Status Pump(LabelParty& party, Link& link, bool overlap, Done done) {
  std::vector<Outgoing> out;
  while (!done()) {
    FM_ASSIGN_OR_RETURN(auto got, link.Poll(0));
    if (!got && overlap) {
      FM_ASSIGN_OR_RETURN(bool worked, party.DoIdleWork());
      if (worked) continue;
    }
    if (!got) {
      FM_ASSIGN_OR_RETURN(got, link.Receive("activations"));
    }
    if (got->second.type == SplitMessageType::kHello) return Restarted(*got);
    FM_RETURN_IF_ERROR(party.OnActivations(got->first, got->second, &out));
    FM_RETURN_IF_ERROR(link.SendAll(out));
  }
  if (!overlap) FM_RETURN_IF_ERROR(party.Flush());  // the whole step before the next one starts
  return Status::OK();
}

Status BeginPass(LabelParty& party, Link& link, std::span<const uint64_t> rows, uint32_t micro, bool training) {
  FM_ASSIGN_OR_RETURN(std::vector<Outgoing> out, party.Begin(rows, micro, training));
  return link.SendAll(out);
}

// Runs one evaluation pass to its end.
Status RunPass(LabelParty& party, Link& link, std::span<const uint64_t> rows, uint32_t micro, bool overlap) {
  FM_RETURN_IF_ERROR(BeginPass(party, link, rows, micro, false));
  return Pump(party, link, overlap, [&] { return party.pass_done(); });
}

// Runs the training step numbered steps_completed() (over `rows`) to its end. `next`: the
// following step's rows, begun before this one waits (staleness 1), or empty. A step begun
// that way by the call before is not begun again.
Status RunStep(LabelParty& party, Link& link, std::span<const uint64_t> rows, std::span<const uint64_t> next,
               uint32_t micro, bool overlap) {
  const uint64_t step = party.steps_completed();
  if (party.passes_in_flight() == 0) FM_RETURN_IF_ERROR(BeginPass(party, link, rows, micro, true));
  if (!next.empty() && party.passes_in_flight() == 1) FM_RETURN_IF_ERROR(BeginPass(party, link, next, micro, true));
  return Pump(party, link, overlap, [&] { return party.steps_completed() > step; });
}

// The digest both ends of a link compute for its alignment: the PSI digest and the
// positions of the job's rows in that intersection.
std::string AlignmentDigest(const std::string& psi_digest, const std::vector<uint32_t>& positions) {
  Sha256 h;
  h.Update(psi_digest);
  for (uint32_t p : positions) {
    const uint8_t b[4] = {static_cast<uint8_t>(p), static_cast<uint8_t>(p >> 8), static_cast<uint8_t>(p >> 16),
                          static_cast<uint8_t>(p >> 24)};
    h.Update(std::span<const uint8_t>(b, 4));
  }
  return Sha256Hex(h.Finish());
}

// The order of the aligned rows: by SHA-256 of (seed, id), so that the held-out rows and
// the epochs' shuffles are a function of the seed and the shared ids alone, the same in
// every run of the job, not of the PSI's random blinding order. It tells a feature party
// nothing: it holds the shared ids and could compute it (the label party's own row order,
// which it could not, stays hidden).
void OrderAlignedRows(const std::vector<std::string>& ids, uint64_t seed, std::vector<uint32_t>* rows) {
  uint8_t s[8];
  for (int i = 0; i < 8; ++i) s[i] = static_cast<uint8_t>(seed >> (8 * i));
  std::vector<std::pair<Sha256Digest, uint32_t>> keyed;
  keyed.reserve(rows->size());
  for (uint32_t r : *rows) {
    Sha256 h;
    h.Update(std::span<const uint8_t>(s, 8));
    h.Update(ids[r]);
    keyed.push_back({h.Finish(), r});
  }
  std::sort(keyed.begin(), keyed.end());
  for (size_t i = 0; i < keyed.size(); ++i) (*rows)[i] = keyed[i].second;
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t c = s.find(',', at);
    out.push_back(s.substr(at, c == std::string::npos ? std::string::npos : c - at));
    if (c == std::string::npos) break;
    at = c + 1;
  }
  return out;
}

// The training rows of `epoch`, in that epoch's order: a function of the seed and the
// epoch alone, so a resumed job goes on with the same order.
std::vector<uint64_t> EpochOrder(const std::vector<uint64_t>& train, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order = train;
  Rng rng(SplitMix64(seed ^ 0x5b1d) + epoch);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.UniformInt(i)]);
  return order;
}

class LabelRun {
 public:
  LabelRun(collective::CollectiveTransport& t, LabelJob& job, const SplitJobOptions& o, Link& link,
           SplitJobReport& report)
      : transport_(t), job_(job), o_(o), link_(link), report_(report) {}

  Result<std::unique_ptr<LabelParty>> Run() {
    const auto start = Clock::now();
    report_.my_ids = job_.ids.size();
    std::optional<PartyCheckpoint> resume;
    if (o_.checkpoints != nullptr) {
      FM_ASSIGN_OR_RETURN(resume, o_.checkpoints->Load(std::nullopt));
    }
    if (resume) {
      rows_ = resume->rows;
      align_ = SplitComma(resume->alignment);
      if (align_.size() != job_.feature_ranks.size()) {
        return Status::FailedPrecondition("the checkpoint is of a job with " + std::to_string(align_.size()) +
                                          " feature parties, this one has " +
                                          std::to_string(job_.feature_ranks.size()));
      }
      for (uint32_t r : rows_) {
        if (r >= job_.ids.size()) return Status::FailedPrecondition("the checkpoint names rows this table lacks");
      }
      Log(o_, "resuming from the checkpoint of step " + std::to_string(resume->step) + " (" +
                  std::to_string(rows_.size()) + " aligned rows)");
    } else {
      FM_RETURN_IF_ERROR(Align());
    }
    report_.aligned_rows = rows_.size();
    Dataset data = job_.data.Subset(rows_);
    const HeldOutRows split = SplitHeldOut(data.labels, o_.test_fraction, o_.seed);
    train_.assign(split.train.begin(), split.train.end());
    test_.assign(split.test.begin(), split.test.end());
    report_.train_rows = train_.size();
    report_.test_rows = test_.size();
    report_.aligned = rows_;
    report_.test = test_;
    if (!resume) {
      Log(o_, "psi: " + std::to_string(job_.ids.size()) + " ids here; " + std::to_string(rows_.size()) +
                  " rows shared by every party: " + std::to_string(train_.size()) + " to train, " +
                  std::to_string(test_.size()) + " held out");
    }
    job_.party.staleness = o_.staleness;
    FM_ASSIGN_OR_RETURN(party_, LabelParty::Create(std::move(job_.bottom), std::move(job_.top), std::move(data),
                                                   job_.feature_ranks, job_.party));
    if (resume) {
      FM_RETURN_IF_ERROR(party_->Restore(resume->step, resume->params, resume->velocity));
      FM_RETURN_IF_ERROR(ResumeAll(resume->step));
    }
    FM_RETURN_IF_ERROR(Train());
    FM_RETURN_IF_ERROR(party_->Flush());
    SplitMessage done;
    done.type = SplitMessageType::kDone;
    done.step = party_->steps_completed();
    if (job_.collect_parts) done.text = "parts";
    for (int r : job_.feature_ranks) FM_RETURN_IF_ERROR(link_.Send(r, done));
    if (job_.collect_parts) FM_RETURN_IF_ERROR(CollectParts());
    report_.seconds = Since(start);
    return std::move(party_);
  }

 private:
  // PSI with every feature party at once, then the rows every party holds, in the order of
  // the first intersection; each feature party is told their positions in its own.
  Status Align() {
    std::vector<std::unique_ptr<psi::PsiParty>> parties;
    std::vector<psi::PsiParty*> raw;
    for (size_t i = 0; i < job_.feature_ranks.size(); ++i) {
      FM_ASSIGN_OR_RETURN(auto p, psi::PsiParty::Create(job_.ids, o_.psi));
      raw.push_back(p.get());
      parties.push_back(std::move(p));
    }
    PsiExchangeOptions xo;
    xo.timeout_ms = o_.timeout_ms;
    PsiExchangeStats ps;
    FM_ASSIGN_OR_RETURN(std::vector<psi::PsiResult> psi, RunPsiWithEach(transport_, job_.feature_ranks, raw, xo, &ps));
    report_.bytes_sent += ps.bytes_sent;
    report_.bytes_received += ps.bytes_received;
    std::vector<std::vector<int64_t>> pos(psi.size(), std::vector<int64_t>(job_.ids.size(), -1));
    for (size_t k = 0; k < psi.size(); ++k)
      for (size_t j = 0; j < psi[k].rows.size(); ++j) pos[k][psi[k].rows[j]] = static_cast<int64_t>(j);
    for (uint64_t r : psi[0].rows) {
      bool everywhere = true;
      for (size_t k = 1; k < psi.size(); ++k) everywhere = everywhere && pos[k][r] >= 0;
      if (everywhere) rows_.push_back(static_cast<uint32_t>(r));
    }
    if (rows_.size() < 2) {
      return Status::FailedPrecondition("the parties share " + std::to_string(rows_.size()) +
                                        " record ids; split training needs rows that every party holds");
    }
    OrderAlignedRows(job_.ids, o_.seed, &rows_);
    for (size_t k = 0; k < psi.size(); ++k) {
      SplitMessage a;
      a.type = SplitMessageType::kAlign;
      std::vector<uint32_t> positions;
      for (uint32_t r : rows_) positions.push_back(static_cast<uint32_t>(pos[k][r]));
      a.indices.assign(positions.begin(), positions.end());
      align_.push_back(AlignmentDigest(psi[k].digest, positions));
      FM_RETURN_IF_ERROR(link_.Send(job_.feature_ranks[k], a));
    }
    return Status::OK();
  }

  Status Train() {
    const uint64_t batch = static_cast<uint64_t>(o_.batch);
    // A last batch of one row joins the one before: batch statistics need two.
    uint64_t per_epoch = (train_.size() + batch - 1) / batch;
    if (per_epoch > 1 && train_.size() % batch == 1) --per_epoch;
    const uint64_t total = per_epoch * static_cast<uint64_t>(o_.epochs);
    double train_s = 0.0, waited_s = 0.0, loss_sum = 0.0;
    uint64_t loss_rows = 0;
    std::vector<uint64_t> order;
    uint64_t order_epoch = UINT64_MAX;
    while (party_->steps_completed() < total) {
      FM_RETURN_IF_ERROR(Stopped(o_));
      if (o_.max_steps > 0 && party_->steps_completed() >= o_.max_steps) break;
      const uint64_t step = party_->steps_completed();
      const uint64_t epoch = step / per_epoch, k = step % per_epoch;
      if (epoch != order_epoch) {
        order = EpochOrder(train_, o_.seed, epoch);
        order_epoch = epoch;
      }
      if (k == 0) loss_sum = 0.0, loss_rows = 0;
      const uint64_t b = k * batch, e = k + 1 == per_epoch ? order.size() : b + batch;
      // Staleness 1: the next step begins now, unless this one ends a segment (an epoch, a
      // checkpoint, max_steps), after which the parties must be between steps.
      const uint64_t n = step + 1;
      const bool pipelined = o_.staleness > 0 && k + 1 < per_epoch &&
                             !(o_.checkpoints != nullptr && o_.checkpoint_every > 0 && n % o_.checkpoint_every == 0) &&
                             !(o_.max_steps > 0 && n >= o_.max_steps);
      const uint64_t nb = e, ne = k + 2 == per_epoch ? order.size() : nb + batch;
      const std::span<const uint64_t> next =
          pipelined ? std::span<const uint64_t>(order).subspan(nb, ne - nb) : std::span<const uint64_t>();
      const auto t0 = Clock::now();
      const double waited0 = link_.waited_s();
      Status st = RunStep(*party_, link_, std::span<const uint64_t>(order).subspan(b, e - b), next, o_.microbatches,
                          o_.overlap);
      if (!st.ok()) {
        FM_RETURN_IF_ERROR(Recover(st));
        continue;
      }
      train_s += Since(t0);
      waited_s += link_.waited_s() - waited0;
      loss_sum += party_->pass_loss() * static_cast<double>(e - b);
      loss_rows += e - b;
      report_.steps = party_->steps_completed();
      report_.idle_fraction = train_s > 0 ? waited_s / train_s : 0.0;
      report_.step_ms = report_.steps > 0 ? 1000.0 * train_s / static_cast<double>(report_.steps) : 0.0;
      const bool epoch_end = k + 1 == per_epoch;
      if (epoch_end) {
        Status ev = Evaluate(epoch + 1, loss_rows ? loss_sum / static_cast<double>(loss_rows) : 0.0);
        if (!ev.ok()) {
          FM_RETURN_IF_ERROR(Recover(ev));
          continue;
        }
      }
      if (o_.checkpoints != nullptr &&
          (epoch_end || (o_.checkpoint_every > 0 && party_->steps_completed() % o_.checkpoint_every == 0))) {
        Status cp = Checkpoint();
        if (!cp.ok()) FM_RETURN_IF_ERROR(Recover(cp));
      }
    }
    return Status::OK();
  }

  Status Evaluate(uint64_t epoch, double train_loss) {
    std::map<std::string, double> metrics;
    double test_loss = 0.0;
    if (!test_.empty()) {
      // One pass over every test row keeps the metrics exact (AUC is not a mean of batches).
      FM_RETURN_IF_ERROR(RunPass(*party_, link_, test_, o_.microbatches, o_.overlap));
      test_loss = party_->pass_loss();
      metrics = party_->pass_metrics();
    }
    report_.test_metrics = metrics;
    report_.test_loss = test_loss;
    JsonLine line;
    line.Add("epoch", static_cast<int64_t>(epoch)).Add("steps", static_cast<int64_t>(report_.steps));
    line.Add("train_loss", train_loss).Add("test_loss", test_loss);
    for (const auto& [k, v] : metrics) line.Add("test_" + k, v);
    line.Add("rows", static_cast<int64_t>(report_.aligned_rows)).Add("microbatches", static_cast<int64_t>(o_.microbatches));
    line.Add("staleness", static_cast<int64_t>(o_.staleness));
    line.Add("idle_fraction", report_.idle_fraction).Add("step_ms", report_.step_ms);
    line.Add("bytes_sent", static_cast<int64_t>(report_.bytes_sent))
        .Add("bytes_received", static_cast<int64_t>(report_.bytes_received));
    line.Add("resumes", static_cast<int64_t>(report_.resumes));
    if (o_.metrics) o_.metrics(line.str());
    const std::string acc = metrics.count("accuracy") ? ", test accuracy " + std::to_string(metrics["accuracy"]) : "";
    Log(o_, "epoch " + std::to_string(epoch) + ": train loss " + std::to_string(train_loss) + acc + ", idle " +
                std::to_string(report_.idle_fraction));
    return Status::OK();
  }

  // Two-phase: this party saves step s, every feature party saves s and says so, then s
  // is committed here.
  Status Checkpoint() {
    FM_RETURN_IF_ERROR(party_->Flush());
    const uint64_t s = party_->steps_completed();
    PartyCheckpoint cp;
    cp.step = s;
    for (size_t k = 0; k < align_.size(); ++k) cp.alignment += (k ? "," : "") + align_[k];
    cp.rows = rows_;
    for (SplitPart* part : {&party_->bottom(), &party_->top()}) {
      cp.params.emplace_back(part->model().params(), part->model().params() + part->model().num_flat());
      cp.velocity.push_back(part->velocity());
    }
    FM_RETURN_IF_ERROR(o_.checkpoints->Save(cp));
    SplitMessage m;
    m.type = SplitMessageType::kCheckpoint;
    m.step = s;
    for (int r : job_.feature_ranks) FM_RETURN_IF_ERROR(link_.Send(r, m));
    std::set<int> waiting(job_.feature_ranks.begin(), job_.feature_ranks.end());
    while (!waiting.empty()) {
      FM_ASSIGN_OR_RETURN(auto got, link_.Receive("checkpoints"));
      if (got.second.type == SplitMessageType::kHello) return Restarted(got);
      if (got.second.type != SplitMessageType::kCheckpointed || got.second.step != s || waiting.erase(got.first) == 0) {
        return Status::Corruption("rank " + std::to_string(got.first) + ": a " +
                                  SplitMessageTypeName(got.second.type) + " message where the checkpoint of step " +
                                  std::to_string(s) + " was expected");
      }
    }
    return o_.checkpoints->Commit(s);
  }

  Status CollectParts() {
    std::map<int, std::string> got;
    while (got.size() < job_.feature_ranks.size()) {
      FM_ASSIGN_OR_RETURN(auto m, link_.Receive("the feature parties' trained parts"));
      if (m.second.type != SplitMessageType::kPart || got.count(m.first)) {
        return Status::Corruption("rank " + std::to_string(m.first) + ": a " + SplitMessageTypeName(m.second.type) +
                                  " message where its part was expected");
      }
      got[m.first] = std::move(m.second.text);
    }
    for (int r : job_.feature_ranks) report_.parts.push_back(std::move(got[r]));
    return Status::OK();
  }

  // A feature party was lost (silent, or it stopped): with checkpoints, wait for it to come
  // back and take every party back to the last committed step.
  Status Recover(const Status& why) {
    if (o_.checkpoints == nullptr ||
        (why.code() != StatusCode::kDeadlineExceeded && why.code() != StatusCode::kUnavailable)) {
      return why;
    }
    FM_ASSIGN_OR_RETURN(std::optional<PartyCheckpoint> cp, o_.checkpoints->Load(std::nullopt));
    if (!cp) return Status(why.code(), why.message() + " (no checkpoint committed yet to resume from)");
    Log(o_, "lost a party (" + why.message() + "); waiting up to " + std::to_string(o_.rejoin_timeout_ms) +
                " ms for it, then back to step " + std::to_string(cp->step));
    FM_RETURN_IF_ERROR(party_->Restore(cp->step, cp->params, cp->velocity));
    ++report_.resumes;
    return ResumeAll(cp->step);
  }

  // Every feature party back at step c: a resume message to each (again to one that says
  // hello: it restarted after the first), then its resumed answer. What else arrives
  // meanwhile is from before (activations of an abandoned step) and is dropped.
  Status ResumeAll(uint64_t c) {
    auto resume = [&](size_t k) {
      SplitMessage m;
      m.type = SplitMessageType::kResume;
      m.step = c;
      m.text = align_[k];
      return link_.Send(job_.feature_ranks[k], m);
    };
    std::map<int, size_t> index;
    for (size_t k = 0; k < job_.feature_ranks.size(); ++k) {
      index[job_.feature_ranks[k]] = k;
      FM_RETURN_IF_ERROR(resume(k));
    }
    std::set<int> waiting(job_.feature_ranks.begin(), job_.feature_ranks.end());
    const auto deadline = Clock::now() + std::chrono::milliseconds(o_.rejoin_timeout_ms);
    while (!waiting.empty()) {
      FM_RETURN_IF_ERROR(Stopped(o_));
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        std::string who;
        for (int r : waiting) who += (who.empty() ? "" : ", ") + std::to_string(r);
        return Status::DeadlineExceeded("split: rank " + who + " did not come back within " +
                                        std::to_string(o_.rejoin_timeout_ms) + " ms ([split] rejoin_timeout_ms)");
      }
      auto got = link_.Poll(static_cast<int>(std::min<int64_t>(left, 1000)));
      if (!got.ok()) {
        if (got.status().code() == StatusCode::kUnavailable) continue;  // a stale "stopped" from before
        return got.status();
      }
      if (!*got) continue;
      const auto& [from, m] = **got;
      if (m.type == SplitMessageType::kHello && index.count(from)) {
        FM_RETURN_IF_ERROR(resume(index[from]));
      } else if (m.type == SplitMessageType::kResumed && m.step == c) {
        waiting.erase(from);
      }
    }
    Log(o_, "every party is back at step " + std::to_string(c));
    return Status::OK();
  }

  collective::CollectiveTransport& transport_;
  LabelJob& job_;
  const SplitJobOptions& o_;
  Link& link_;
  SplitJobReport& report_;
  std::vector<uint32_t> rows_;
  std::vector<std::string> align_;  // per feature party
  std::vector<uint64_t> train_, test_;
  std::unique_ptr<LabelParty> party_;
};

}  // namespace

Result<SplitJobReport> RunLabelJob(collective::CollectiveTransport& transport, LabelJob job,
                                   const SplitJobOptions& options, std::unique_ptr<LabelParty>* party_out) {
  if (options.epochs < 1 || options.batch < 1 || options.microbatches < 1 || options.test_fraction < 0 ||
      options.test_fraction >= 1) {
    return Status::InvalidArgument("split job: epochs, batch and microbatches must be >= 1, test_fraction in [0, 1)");
  }
  if (options.staleness > 1) {
    return Status::InvalidArgument("split job: staleness is 0 or 1, not " + std::to_string(options.staleness));
  }
  if (options.microbatches > SplitPart::kMaxMicroBatches) {
    return Status::InvalidArgument("split job: microbatches is at most " + std::to_string(SplitPart::kMaxMicroBatches));
  }
  {
    std::vector<int> ranks = job.feature_ranks;
    ranks.push_back(0);
    FM_RETURN_IF_ERROR(CheckSigning(options, ranks, /*me=*/0));
  }
  SplitJobReport report;
  Link link(transport, options, report);
  const std::vector<int> ranks = job.feature_ranks;
  auto r = LabelRun(transport, job, options, link, report).Run();
  if (!r.ok()) {
    link.Abort(ranks, r.status());  // the others would otherwise wait out their timeout
    return r.status();
  }
  if (party_out != nullptr) *party_out = std::move(*r);
  return report;
}

Result<SplitJobReport> RunFeatureJob(collective::CollectiveTransport& transport, FeatureJob job,
                                     const SplitJobOptions& options, std::unique_ptr<FeatureParty>* party_out) {
  FM_RETURN_IF_ERROR(CheckSigning(options, {job.label_rank}, /*me=*/-1));
  SplitJobReport report;
  SplitJobOptions o = options;
  // While the label party waits for another party to come back, this one waits too.
  if (o.checkpoints != nullptr) o.timeout_ms = std::max(o.timeout_ms, o.rejoin_timeout_ms);
  Link link(transport, o, report);
  const auto start = Clock::now();
  report.my_ids = job.ids.size();
  std::string alignment;
  std::vector<uint32_t> rows;  // this party's table rows in the job's order
  auto side = [&]() -> Result<std::unique_ptr<FeatureParty>> {
    std::unique_ptr<FeatureParty> party;
    std::optional<PartyCheckpoint> latest;
    if (o.checkpoints != nullptr) {
      FM_ASSIGN_OR_RETURN(latest, o.checkpoints->Load(std::nullopt));
    }
    std::vector<uint64_t> psi_rows;
    std::string psi_digest;
    if (latest) {
      // A restart: the rows are known; the label party says which step to go back to.
      rows = latest->rows;
      for (uint32_t r : rows) {
        if (r >= job.ids.size()) return Status::FailedPrecondition("the checkpoint names rows this table lacks");
      }
      alignment = latest->alignment;
      FM_ASSIGN_OR_RETURN(party, FeatureParty::CreateAligned(std::move(job.bottom), job.data.Subset(rows), job.party));
      SplitMessage hello;
      hello.type = SplitMessageType::kHello;
      hello.step = latest->step;
      hello.text = alignment;
      FM_RETURN_IF_ERROR(link.Send(job.label_rank, hello));
      Log(o, "restarted with the checkpoint of step " + std::to_string(latest->step) + "; asking the label party to resume");
    } else {
      FM_ASSIGN_OR_RETURN(auto p, psi::PsiParty::Create(job.ids, o.psi));
      PsiExchangeOptions xo;
      xo.timeout_ms = options.timeout_ms;
      PsiExchangeStats ps;
      FM_ASSIGN_OR_RETURN(psi::PsiResult psi, RunPsi(transport, job.label_rank, *p, xo, &ps));
      report.bytes_sent += ps.bytes_sent;
      report.bytes_received += ps.bytes_received;
      psi_rows = psi.rows;
      psi_digest = psi.digest;
      std::vector<uint32_t> r32(psi.rows.begin(), psi.rows.end());
      FM_ASSIGN_OR_RETURN(party, FeatureParty::Create(std::move(job.bottom), job.data.Subset(r32), job.party));
      Log(o, "psi: " + std::to_string(job.ids.size()) + " ids here, " + std::to_string(r32.size()) +
                 " shared with the label party");
    }
    std::vector<SplitMessage> out;
    while (!party->done()) {
      FM_RETURN_IF_ERROR(Stopped(o));
      FM_ASSIGN_OR_RETURN(auto got, link.Receive("the label party"));
      auto& [from, m] = got;
      if (from != job.label_rank) return Status::Corruption("rank " + std::to_string(from) + " is not the label party");
      if (m.type == SplitMessageType::kCheckpoint) {
        if (!party->between_steps() || m.step != party->steps_completed() || o.checkpoints == nullptr) {
          return Status::Corruption("from the label party: a checkpoint of step " + std::to_string(m.step) +
                                    " while this party is at step " + std::to_string(party->steps_completed()) +
                                    (o.checkpoints == nullptr ? " and keeps no checkpoints" : ""));
        }
        PartyCheckpoint cp;
        cp.step = m.step;
        cp.alignment = alignment;
        cp.rows = rows;
        SplitPart& b = party->bottom();
        cp.params.emplace_back(b.model().params(), b.model().params() + b.model().num_flat());
        cp.velocity.push_back(b.velocity());
        FM_RETURN_IF_ERROR(o.checkpoints->Save(cp));
        SplitMessage ok;
        ok.type = SplitMessageType::kCheckpointed;
        ok.step = m.step;
        FM_RETURN_IF_ERROR(link.Send(job.label_rank, ok));
        continue;
      }
      if (m.type == SplitMessageType::kResume) {
        if (o.checkpoints == nullptr) return Status::Corruption("from the label party: a resume, but this party keeps no checkpoints");
        if (m.text != alignment) {
          return Status::FailedPrecondition("the label party resumes a job with other rows (alignment " +
                                            m.text.substr(0, 16) + ", this party's " + alignment.substr(0, 16) +
                                            "): another job's store?");
        }
        FM_ASSIGN_OR_RETURN(std::optional<PartyCheckpoint> cp, o.checkpoints->Load(m.step));
        if (!cp) {
          return Status::FailedPrecondition("the label party resumes from step " + std::to_string(m.step) +
                                            ", which this party's store does not keep");
        }
        FM_RETURN_IF_ERROR(party->Restore(cp->step, cp->params.at(0), cp->velocity.at(0)));
        ++report.resumes;
        SplitMessage ok;
        ok.type = SplitMessageType::kResumed;
        ok.step = m.step;
        FM_RETURN_IF_ERROR(link.Send(job.label_rank, ok));
        Log(o, "back at step " + std::to_string(m.step));
        continue;
      }
      const Status s = party->Handle(m, &out);
      if (!s.ok()) return Status(s.code(), "from the label party: " + s.message());
      if (m.type == SplitMessageType::kDone && m.text == "parts") {
        SplitMessage part;
        part.type = SplitMessageType::kPart;
        if (job.share_part) {
          FM_ASSIGN_OR_RETURN(part.text, onnx::SerializeOnnx(graph::InferenceGraph(party->bottom().model())));
        }
        Log(o, job.share_part ? "sent this party's trained part to the label party ([split] share_part)"
                              : "the label party asked for this party's part: not sent ([split] share_part is off)");
        FM_RETURN_IF_ERROR(link.Send(job.label_rank, part));
      }
      for (SplitMessage& r : out) FM_RETURN_IF_ERROR(link.Send(job.label_rank, r));
      out.clear();
      if (party->aligned() && rows.empty() && !psi_rows.empty()) {
        for (uint32_t pos : party->align_positions()) rows.push_back(static_cast<uint32_t>(psi_rows[pos]));
        alignment = AlignmentDigest(psi_digest, party->align_positions());
      }
      report.aligned_rows = party->rows();
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
