// Model::ForwardBackwardClipped: DP-SGD's per-example clipping for Dense models (core/model.h).
#include <algorithm>
#include <cmath>

#include "core/graph/graph_model.h"
#include "core/layers/dense.h"
#include "core/model.h"

namespace fedmesh {

Status Model::SupportsPerExampleClipping() const {
  if (graph_) {
    for (const auto& node : graph_->graph().nodes) {
      if (node.op_type == "BatchNormalization") {
        return Status::InvalidArgument(
            "dp-sgd: model '" + name_ + "' has BatchNormalization (node '" + node.name +
            "'), which mixes the examples of a batch, so no example has a gradient of its own; "
            "use LayerNormalization or GroupNorm, or train without [privacy] mode = \"dp-sgd\"");
      }
    }
    return Status::Unimplemented("dp-sgd: per-example clipping runs on Dense models (logreg, "
                                 "mlp) in this version, not on ONNX graph models such as '" +
                                 name_ + "'");
  }
  for (const auto& layer : layers_) {
    if (layer->num_params() == 0 || dynamic_cast<const Dense*>(layer.get()) != nullptr) continue;
    return Status::Unimplemented("dp-sgd: per-example clipping runs on Dense models (logreg, "
                                 "mlp) in this version; model '" + name_ + "' has " +
                                 layer->Describe());
  }
  if (!backend_->host_memory()) {
    return Status::Unimplemented("dp-sgd runs on the CPU backend in this version, not on " +
                                 backend_->name() + ": use device = \"cpu\"");
  }
  if (!loss_.class_weights.empty()) {
    return Status::InvalidArgument("dp-sgd: class weights make the batch loss a weighted mean, "
                                   "so an example's share is not its own loss; drop class_weights");
  }
  return Status::OK();
}

Result<Backend::LossResult> Model::ForwardBackwardClipped(int batch, uint64_t seed, double clip,
                                                          float* norms) {
  FM_RETURN_IF_ERROR(SupportsPerExampleClipping());
  if (!(clip > 0) || !std::isfinite(clip)) {
    return Status::InvalidArgument("dp-sgd: clip must be a positive finite L2 norm");
  }
  // Forward, then backward for the activations' gradients only: a Dense layer's weight
  // gradient is made once, below, from its clipped rows (not also unclipped here).
  const Backend::LossResult loss = ForwardWithLossGradient(batch, seed);
  for (size_t i = layers_.size(); i-- > 0;) {
    if (auto* dense = dynamic_cast<Dense*>(layers_[i].get())) {
      if (dacts_[i] != nullptr) dense->InputGrad(*backend_, dacts_[i + 1], dacts_[i], batch);
    } else {
      layers_[i]->Backward(*backend_, acts_[i], acts_[i + 1], dacts_[i + 1], dacts_[i], batch);
    }
  }
  // dacts_ hold d(mean loss)/d(activation); example j's own loss gradient is batch times row j.
  const double b = batch;
  dp_sq_norms_.assign(batch, 0.0);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto* dense = dynamic_cast<const Dense*>(layers_[i].get());
    if (dense == nullptr) continue;
    const float* x = acts_[i];
    const float* dy = dacts_[i + 1];
    const size_t in = dense->in(), out = dense->out();
    for (int j = 0; j < batch; ++j) {
      double xx = 0.0, gg = 0.0;
      for (const float* v = x + j * in; v < x + (j + 1) * in; ++v) xx += double(*v) * *v;
      for (const float* v = dy + j * out; v < dy + (j + 1) * out; ++v) gg += double(*v) * *v;
      // ||dy_j x_j^T||^2 + ||dy_j||^2 (the bias), for example j's own loss (times batch).
      dp_sq_norms_[j] += b * b * gg * (xx + 1.0);
    }
  }
  std::vector<float> scale(batch);
  for (int j = 0; j < batch; ++j) {
    const double norm = std::sqrt(dp_sq_norms_[j]);
    if (norms != nullptr) norms[j] = static_cast<float>(norm);
    scale[j] = static_cast<float>(b * std::min(1.0, clip / (norm + 1e-6)));
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto* dense = dynamic_cast<Dense*>(layers_[i].get());
    if (dense == nullptr) continue;
    const float* dy = dacts_[i + 1];
    const size_t out = dense->out();
    dp_scaled_dy_.resize(size_t(batch) * out);
    for (int j = 0; j < batch; ++j) {
      for (size_t k = 0; k < out; ++k) dp_scaled_dy_[j * out + k] = scale[j] * dy[j * out + k];
    }
    dense->ParamGrads(*backend_, acts_[i], dp_scaled_dy_.data(), batch);
  }
  return loss;
}

}  // namespace fedmesh
