// Model::ForwardBackwardClipped: DP-SGD's per-example clipping (core/model.h). Layer models
// get each example's gradient norm without a per-example gradient where the layer allows
// (Dense) and from one batched pass of per-example gradients where it does not (Conv2d);
// graph models use GraphModel::ClippedBackward's rules per op where every parameterised
// node has one, and run their examples one at a time otherwise.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/graph/graph_model.h"
#include "core/layers/conv2d.h"
#include "core/layers/dense.h"
#include "core/model.h"

namespace fedmesh {

using graph::DpClipFactor;

const graph::Node* Model::BatchStatisticsNode() const {
  if (graph_) {
    for (const auto& node : graph_->graph().nodes)
      if (node.op_type == "BatchNormalization") return &node;
  }
  return nullptr;
}

Status Model::SupportsPerExampleClipping() const {
  if (imported_graph()) {
    if (const graph::Node* bn = BatchStatisticsNode()) {
      return Status::InvalidArgument(
          "dp-sgd: model '" + name_ + "' has BatchNormalization (node '" + bn->name +
          "'), which mixes the examples of a batch, so no example has a gradient of its own; "
          "use LayerNormalization or GroupNorm, or train without [privacy] mode = \"dp-sgd\"");
    }
  }
  for (const auto& layer : layers_) {
    if (layer->num_params() == 0 || dynamic_cast<const Dense*>(layer.get()) != nullptr ||
        dynamic_cast<const Conv2d*>(layer.get()) != nullptr) {
      continue;
    }
    return Status::Unimplemented("dp-sgd: per-example clipping runs on Dense and Conv2d layers "
                                 "in this version; model '" + name_ + "' has " +
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
  if (imported_graph()) return GraphForwardBackwardClipped(batch, seed, clip, norms);
  if (graph_) {
    // A built-in on the graph: its layers (bound to the same flat buffers) take the
    // loaded batch, loaded into them (set_clipped_passes) or into the graph's input, which
    // holds the samples in the layers' layout.
    EnsureLayerBuffers();
    if (!clipped_passes_)
      std::memcpy(acts_[0], graph_->input(0, batch), ShapeSize(input_shape_) * batch * sizeof(float));
    layer_pass_ = true;
  }
  struct EndLayerPass {
    bool* flag;
    ~EndLayerPass() { *flag = false; }
  } end_layer_pass{&layer_pass_};
  // Forward, then backward for the activations' gradients; the parameter gradients are
  // made below from the clipped examples (a Dense layer's is not also made unclipped here).
  const Backend::LossResult loss = ForwardWithLossGradient(batch, seed);
  dp_conv_rows_.resize(layers_.size());
  for (size_t i = layers_.size(); i-- > 0;) {
    if (auto* dense = dynamic_cast<Dense*>(layers_[i].get())) {
      if (dacts_[i] != nullptr) dense->InputGrad(*backend_, dacts_[i + 1], dacts_[i], batch);
    } else if (auto* conv = dynamic_cast<Conv2d*>(layers_[i].get())) {
      dp_conv_rows_[i].resize(size_t(batch) * conv->num_params());
      FM_RETURN_IF_ERROR(conv->PerExampleBackward(*backend_, acts_[i], dacts_[i + 1], dacts_[i],
                                                  batch, dp_conv_rows_[i].data()));
    } else {
      layers_[i]->Backward(*backend_, acts_[i], acts_[i + 1], dacts_[i + 1], dacts_[i], batch);
    }
  }
  // dacts_ hold d(mean loss)/d(activation); example j's own loss gradient is batch times
  // row j, so every squared norm below is scaled by batch^2.
  const double b = batch;
  dp_sq_norms_.assign(batch, 0.0);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (const auto* dense = dynamic_cast<const Dense*>(layers_[i].get())) {
      const float* x = acts_[i];
      const float* dy = dacts_[i + 1];
      const size_t in = dense->in(), out = dense->out();
      for (int j = 0; j < batch; ++j) {
        double xx = 0.0, gg = 0.0;
        for (const float* v = x + j * in; v < x + (j + 1) * in; ++v) xx += double(*v) * *v;
        for (const float* v = dy + j * out; v < dy + (j + 1) * out; ++v) gg += double(*v) * *v;
        // ||dy_j x_j^T||^2 + ||dy_j||^2 (the bias).
        dp_sq_norms_[j] += b * b * gg * (xx + 1.0);
      }
    } else if (dynamic_cast<const Conv2d*>(layers_[i].get()) != nullptr) {
      const size_t len = layers_[i]->num_params();
      for (int j = 0; j < batch; ++j) {
        double gg = 0.0;
        for (const float* v = &dp_conv_rows_[i][j * len]; v < &dp_conv_rows_[i][(j + 1) * len]; ++v)
          gg += double(*v) * *v;
        dp_sq_norms_[j] += b * b * gg;
      }
    }
  }
  std::vector<float> scale(batch);
  for (int j = 0; j < batch; ++j) {
    const double norm = std::sqrt(dp_sq_norms_[j]);
    if (norms != nullptr) norms[j] = static_cast<float>(norm);
    scale[j] = static_cast<float>(b) * DpClipFactor(norm, clip);
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (auto* dense = dynamic_cast<Dense*>(layers_[i].get())) {
      const float* dy = dacts_[i + 1];
      const size_t out = dense->out();
      dp_scaled_dy_.resize(size_t(batch) * out);
      for (int j = 0; j < batch; ++j) {
        for (size_t k = 0; k < out; ++k) dp_scaled_dy_[j * out + k] = scale[j] * dy[j * out + k];
      }
      dense->ParamGrads(*backend_, acts_[i], dp_scaled_dy_.data(), batch);
    } else if (dynamic_cast<Conv2d*>(layers_[i].get()) != nullptr) {
      // The layer's gradient slice := sum_j scale_j * row_j (its layout is the rows').
      const int len = static_cast<int>(layers_[i]->num_params());
      cblas_sgemv(CblasRowMajor, CblasTrans, batch, len, 1.0f, dp_conv_rows_[i].data(), len,
                  scale.data(), 1, 0.0f, grads_ptr_ + param_offsets_[i], 1);
    }
  }
  return loss;
}

// A graph whose parameterised nodes all have per-example norm rules (Gemm, LayerNorm) is
// clipped in one batched pass (GraphModel::ClippedBackward). Otherwise each example runs
// forward and backward alone (batch 1) and its gradient is clipped and added as it comes:
// exact for every op that keeps examples apart, at the speed of batch-1 passes.
Result<Backend::LossResult> Model::GraphForwardBackwardClipped(int batch, uint64_t seed,
                                                               double clip, float* norms) {
  if (graph_->PerExampleRulesCover().ok()) {
    const Backend::LossResult loss = ForwardWithLossGradient(batch, seed);
    FM_RETURN_IF_ERROR(status_);
    const Status s = graph_->ClippedBackward(clip, norms);
    if (s.ok()) return loss;
    if (s.code() != StatusCode::kUnimplemented) return s;
  }
  FM_RETURN_IF_ERROR(graph_->Plan(1).WithContext("dp-sgd: model '" + name_ +
                                                 "' runs one example at a time"));
  const float* all = graph_->input(0, batch);
  float* one = graph_->input(0, 1);
  const graph::Dims& d1 = graph_->input_dims(0, 1);
  size_t s = 1;
  for (int64_t v : d1) s *= static_cast<size_t>(v);
  const size_t n = num_trainable_;
  dp_sum_.assign(n, 0.0f);
  // The batch's labels and targets, read back into row 0 for each example's own loss.
  const std::vector<int32_t> labels(labels_.data(), labels_.data() + batch);
  const std::vector<int32_t> host_labels(staging_labels_.begin(),
                                         staging_labels_.begin() + (host_loss_ ? batch : 0));
  const std::vector<float> targets = staging_targets_;
  const size_t tdim = batch > 0 ? targets.size() / batch : 0;
  Backend::LossResult total{0.0, 0};
  for (int j = 0; j < batch; ++j) {
    std::memcpy(one, all + j * s, s * sizeof(float));
    labels_.data()[0] = labels[j];
    if (host_loss_) staging_labels_[0] = host_labels[j];
    if (tdim > 0) std::memcpy(staging_targets_.data(), &targets[j * tdim], tdim * sizeof(float));
    const Backend::LossResult r = ForwardWithLossGradient(1, SplitMix64(seed + j));
    FM_RETURN_IF_ERROR(status_);
    graph_->Backward();
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    const float* g = graph_->grads();
    double sq = 0.0;
    for (size_t k = 0; k < n; ++k) sq += double(g[k]) * g[k];
    const double norm = std::sqrt(sq);
    if (norms != nullptr) norms[j] = static_cast<float>(norm);
    cblas_saxpy(static_cast<int>(n), DpClipFactor(norm, clip), g, 1, dp_sum_.data(), 1);
  }
  // Row 0 back as loaded; the clipped sum into grads() (state gradients stay zero).
  if (batch > 0) {
    labels_.data()[0] = labels[0];
    if (host_loss_) staging_labels_[0] = host_labels[0];
    if (tdim > 0) std::memcpy(staging_targets_.data(), targets.data(), tdim * sizeof(float));
  }
  std::copy(dp_sum_.begin(), dp_sum_.end(), grads_ptr_);
  return total;
}

}  // namespace fedmesh
