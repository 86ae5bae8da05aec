// Error feedback for lossy codec chains, kept on the sender (a node): what the chain drops
// from one update is remembered as a residual and added to the next, so nothing is lost,
// only delayed (Seide et al. 2014; Karimireddy et al. 2019, "EF-SGD"):
//
//   residual  c = u + r;  send E(c);  r = c - D(E(c))
//   dgc       v = m v + u;  c = r + v;  send E(c);  r = c - D(E(c));  v[i] = 0 wherever
//             D(E(c))[i] != 0  (Deep Gradient Compression's momentum correction and
//             momentum factor masking, Lin et al. 2018; for top-k chains)
//   off       send E(u)
//
// Invariant (residual mode): the sum of everything sent plus the residual equals the sum of
// the true updates, up to float rounding. The residual is computed from the decode of the
// very bytes sent, so it also catches quantisation error. "auto" picks residual for lossy
// chains that are biased (topk, fp16, bf16, int8) and off for lossless and unbiased ones
// (randk, qsgd: feeding back their variance does not help and rescaled randk would
// amplify it).
// Thread-safety: not thread-safe; one sender owns one ErrorFeedback.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec/codec.h"
#include "core/status.h"

namespace fedmesh::codec {

enum class FeedbackMode { kAuto, kOff, kResidual, kDgc };

// "auto", "off", "residual", "dgc". InvalidArgument listing them otherwise.
Result<FeedbackMode> ParseFeedbackMode(std::string_view text);
std::string_view FeedbackModeName(FeedbackMode mode);

struct ErrorFeedbackOptions {
  // Default: kAuto (residual for biased lossy chains, off otherwise).
  FeedbackMode mode = FeedbackMode::kAuto;
  // dgc only: momentum m of the accumulated velocity. Default: 0.9 (the DGC paper's).
  // Must be in [0, 1).
  double dgc_momentum = 0.9;
};

class ErrorFeedback {
 public:
  // InvalidArgument for dgc_momentum outside [0, 1).
  static Result<ErrorFeedback> Create(Chain chain, ErrorFeedbackOptions options);

  // Encodes `update` (compensated as above) into *bytes; *sent (may be null) receives
  // D(bytes), what the receiver will see. The state changes only on success.
  // InvalidArgument when the update's size differs from the state's (restore or earlier
  // updates), or when the chain refuses the values (non-finite).
  Status Encode(std::span<const float> update, uint64_t seed, std::vector<uint8_t>* bytes,
                std::vector<float>* sent = nullptr);

  const Chain& chain() const { return chain_; }
  // The resolved mode: never kAuto.
  FeedbackMode mode() const { return mode_; }
  // Empty until the first Encode (or Restore) in residual and dgc modes.
  const std::vector<float>& residual() const { return residual_; }
  const std::vector<float>& velocity() const { return velocity_; }  // dgc only
  // Resumes from saved state (e.g. after a restart); empty vectors mean none. The sizes
  // must agree with each other when both are present. Non-finite values are refused.
  Status Restore(std::vector<float> residual, std::vector<float> velocity);

 private:
  ErrorFeedback(Chain chain, FeedbackMode mode, float momentum)
      : chain_(std::move(chain)), mode_(mode), momentum_(momentum) {}

  Chain chain_;
  FeedbackMode mode_;
  float momentum_;
  std::vector<float> residual_;
  std::vector<float> velocity_;
};

}  // namespace fedmesh::codec
