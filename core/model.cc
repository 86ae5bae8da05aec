#include "core/model.h"

#include <cmath>
#include <cstring>

#include "core/check.h"

namespace fedmesh {

Result<std::unique_ptr<Model>> Model::Create(std::string name, Backend* backend,
                                             SampleShape input_shape, int num_classes,
                                             std::vector<std::unique_ptr<Layer>> layers) {
  std::unique_ptr<Model> m(new Model());
  m->name_ = std::move(name);
  m->backend_ = backend;
  m->input_shape_ = input_shape;
  m->num_classes_ = num_classes;
  m->layers_ = std::move(layers);
  if (m->layers_.empty()) return Status::InvalidArgument("a model needs at least one layer");
  SampleShape shape = input_shape;
  for (size_t i = 0; i < m->layers_.size(); ++i) {
    m->shapes_.push_back(shape);
    auto out = m->layers_[i]->Configure(shape);
    if (!out.ok()) {
      return out.status().WithContext("model '" + m->name_ + "' layer " + std::to_string(i));
    }
    shape = *out;
    m->num_params_ += m->layers_[i]->num_params();
  }
  m->shapes_.push_back(shape);
  if (shape != SampleShape{num_classes}) {
    return Status::InvalidArgument("model '" + m->name_ + "' ends in shape " +
                                   ShapeToString(shape) + " but the data has " +
                                   std::to_string(num_classes) + " classes");
  }
  m->params_ = DeviceBuffer<float>(backend, m->num_params_);
  m->grads_ = DeviceBuffer<float>(backend, m->num_params_);
  backend->Fill(m->grads_.data(), m->num_params_, 0.0f);
  size_t offset = 0;
  for (auto& layer : m->layers_) {
    layer->Bind(m->params_.data() + offset, m->grads_.data() + offset);
    m->param_offsets_.push_back(offset);
    offset += layer->num_params();
  }
  return m;
}

std::string Model::Summary() const {
  std::string s = name_ + ": input " + ShapeToString(input_shape_) + ", " +
                  std::to_string(num_params_) + " parameters\n";
  for (size_t i = 0; i < layers_.size(); ++i) {
    s += "  " + layers_[i]->Describe() + " -> " + ShapeToString(shapes_[i + 1]) + " (" +
         std::to_string(layers_[i]->num_params()) + " params)\n";
  }
  return s;
}

void Model::InitParams(uint64_t seed) {
  Rng rng(seed);
  std::vector<float> host(num_params_);
  size_t offset = 0;
  for (auto& layer : layers_) {
    layer->InitParams(rng, host.data() + offset);
    offset += layer->num_params();
  }
  backend_->CopyFromHost(params_.data(), host.data(), host.size() * sizeof(float));
}

std::vector<float> Model::GetParams() const {
  std::vector<float> out(num_params_);
  backend_->CopyToHost(out.data(), params_.data(), out.size() * sizeof(float));
  return out;
}

std::vector<float> Model::GetGrads() const {
  std::vector<float> out(num_params_);
  backend_->CopyToHost(out.data(), grads_.data(), out.size() * sizeof(float));
  return out;
}

Status Model::SetParams(std::span<const float> values) {
  if (values.size() != num_params_) {
    return Status::InvalidArgument("model '" + name_ + "' has " + std::to_string(num_params_) +
                                   " parameters, got " + std::to_string(values.size()));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return Status::InvalidArgument("parameter " + std::to_string(i) + " is not finite");
    }
  }
  backend_->CopyFromHost(params_.data(), values.data(), values.size() * sizeof(float));
  return Status::OK();
}

void Model::Reserve(int max_batch) {
  FM_CHECK_GT(max_batch, 0);
  if (max_batch <= max_batch_) return;
  max_batch_ = max_batch;
  owned_.clear();
  const size_t L = layers_.size();
  auto alloc = [&](size_t floats) {
    owned_.emplace_back(backend_, floats);
    return owned_.back().data();
  };
  acts_.assign(L + 1, nullptr);
  acts_[0] = alloc(ShapeSize(input_shape_) * max_batch);
  for (size_t i = 0; i < L; ++i) {
    acts_[i + 1] = layers_[i]->is_view() ? acts_[i] : alloc(ShapeSize(shapes_[i + 1]) * max_batch);
  }
  // The gradient w.r.t. a layer's input is needed only if some earlier layer has
  // parameters; skipping it saves the first layer's largest GEMM.
  std::vector<bool> needs_dx(L, false);
  bool params_before = false;
  for (size_t i = 0; i < L; ++i) {
    needs_dx[i] = params_before;
    params_before = params_before || layers_[i]->num_params() > 0;
  }
  dacts_.assign(L + 1, nullptr);
  dacts_[L] = alloc(ShapeSize(shapes_[L]) * max_batch);
  for (size_t i = L; i-- > 0;) {
    if (!needs_dx[i]) break;
    dacts_[i] = layers_[i]->is_view() ? dacts_[i + 1] : alloc(ShapeSize(shapes_[i]) * max_batch);
  }
  labels_ = DeviceBuffer<int32_t>(backend_, max_batch);
  staging_.resize(ShapeSize(input_shape_) * max_batch);
  staging_labels_.resize(max_batch);
  for (auto& layer : layers_) layer->Reserve(backend_, max_batch);
}

