#include "vertical/split_feature_party.h"

#include <sodium.h>

#include <cstring>
#include <set>

#include "crypto/sodium.h"

namespace fedmesh::vertical {

Result<std::unique_ptr<FeatureParty>> FeatureParty::Create(std::unique_ptr<SplitPart> bottom, Dataset psi_rows,
                                                           const FeaturePartyOptions& options) {
  if (static_cast<int64_t>(psi_rows.sample_size()) != bottom->in_cols()) {
    return Status::InvalidArgument("the bottom model takes " + std::to_string(bottom->in_cols()) +
                                   " features per row, this party's data has " +
                                   std::to_string(psi_rows.sample_size()));
  }
  std::unique_ptr<FeatureParty> p(new FeatureParty());
  p->bottom_ = std::move(bottom);
  p->psi_rows_ = std::move(psi_rows);
  p->options_ = options;
  // The noise must be unpredictable to the label party: seeded from the OS, not the job.
  FM_RETURN_IF_ERROR(InitSodium());
  uint64_t seed = 0;
  randombytes_buf(&seed, sizeof seed);
  p->noise_rng_ = Rng(seed);
  return p;
}

Result<std::unique_ptr<FeatureParty>> FeatureParty::CreateAligned(std::unique_ptr<SplitPart> bottom, Dataset rows,
                                                                  const FeaturePartyOptions& options) {
  FM_ASSIGN_OR_RETURN(std::unique_ptr<FeatureParty> p, Create(std::move(bottom), std::move(rows), options));
  p->data_ = std::move(p->psi_rows_);
  p->psi_rows_ = Dataset();
  p->aligned_ = true;
  return p;
}

Status FeatureParty::Restore(uint64_t step, const std::vector<float>& params, const std::vector<float>& velocity) {
  FM_RETURN_IF_ERROR(bottom_->Restore(params, velocity));
  steps_completed_ = step;
  pending_.clear();
  done_ = false;
  return Status::OK();
}

Status FeatureParty::Gather(const std::vector<uint64_t>& rows, const char* what, uint64_t step) {
  const size_t w = data_.sample_size();
  input_.resize(rows.size() * w);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= data_.size()) {
      return Status::Corruption(std::string(what) + " for step " + std::to_string(step) + " names row " +
                                std::to_string(rows[i]) + ", the job has " + std::to_string(data_.size()) + " rows");
    }
    std::memcpy(&input_[i * w], data_.sample(rows[i]), w * sizeof(float));
  }
  return Status::OK();
}

