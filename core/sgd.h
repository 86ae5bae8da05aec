// Sgd: stochastic gradient descent with momentum and weight decay over the model's flat
// buffers, in one fused backend pass per step. Optionally adds the FedProx proximal term
// mu/2 * ||w - w_global||^2 (its gradient mu * (w - w_global)) against an anchor the
// federated client sets to the round's global model.
// Thread-safety: one thread at a time, like the model it steps.
#pragma once

#include <span>
#include <vector>

#include "core/backend.h"
#include "core/model.h"
#include "core/status.h"

namespace fedmesh {

struct SgdOptions {
  float lr = 0.01f;           // learning rate, > 0
  float momentum = 0.0f;      // heavy-ball momentum in [0, 1)
  float weight_decay = 0.0f;  // L2 penalty coefficient, >= 0
  float prox_mu = 0.0f;       // FedProx mu, >= 0; used only while an anchor is set
};

Status ValidateSgdOptions(const SgdOptions& o);

// True when a step with these options is plain w -= lr * grad: no momentum, no weight
// decay and no prox term in effect (prox_anchored: an anchor is set). Trainers then fuse
// the step into the backward pass (Model::ForwardBackwardSgd, the BatchedTrainer).
inline bool IsPlainSgd(const SgdOptions& o, bool prox_anchored) {
  return o.momentum == 0.0f && o.weight_decay == 0.0f && !(prox_anchored && o.prox_mu != 0.0f);
}

class Sgd {
 public:
  // REQUIRES: ValidateSgdOptions(options).ok().
  Sgd(Model* model, const SgdOptions& options);

  // w <- w - lr * v after v <- momentum * v + grad + wd * w (+ prox term).
  void Step();
  const SgdOptions& options() const { return options_; }
  // True when the step is plain w -= lr * grad (no momentum, weight decay or active prox
  // term): the trainer then fuses it into the backward pass (Model::ForwardBackwardSgd)
  // and skips Step(). The velocity is then left as it is; with momentum 0 it is not state.
  bool plain() const { return IsPlainSgd(options_, has_anchor_); }
  void set_lr(float lr) { options_.lr = lr; }

  // Sets the FedProx anchor w_global (host memory, num_params floats).
  Status SetProxAnchor(std::span<const float> w_global);
  void ClearProxAnchor() { has_anchor_ = false; }

  // Momentum state, for node checkpoints.
  std::vector<float> GetVelocity() const;
  Status SetVelocity(std::span<const float> v);
  void ResetVelocity();

 private:
  Model* model_;
  SgdOptions options_;
  DeviceBuffer<float> velocity_;
  DeviceBuffer<float> anchor_;
  bool has_anchor_ = false;
};

}  // namespace fedmesh
