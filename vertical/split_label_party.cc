#include "vertical/split_label_party.h"

#include <sodium.h>

#include <cstring>

#include "crypto/sodium.h"

namespace fedmesh::vertical {

Result<std::unique_ptr<LabelParty>> LabelParty::Create(std::unique_ptr<SplitPart> bottom, std::unique_ptr<SplitPart> top,
                                                       Dataset data, std::vector<int> peers,
                                                       const LabelPartyOptions& options) {
  if (static_cast<int64_t>(data.sample_size()) != bottom->in_cols()) {
    return Status::InvalidArgument("the bottom model takes " + std::to_string(bottom->in_cols()) +
                                   " features per row, this party's data has " + std::to_string(data.sample_size()));
  }
  const int64_t out = top->out_cols();
  if (options.loss.kind == LossKind::kBceWithLogits && out != 1) {
    return Status::InvalidArgument("the top model has " + std::to_string(out) +
                                   " outputs; bce_with_logits takes one logit per row");
  }
  if (options.loss.kind == LossKind::kCrossEntropy && out < data.num_classes) {
    return Status::InvalidArgument("the top model has " + std::to_string(out) + " outputs for " +
                                   std::to_string(data.num_classes) + " classes");
  }
  if (peers.empty()) return Status::InvalidArgument("split training needs at least one feature party");
  if (options.combine == CutCombine::kSum && top->in_cols() != bottom->out_cols()) {
    return Status::InvalidArgument("combine sum adds bottom outputs of one width: the top model takes " +
                                   std::to_string(top->in_cols()) + " inputs, the own bottom model gives " +
                                   std::to_string(bottom->out_cols()));
  }
  std::unique_ptr<LabelParty> p(new LabelParty());
  p->bottom_ = std::move(bottom);
  p->top_ = std::move(top);
  p->data_ = std::move(data);
  p->peers_ = std::move(peers);
  for (size_t i = 0; i < p->peers_.size(); ++i) p->peer_index_[p->peers_[i]] = i;
  p->options_ = options;
  p->peer_cols_.assign(p->peers_.size(), -1);
  FM_RETURN_IF_ERROR(InitSodium());
  uint64_t seed = 0;
  randombytes_buf(&seed, sizeof seed);
  p->noise_rng_ = Rng(seed);
  return p;
}

Result<std::vector<Outgoing>> LabelParty::Begin(std::span<const uint64_t> rows, uint32_t micro, bool training) {
  if (!passes_.empty() &&
      (!training || !passes_.back().training || passes_.size() >= size_t{1} + options_.staleness)) {
    return Status::FailedPrecondition(passes_.size() >= size_t{1} + options_.staleness || !training
                                          ? "a pass is still running"
                                          : "a training step cannot begin while an evaluation runs");
  }
  if (rows.empty() || micro == 0) return Status::InvalidArgument("a pass needs rows and at least one micro-batch");
  micro = static_cast<uint32_t>(std::min<size_t>(micro, rows.size()));
  Pass p;
  p.id = ++passes_begun_;
  p.step = steps_completed_ + (training ? passes_.size() : 0);
  p.training = training;
  p.micro_rows.assign(micro, {});
  for (uint32_t m = 0; m < micro; ++m) {  // as even as possible, in order
    const size_t b = rows.size() * m / micro, e = rows.size() * (m + 1) / micro;
    p.micro_rows[m].assign(rows.begin() + static_cast<ptrdiff_t>(b), rows.begin() + static_cast<ptrdiff_t>(e));
    for (uint64_t r : p.micro_rows[m]) {
      if (r >= data_.size()) return Status::InvalidArgument("row " + std::to_string(r) + " is past the data");
    }
  }
  p.own_out.assign(micro, std::nullopt);
  p.got.assign(micro, std::vector<std::optional<std::vector<float>>>(peers_.size()));
  p.missing.assign(micro, peers_.size());
  p.processed.assign(micro, false);
  p.remaining = micro;
  p.rows = rows.size();
  if (!training) p.metrics.emplace(TaskOf(options_.loss.kind), static_cast<int>(top_->out_cols()));
  std::vector<Outgoing> out;
  for (int peer : peers_) {
    for (uint32_t m = 0; m < micro; ++m) {
      SplitMessage f;
      f.type = SplitMessageType::kForward;
      f.training = training;
      f.step = p.step;
      f.micro = m;
      f.indices = p.micro_rows[m];
      out.emplace_back(peer, std::move(f));
    }
  }
  passes_.push_back(std::move(p));
  return out;
}

Status LabelParty::OnActivations(int rank, const SplitMessage& m, std::vector<Outgoing>* out) {
  const auto pi = peer_index_.find(rank);
  if (pi == peer_index_.end()) return Status::Corruption("activations from rank " + std::to_string(rank) + ", not a feature party");
  const size_t p = pi->second;
  const std::string from = "rank " + std::to_string(rank) + ": ";
  if (m.type != SplitMessageType::kActivations) {
    return Status::Corruption(from + "a " + std::string(SplitMessageTypeName(m.type)) + " message sent to the label party");
  }
  Pass* pass = nullptr;
  for (Pass& q : passes_) {
    if (q.training == m.training && q.step == m.step) pass = &q;
  }
  if (pass == nullptr || m.micro >= pass->micro_rows.size()) {
    std::string now = "over";
    if (!passes_.empty()) {
      now = std::string(passes_.front().training ? "training" : "evaluation") + " step " +
            std::to_string(passes_.front().step);
      if (passes_.size() > 1) now += " and " + std::to_string(passes_.back().step);
    }
    return Status::Corruption(from + "activations for " + (m.training ? "training" : "evaluation") + " step " +
                              std::to_string(m.step) + " micro-batch " + std::to_string(m.micro) + ", but the pass is " +
                              now);
  }
  if (pass->processed[m.micro] || pass->got[m.micro][p].has_value()) {
    return Status::Corruption(from + "activations for micro-batch " + std::to_string(m.micro) + " came twice");
  }
  if (m.rows != pass->micro_rows[m.micro].size() || (peer_cols_[p] >= 0 && m.cols != peer_cols_[p]) || m.cols == 0) {
    return Status::Corruption(from + "activations of " + std::to_string(m.rows) + " x " + std::to_string(m.cols) +
                              ", expected " + std::to_string(pass->micro_rows[m.micro].size()) + " rows" +
                              (peer_cols_[p] >= 0 ? " x " + std::to_string(peer_cols_[p]) : ""));
  }
  if (peer_cols_[p] < 0) {
    if (options_.combine == CutCombine::kSum && m.cols != top_->in_cols()) {
      return Status::InvalidArgument("combine sum adds bottom outputs of one width: the top model takes " +
                                     std::to_string(top_->in_cols()) + " inputs, rank " + std::to_string(rank) +
                                     "'s bottom model gives " + std::to_string(m.cols));
    }
    peer_cols_[p] = m.cols;
    bool all = true;
    int64_t sum = bottom_->out_cols();
    for (int64_t c : peer_cols_) {
      all = all && c >= 0;
      sum += c;
    }
    if (options_.combine == CutCombine::kConcat && all && sum != top_->in_cols()) {
      std::string parts = std::to_string(bottom_->out_cols());
      for (int64_t c : peer_cols_) parts += " + " + std::to_string(c);
      return Status::InvalidArgument("the top model takes " + std::to_string(top_->in_cols()) +
                                     " inputs, the bottom models give " + parts + " = " + std::to_string(sum));
    }
  }
  pass->got[m.micro][p] = m.values;
  --pass->missing[m.micro];
  return ProcessReady(out);
}

Status LabelParty::ProcessReady(std::vector<Outgoing>* out) {
  while (!passes_.empty()) {
    Pass& front = passes_.front();
    for (uint32_t m = 0; m < front.micro_rows.size() && front.remaining > 0; ++m) {
      if (!front.processed[m] && front.missing[m] == 0) FM_RETURN_IF_ERROR(Process(m, out));
    }
    if (front.remaining > 0) return Status::OK();
    // The pass is done: its results stay readable, the next pass's ready work goes on.
    last_loss_ = front.rows ? front.loss_sum / static_cast<double>(front.rows) : 0.0;
    last_metrics_ = front.metrics ? front.metrics->Finish() : std::map<std::string, double>{};
    passes_.pop_front();
  }
  return Status::OK();
}

Status LabelParty::GatherOwn(const std::vector<uint64_t>& rows) {
  const size_t w = data_.sample_size();
  input_.resize(rows.size() * w);
  for (size_t i = 0; i < rows.size(); ++i) std::memcpy(&input_[i * w], data_.sample(rows[i]), w * sizeof(float));
  return Status::OK();
}

Status LabelParty::RunDeferred() {
  Deferred d = std::move(deferred_.front());
  deferred_.pop_front();
  if (d.step) {
    bottom_->Step();
    return Status::OK();
  }
  return bottom_->BackwardSlot(d.micro, d.dout.data());
}

Status LabelParty::FlushEarlierPasses() {
  const uint64_t oldest = passes_.empty() ? passes_begun_ + 1 : passes_.front().id;
  while (!deferred_.empty() && deferred_.front().pass < oldest) FM_RETURN_IF_ERROR(RunDeferred());
  return Status::OK();
}

Status LabelParty::Flush() {
  while (!deferred_.empty()) FM_RETURN_IF_ERROR(RunDeferred());
  return Status::OK();
}

Status LabelParty::Restore(uint64_t step, const std::vector<std::vector<float>>& params,
                           const std::vector<std::vector<float>>& velocity) {
  if (params.size() != 2 || velocity.size() != 2) return Status::InvalidArgument("a label party's checkpoint holds two parts");
  FM_RETURN_IF_ERROR(bottom_->Restore(params[0], velocity[0]));
  FM_RETURN_IF_ERROR(top_->Restore(params[1], velocity[1]));
  steps_completed_ = step;
  deferred_.clear();
  passes_.clear();
  return Status::OK();
}

Status LabelParty::EnsureOwnForward(uint32_t m) {
  Pass& pass = passes_.front();
  if (pass.own_out[m]) return Status::OK();
  FM_RETURN_IF_ERROR(FlushEarlierPasses());
  const std::vector<uint64_t>& rows = pass.micro_rows[m];
  FM_RETURN_IF_ERROR(GatherOwn(rows));
  const auto n = static_cast<int64_t>(rows.size());
  // A training micro-batch's activations stay in its slot for the deferred backward.
  FM_RETURN_IF_ERROR(bottom_->Forward(input_.data(), n, pass.training, Seed(pass.step, m), pass.training ? m : 0));
  pass.own_out[m].emplace(bottom_->output(), bottom_->output() + n * bottom_->out_cols());
  return Status::OK();
}

Result<bool> LabelParty::DoIdleWork() {
  if (!deferred_.empty()) {
    FM_RETURN_IF_ERROR(RunDeferred());
    return true;
  }
  if (passes_.empty()) return false;
  const Pass& pass = passes_.front();
  for (uint32_t m = 0; m < pass.own_out.size(); ++m) {
    if (!pass.processed[m] && !pass.own_out[m]) {
      FM_RETURN_IF_ERROR(EnsureOwnForward(m));
      return true;
    }
  }
  return false;
}

Status LabelParty::Process(uint32_t m, std::vector<Outgoing>* out) {
  Pass& pass = passes_.front();
  const std::vector<uint64_t>& rows = pass.micro_rows[m];
  const auto n = static_cast<int64_t>(rows.size());
  labels_.resize(rows.size());
  const bool regression = data_.target_dim > 0;
  targets_.resize(regression ? rows.size() * static_cast<size_t>(data_.target_dim) : 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    labels_[i] = data_.labels[rows[i]];
    if (regression) std::memcpy(&targets_[i * data_.target_dim], data_.target(rows[i]), data_.target_dim * sizeof(float));
  }
  const uint64_t seed = Seed(pass.step, m);
  FM_RETURN_IF_ERROR(EnsureOwnForward(m));
  const std::vector<float>& own_out = *pass.own_out[m];
  // The top's input: [own | peer 1 | peer 2 ...] per row, or own + peer 1 + peer 2 ...
  const int64_t total = top_->in_cols();
  const bool sum = options_.combine == CutCombine::kSum;
  top_input_.resize(static_cast<size_t>(n * total));
  if (sum) {
    std::memcpy(top_input_.data(), own_out.data(), top_input_.size() * sizeof(float));
    for (size_t p = 0; p < peers_.size(); ++p) {
      const float* src = pass.got[m][p]->data();
      for (size_t i = 0; i < top_input_.size(); ++i) top_input_[i] += src[i];
    }
  } else {
    for (int64_t r = 0; r < n; ++r) {
      float* dst = &top_input_[static_cast<size_t>(r * total)];
      std::memcpy(dst, own_out.data() + r * bottom_->out_cols(), bottom_->out_cols() * sizeof(float));
      int64_t at = bottom_->out_cols();
      for (size_t p = 0; p < peers_.size(); ++p) {
        std::memcpy(dst + at, pass.got[m][p]->data() + r * peer_cols_[p], peer_cols_[p] * sizeof(float));
        at += peer_cols_[p];
      }
    }
  }
  FM_RETURN_IF_ERROR(top_->Forward(top_input_.data(), n, pass.training, seed + 1));
  const int cols = static_cast<int>(top_->out_cols());
  const int32_t* labels = regression ? nullptr : labels_.data();
  const float* targets = regression ? targets_.data() : nullptr;
  if (!pass.training) {
    pass.loss_sum += ComputeLoss(options_.loss, top_->output(), static_cast<int>(n), cols, labels, targets, nullptr).loss_sum;
    pass.metrics->Add(top_->output(), static_cast<int>(n), labels, targets);
  } else {
    dout_.resize(static_cast<size_t>(n * cols));
    pass.loss_sum += ComputeLoss(options_.loss, top_->output(), static_cast<int>(n), cols, labels, targets, dout_.data()).loss_sum;
    // d(micro-batch mean)/d out, scaled to d(step batch mean)/d out.
    const float share = static_cast<float>(n) / static_cast<float>(pass.rows);
    float* g = top_->output_grad();
    for (size_t i = 0; i < dout_.size(); ++i) g[i] = dout_[i] * share;
    top_->Backward();
    const float* gin = top_->input_grad();
    // Each party's columns of d loss / d top input (sum: all of it, for every party).
    int64_t at = sum ? 0 : bottom_->out_cols();
    for (size_t p = 0; p < peers_.size(); ++p) {
      SplitMessage g2;
      g2.type = SplitMessageType::kGradients;
      g2.training = true;
      g2.wire = options_.wire;
      g2.step = pass.step;
      g2.micro = m;
      g2.rows = static_cast<uint32_t>(n);
      g2.cols = static_cast<uint32_t>(peer_cols_[p]);
      g2.values.resize(static_cast<size_t>(n * peer_cols_[p]));
      for (int64_t r = 0; r < n; ++r) {
        std::memcpy(&g2.values[static_cast<size_t>(r * peer_cols_[p])], gin + r * total + at,
                    peer_cols_[p] * sizeof(float));
      }
      if (options_.noise > 0) {
        for (float& v : g2.values) v += static_cast<float>(noise_rng_.Normal(0.0, options_.noise));
      }
      if (!sum) at += peer_cols_[p];
      out->emplace_back(peers_[p], std::move(g2));
    }
    // The own bottom's backward waits for idle time: the gradients above are what the
    // feature parties are waiting for.
    Deferred d;
    d.pass = pass.id;
    d.micro = m;
    d.dout.resize(static_cast<size_t>(n * bottom_->out_cols()));
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(&d.dout[static_cast<size_t>(r * bottom_->out_cols())], gin + r * total,
                  bottom_->out_cols() * sizeof(float));
    }
    deferred_.push_back(std::move(d));
  }
  pass.got[m].assign(peers_.size(), std::nullopt);
  pass.own_out[m].reset();
  pass.processed[m] = true;
  if (--pass.remaining == 0 && pass.training) {
    top_->Step();
    Deferred step;
    step.pass = pass.id;
    step.step = true;
    deferred_.push_back(std::move(step));
    ++steps_completed_;
  }
  return Status::OK();
}

}  // namespace fedmesh::vertical
