#include "core/codec/error_feedback.h"

#include <cmath>

#include "core/codec/checks.h"

namespace fedmesh::codec {

Result<FeedbackMode> ParseFeedbackMode(std::string_view text) {
  if (text == "auto") return FeedbackMode::kAuto;
  if (text == "off") return FeedbackMode::kOff;
  if (text == "residual") return FeedbackMode::kResidual;
  if (text == "dgc") return FeedbackMode::kDgc;
  return Status::InvalidArgument("error feedback mode \"" + std::string(text) +
                                 "\" is unknown; use auto, off, residual or dgc");
}

std::string_view FeedbackModeName(FeedbackMode mode) {
  switch (mode) {
    case FeedbackMode::kAuto: return "auto";
    case FeedbackMode::kOff: return "off";
    case FeedbackMode::kResidual: return "residual";
    case FeedbackMode::kDgc: return "dgc";
  }
  return "unknown";
}

Result<ErrorFeedback> ErrorFeedback::Create(Chain chain, ErrorFeedbackOptions options) {
  if (!(options.dgc_momentum >= 0.0 && options.dgc_momentum < 1.0)) {
    return Status::InvalidArgument("dgc momentum is " + std::to_string(options.dgc_momentum) +
                                   "; it must be in [0, 1)");
  }
  FeedbackMode mode = options.mode;
  if (mode == FeedbackMode::kAuto) {
    mode = (chain.lossless() || chain.unbiased()) ? FeedbackMode::kOff : FeedbackMode::kResidual;
  }
  return ErrorFeedback(std::move(chain), mode, static_cast<float>(options.dgc_momentum));
}

Status ErrorFeedback::Restore(std::vector<float> residual, std::vector<float> velocity) {
  if (!residual.empty() && !velocity.empty() && residual.size() != velocity.size()) {
    return Status::InvalidArgument("error feedback state: residual has " +
                                   std::to_string(residual.size()) + " values but velocity has " +
                                   std::to_string(velocity.size()));
  }
  if (!AllFinite(residual) || !AllFinite(velocity)) {
    return Status::InvalidArgument("error feedback state holds a non-finite value");
  }
  residual_ = std::move(residual);
  velocity_ = std::move(velocity);
  return Status::OK();
}

Status ErrorFeedback::Encode(std::span<const float> update, uint64_t seed,
                             std::vector<uint8_t>* bytes, std::vector<float>* sent) {
  const size_t n = update.size();
  if (mode_ == FeedbackMode::kOff) {
    FM_RETURN_IF_ERROR(chain_.Encode(update, seed, bytes));
    if (sent != nullptr) {
      sent->resize(n);
      FM_RETURN_IF_ERROR(chain_.Decode(*bytes, *sent));
    }
    return Status::OK();
  }
  std::vector<float> decoded(n);
  for (const std::vector<float>* state : {&residual_, &velocity_}) {
    if (!state->empty() && state->size() != n) {
      return Status::InvalidArgument(
          "the update has " + std::to_string(n) + " values but the error-feedback state has " +
          std::to_string(state->size()) + "; the model changed size");
    }
  }
  std::vector<float> velocity;
  std::vector<float> compensated(update.begin(), update.end());
  if (mode_ == FeedbackMode::kDgc) {
    velocity = velocity_.empty() ? std::vector<float>(n, 0.0f) : velocity_;
    for (size_t i = 0; i < n; ++i) velocity[i] = momentum_ * velocity[i] + update[i];
    compensated = velocity;
  }
  if (!residual_.empty()) {
    for (size_t i = 0; i < n; ++i) compensated[i] += residual_[i];
  }
  FM_RETURN_IF_ERROR(chain_.Encode(compensated, seed, bytes));
  FM_RETURN_IF_ERROR(chain_.Decode(*bytes, decoded));
  // compensated becomes the new residual in place.
  for (size_t i = 0; i < n; ++i) compensated[i] -= decoded[i];
  if (mode_ == FeedbackMode::kDgc) {
    for (size_t i = 0; i < n; ++i) {
      if (decoded[i] != 0.0f) velocity[i] = 0.0f;
    }
    velocity_ = std::move(velocity);
  }
  residual_ = std::move(compensated);
  if (sent != nullptr) *sent = std::move(decoded);
  return Status::OK();
}

}  // namespace fedmesh::codec