Status FeatureParty::Handle(const SplitMessage& m, std::vector<SplitMessage>* out) {
  if (done_) return Status::Corruption("a " + std::string(SplitMessageTypeName(m.type)) + " message after done");
  switch (m.type) {
    case SplitMessageType::kError:
      return Status::Unavailable("the label party stopped: " + m.text);
    case SplitMessageType::kAlign: {
      if (aligned_) return Status::Corruption("a second align message");
      std::set<uint64_t> seen;
      std::vector<uint32_t> idx;
      idx.reserve(m.indices.size());
      for (uint64_t p : m.indices) {
        if (p >= psi_rows_.size() || !seen.insert(p).second) {
          return Status::Corruption("align message names PSI row " + std::to_string(p) +
                                    (p >= psi_rows_.size() ? ", past the intersection's " + std::to_string(psi_rows_.size())
                                                           : std::string(" twice")));
        }
        idx.push_back(static_cast<uint32_t>(p));
      }
      data_ = psi_rows_.Subset(idx);
      positions_ = idx;
      psi_rows_ = Dataset();
      aligned_ = true;
      return Status::OK();
    }
    case SplitMessageType::kForward: {
      if (!aligned_) return Status::Corruption("a forward before the align message");
      if (m.indices.empty()) return Status::Corruption("a forward of no rows");
      if (m.training) {
        // Another micro-batch of the newest pending step, or the first of the next step.
        const bool same = !pending_.empty() && m.step == pending_.back().step && !pending_.back().gradients_started;
        const uint64_t next = steps_completed_ + pending_.size();
        if (!same && (m.step != next || pending_.size() >= kMaxStepsInFlight)) {
          if (!pending_.empty()) {
            return Status::Corruption("a training forward for step " + std::to_string(m.step) + " while step " +
                                      std::to_string(pending_.front().step) + " waits for gradients" +
                                      (pending_.size() > 1 ? " and step " + std::to_string(pending_.back().step) +
                                                                 " too (at most " +
                                                                 std::to_string(kMaxStepsInFlight) + " steps wait)"
                                                           : std::string()));
          }
          return Status::Corruption("a training forward for step " + std::to_string(m.step) + ", expected step " +
                                    std::to_string(steps_completed_));
        }
        if (same && pending_.back().micro.count(m.micro) > 0) {
          return Status::Corruption("micro-batch " + std::to_string(m.micro) + " of step " + std::to_string(m.step) +
                                    " asked twice");
        }
        if (m.micro >= SplitPart::kMaxMicroBatches) {
          return Status::Corruption("micro-batch " + std::to_string(m.micro) + " of step " + std::to_string(m.step) +
                                    ": a step has at most " + std::to_string(SplitPart::kMaxMicroBatches));
        }
      } else if (!pending_.empty()) {
        // Its forward would take the place of activations a backward still needs.
        return Status::Corruption("an evaluation forward while step " + std::to_string(pending_.front().step) +
                                  " waits for gradients");
      }
      FM_RETURN_IF_ERROR(Gather(m.indices, "forward", m.step));
      const auto rows = static_cast<int64_t>(m.indices.size());
      // A training micro-batch keeps its activations in its own slot until its gradients come.
      FM_RETURN_IF_ERROR(
          bottom_->Forward(input_.data(), rows, m.training, Seed(m.step, m.micro), m.training ? Slot(m.step, m.micro) : 0));
      SplitMessage a;
      a.type = SplitMessageType::kActivations;
      a.training = m.training;
      a.wire = options_.wire;
      a.step = m.step;
      a.micro = m.micro;
      a.rows = static_cast<uint32_t>(rows);
      a.cols = static_cast<uint32_t>(bottom_->out_cols());
      a.values.assign(bottom_->output(), bottom_->output() + rows * bottom_->out_cols());
      if (m.training && options_.noise > 0) {
        for (float& v : a.values) v += static_cast<float>(noise_rng_.Normal(0.0, options_.noise));
      }
      if (m.training) {
        if (pending_.empty() || pending_.back().step != m.step) pending_.push_back(PendingStep{m.step, {}, false});
        pending_.back().micro[m.micro] = m.indices;
      }
      out->push_back(std::move(a));
      return Status::OK();
    }
    case SplitMessageType::kGradients: {
      // Gradients come for the oldest pending step first (the label party finishes a step
      // before it starts on the next).
      PendingStep* ps = pending_.empty() || m.step != pending_.front().step ? nullptr : &pending_.front();
      auto it = ps ? ps->micro.find(m.micro) : std::map<uint32_t, std::vector<uint64_t>>::iterator();
      if (ps == nullptr || it == ps->micro.end()) {
        return Status::Corruption("gradients for step " + std::to_string(m.step) + " micro-batch " +
                                  std::to_string(m.micro) + ", which this party was not asked to compute" +
                                  (pending_.empty() ? std::string()
                                                    : " (step " + std::to_string(pending_.front().step) + " waits)"));
      }
      if (m.rows != it->second.size() || m.cols != bottom_->out_cols()) {
        return Status::Corruption("gradients of " + std::to_string(m.rows) + " x " + std::to_string(m.cols) +
                                  " for activations of " + std::to_string(it->second.size()) + " x " +
                                  std::to_string(bottom_->out_cols()));
      }
      ps->gradients_started = true;
      FM_RETURN_IF_ERROR(bottom_->BackwardSlot(Slot(m.step, m.micro), m.values.data()));
      ps->micro.erase(it);
      if (ps->micro.empty()) {
        bottom_->Step();
        ++steps_completed_;
        pending_.pop_front();
      }
      return Status::OK();
    }
    case SplitMessageType::kDone:
      if (!pending_.empty() || m.step != steps_completed_) {
        return Status::Corruption("the label party finished after " + std::to_string(m.step) +
                                  " steps; this party completed " + std::to_string(steps_completed_) +
                                  (pending_.empty() ? "" : " and waits for gradients"));
      }
      done_ = true;
      return Status::OK();
    case SplitMessageType::kActivations:
    case SplitMessageType::kCheckpointed:
    case SplitMessageType::kHello:
    case SplitMessageType::kResumed:
    case SplitMessageType::kPart:
      return Status::Corruption(std::string("a ") + SplitMessageTypeName(m.type) + " message sent to a feature party");
    case SplitMessageType::kCheckpoint:
    case SplitMessageType::kResume:
      return Status::Corruption(std::string("a ") + SplitMessageTypeName(m.type) + " message outside a job");
  }
  return Status::Corruption("unknown split message");
}

}  // namespace fedmesh::vertical