Status Model::CheckCompatible(const Dataset& data) const {
  if (data.sample_shape != input_shape_ && !(input_shape_.size() == 1 &&
                                             data.sample_size() == ShapeSize(input_shape_))) {
    return Status::InvalidArgument("data samples have shape " + ShapeToString(data.sample_shape) +
                                   " but model '" + name_ + "' expects " +
                                   ShapeToString(input_shape_));
  }
  if (data.num_classes > num_classes_) {
    return Status::InvalidArgument("data has " + std::to_string(data.num_classes) +
                                   " classes but model '" + name_ + "' outputs " +
                                   std::to_string(num_classes_));
  }
  for (int32_t y : data.labels) {
    if (y < 0 || y >= num_classes_) {
      return Status::InvalidArgument("label " + std::to_string(y) + " is outside [0, " +
                                     std::to_string(num_classes_) + ")");
    }
  }
  return Status::OK();
}

void Model::LoadBatch(const Dataset& data, const uint32_t* indices, int batch) {
  FM_CHECK_LE(batch, max_batch_);
  const size_t s = data.sample_size();
  // Gathered straight into the input on a host-memory backend; staged for a device.
  float* dst = backend_->host_memory() ? acts_[0] : staging_.data();
  for (int i = 0; i < batch; ++i) {
    std::memcpy(dst + i * s, data.sample(indices[i]), s * sizeof(float));
    staging_labels_[i] = data.labels[indices[i]];
  }
  if (dst != acts_[0]) backend_->CopyFromHost(acts_[0], dst, s * batch * sizeof(float));
  backend_->CopyFromHost(labels_.data(), staging_labels_.data(), batch * sizeof(int32_t));
}

void Model::LoadContiguousBatch(const Dataset& data, size_t first, int batch) {
  FM_CHECK_LE(batch, max_batch_);
  const size_t s = data.sample_size();
  backend_->CopyFromHost(acts_[0], data.sample(first), s * batch * sizeof(float));
  backend_->CopyFromHost(labels_.data(), data.labels.data() + first, batch * sizeof(int32_t));
}

void Model::Forward(int batch, bool training, uint64_t seed) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Forward(*backend_, acts_[i], acts_[i + 1], batch, training,
                        SplitMix64(seed + i));
  }
}

Backend::LossResult Model::ForwardWithLossGradient(int batch, uint64_t seed) {
  FM_CHECK_LE(batch, max_batch_);
  Forward(batch, /*training=*/true, seed);
  const size_t L = layers_.size();
  return backend_->SoftmaxCrossEntropy(acts_[L], labels_.data(), batch, num_classes_, dacts_[L]);
}

Backend::LossResult Model::ForwardBackward(int batch, uint64_t seed) {
  const auto loss = ForwardWithLossGradient(batch, seed);
  for (size_t i = layers_.size(); i-- > 0;) {
    layers_[i]->Backward(*backend_, acts_[i], acts_[i + 1], dacts_[i + 1], dacts_[i], batch);
  }
  return loss;
}

Backend::LossResult Model::ForwardBackwardSgd(int batch, uint64_t seed, float lr) {
  const auto loss = ForwardWithLossGradient(batch, seed);
  for (size_t i = layers_.size(); i-- > 0;) {
    Layer& layer = *layers_[i];
    if (layer.BackwardSgd(*backend_, acts_[i], acts_[i + 1], dacts_[i + 1], dacts_[i], batch, lr)) {
      continue;
    }
    layer.Backward(*backend_, acts_[i], acts_[i + 1], dacts_[i + 1], dacts_[i], batch);
    if (const size_t n = layer.num_params(); n > 0) {
      backend_->SgdStep(params_.data() + param_offsets_[i], grads_.data() + param_offsets_[i],
                        /*velocity=*/nullptr, nullptr, n, SgdStepParams{.lr = lr});
    }
  }
  return loss;
}

Backend::LossResult Model::Evaluate(int batch) {
  FM_CHECK_LE(batch, max_batch_);
  Forward(batch, /*training=*/false, 0);
  return backend_->SoftmaxCrossEntropy(acts_.back(), labels_.data(), batch, num_classes_,
                                       nullptr);
}

}  // namespace fedmesh
