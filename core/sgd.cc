#include "core/sgd.h"

#include <cmath>
#include <string>

#include "core/check.h"

namespace fedmesh {

Status ValidateSgdOptions(const SgdOptions& o) {
  if (!(o.lr > 0.0f) || !std::isfinite(o.lr)) {
    return Status::InvalidArgument("learning rate must be a positive number, got " +
                                   std::to_string(o.lr));
  }
  if (!(o.momentum >= 0.0f && o.momentum < 1.0f)) {
    return Status::InvalidArgument("momentum must be in [0, 1), got " + std::to_string(o.momentum));
  }
  if (!(o.weight_decay >= 0.0f) || !std::isfinite(o.weight_decay)) {
    return Status::InvalidArgument("weight decay must be >= 0, got " +
                                   std::to_string(o.weight_decay));
  }
  if (!(o.prox_mu >= 0.0f) || !std::isfinite(o.prox_mu)) {
    return Status::InvalidArgument("FedProx mu must be >= 0, got " + std::to_string(o.prox_mu));
  }
  return Status::OK();
}

Sgd::Sgd(Model* model, const SgdOptions& options)
    : model_(model),
      options_(options),
      velocity_(&model->backend(), model->num_params()) {
  FM_CHECK(ValidateSgdOptions(options).ok());
  ResetVelocity();
}

void Sgd::Step() {
  SgdStepParams p{options_.lr, options_.momentum, options_.weight_decay, options_.prox_mu};
  model_->backend().SgdStep(model_->params(), model_->grads(), velocity_.data(),
                            has_anchor_ ? anchor_.data() : nullptr, model_->num_trainable(), p);
}

Status Sgd::SetProxAnchor(std::span<const float> w_global) {
  if (w_global.size() != model_->num_params()) {
    return Status::InvalidArgument("FedProx anchor has " + std::to_string(w_global.size()) +
                                   " values, the model has " +
                                   std::to_string(model_->num_params()));
  }
  if (anchor_.size() != w_global.size()) anchor_ = DeviceBuffer<float>(&model_->backend(), w_global.size());
  model_->backend().CopyFromHost(anchor_.data(), w_global.data(), w_global.size() * sizeof(float));
  has_anchor_ = true;
  return Status::OK();
}

std::vector<float> Sgd::GetVelocity() const {
  std::vector<float> v(velocity_.size());
  model_->backend().CopyToHost(v.data(), velocity_.data(), v.size() * sizeof(float));
  return v;
}

Status Sgd::SetVelocity(std::span<const float> v) {
  if (v.size() != velocity_.size()) {
    return Status::InvalidArgument("optimizer state has " + std::to_string(v.size()) +
                                   " values, the model has " + std::to_string(velocity_.size()));
  }
  model_->backend().CopyFromHost(velocity_.data(), v.data(), v.size() * sizeof(float));
  return Status::OK();
}

void Sgd::ResetVelocity() { model_->backend().Fill(velocity_.data(), velocity_.size(), 0.0f); }

}  // namespace fedmesh
