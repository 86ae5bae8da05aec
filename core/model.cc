#include "core/model.h"

#include <cmath>
#include <cstring>
#include <set>

#include "core/check.h"
#include "core/graph/graph_model.h"

namespace fedmesh {

Result<size_t> Model::ConfigureLayers() {
  if (layers_.empty()) return Status::InvalidArgument("a model needs at least one layer");
  shapes_.clear();
  param_offsets_.clear();
  size_t params = 0;
  SampleShape shape = input_shape_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    shapes_.push_back(shape);
    auto out = layers_[i]->Configure(shape);
    if (!out.ok()) return out.status().WithContext("model '" + name_ + "' layer " + std::to_string(i));
    shape = *out;
    param_offsets_.push_back(params);
    params += layers_[i]->num_params();
  }
  shapes_.push_back(shape);
  if (shape != SampleShape{num_classes_}) {
    return Status::InvalidArgument("model '" + name_ + "' ends in shape " + ShapeToString(shape) +
                                   " but the data has " + std::to_string(num_classes_) + " classes");
  }
  return params;
}

Result<std::unique_ptr<Model>> Model::Create(std::string name, Backend* backend,
                                             SampleShape input_shape, int num_classes,
                                             std::vector<std::unique_ptr<Layer>> layers) {
  std::unique_ptr<Model> m(new Model());
  m->name_ = std::move(name);
  m->backend_ = backend;
  m->input_shape_ = input_shape;
  m->num_classes_ = num_classes;
  m->layers_ = std::move(layers);
  FM_ASSIGN_OR_RETURN(m->num_params_, m->ConfigureLayers());
  m->num_trainable_ = m->num_params_;
  m->params_ = DeviceBuffer<float>(backend, m->num_params_);
  m->grads_ = DeviceBuffer<float>(backend, m->num_params_);
  m->params_ptr_ = m->params_.data();
  m->grads_ptr_ = m->grads_.data();
  backend->Fill(m->grads_.data(), m->num_params_, 0.0f);
  for (size_t i = 0; i < m->layers_.size(); ++i)
    m->layers_[i]->Bind(m->params_ptr_ + m->param_offsets_[i], m->grads_ptr_ + m->param_offsets_[i]);
  return m;
}

Result<std::unique_ptr<Model>> Model::CreateBuiltinOnGraph(
    std::string name, Backend* backend, SampleShape input_shape, int num_classes,
    std::vector<std::unique_ptr<Layer>> layers,
    const std::function<Result<graph::Graph>(size_t num_params)>& make_graph) {
  // The layers configured once, on a model of their own, say how many parameters the
  // graph holds; the model made from the graph then takes them over.
  Model shaped;
  shaped.name_ = name;
  shaped.input_shape_ = input_shape;
  shaped.num_classes_ = num_classes;
  shaped.layers_ = std::move(layers);
  FM_ASSIGN_OR_RETURN(const size_t n, shaped.ConfigureLayers());
  FM_ASSIGN_OR_RETURN(graph::Graph g, make_graph(n));
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateFromGraph(name, backend, std::move(g)));
  if (m->input_shape_ != input_shape || m->num_classes_ != num_classes) {
    return Status::Internal("model '" + name + "': its graph takes " + ShapeToString(m->input_shape_) +
                            " to " + std::to_string(m->num_classes_) + " outputs, its layers " +
                            ShapeToString(input_shape) + " to " + std::to_string(num_classes));
  }
  m->layers_ = std::move(shaped.layers_);
  m->shapes_ = std::move(shaped.shapes_);
  m->param_offsets_ = std::move(shaped.param_offsets_);
  if (n != m->num_params_ || m->num_trainable_ != m->num_params_) {
    return Status::Internal("model '" + name + "': its graph has " + std::to_string(m->num_params_) +
                            " parameters, its layers " + std::to_string(n));
  }
  // Each parameterised layer's slice starts where one of the graph's tensors does (its
  // weight), so a builder that drifted from the layer order fails here, not in training.
  std::set<size_t> starts;
  for (const graph::TensorSlot& s : m->graph_->param_slots()) starts.insert(s.offset);
  for (size_t i = 0; i < m->layers_.size(); ++i) {
    if (m->layers_[i]->num_params() > 0 && !starts.count(m->param_offsets_[i]))
      return Status::Internal("model '" + name + "': layer " + std::to_string(i) + " (" +
                              m->layers_[i]->Describe() + ") starts at parameter " +
                              std::to_string(m->param_offsets_[i]) + ", no tensor of its graph does");
    m->layers_[i]->Bind(m->params_ptr_ + m->param_offsets_[i], m->grads_ptr_ + m->param_offsets_[i]);
  }
  m->builtin_on_graph_ = true;
  m->initial_params_ = {};  // InitParams draws from the layers, not the graph's initializers
  return m;
}

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::CreateFromGraph(std::string name, Backend* backend,
                                                      graph::Graph g) {
  if (g.inputs.empty() || g.outputs.empty())
    return Status::InvalidArgument("model '" + name + "' needs an input and an output");
  FM_ASSIGN_OR_RETURN(auto gm, graph::GraphModel::Create(std::move(g), backend));
  std::unique_ptr<Model> m(new Model());
  m->name_ = std::move(name);
  m->backend_ = backend;
  const graph::Graph& gr = gm->graph();
  for (size_t k = 1; k < gr.inputs[0].dims.size(); ++k) {
    const int64_t d = gr.inputs[0].dims[k];
    if (d <= 0)
      return Status::InvalidArgument("model '" + m->name_ + "': input '" + gr.inputs[0].name +
                                     "' has a dynamic dimension besides the batch (" +
                                     graph::DimsToString(gr.inputs[0].dims) + ")");
    m->input_shape_.push_back(static_cast<int>(d));
  }
  FM_RETURN_IF_ERROR(gm->Plan(1).WithContext("model '" + m->name_ + "'"));
  const graph::Dims& out = gm->output_dims_for(0, 1);
  if (out.size() > 2 || out.empty() || out[0] != 1)
    return Status::InvalidArgument("model '" + m->name_ + "': output '" + gr.outputs[0].name +
                                   "' is " + graph::DimsToString(out) +
                                   " for one sample; fedmesh trains outputs of shape [N, C] or [N]");
  m->num_classes_ = out.size() == 2 ? static_cast<int>(out[1]) : 1;
  m->num_params_ = gm->num_flat();
  m->num_trainable_ = gm->num_trainable();
  m->params_ptr_ = gm->params();
  m->grads_ptr_ = gm->grads();
  m->initial_params_.resize(gm->num_flat());
  if (gm->num_flat() > 0)
    backend->CopyToHost(m->initial_params_.data(), gm->params(), gm->num_flat() * sizeof(float));
  m->graph_ = std::move(gm);
  return m;
}

const float* Model::logits() const {
  return graph_ && !logits_from_layers_ ? graph_->output(0) : acts_.back();
}

bool Model::GraphForward(int batch, bool training, uint64_t seed) {
  logits_from_layers_ = false;
  Status s = graph_->Forward(batch, training, seed);
  if (!s.ok() && status_.ok()) status_ = s.WithContext("model '" + name_ + "'");
  return s.ok();
}

Status Model::SetLoss(const LossOptions& loss) {
  FM_RETURN_IF_ERROR(ValidateLossOptions(loss));
  const bool host = loss.kind != LossKind::kCrossEntropy || !loss.class_weights.empty();
  if (loss.kind == LossKind::kBceWithLogits && num_classes_ != 1)
    return Status::InvalidArgument("bce_with_logits needs a model with one output (a logit), "
                                   "model '" + name_ + "' has " + std::to_string(num_classes_));
  if (loss.kind == LossKind::kCrossEntropy && num_classes_ < 2)
    return Status::InvalidArgument("cross_entropy needs at least 2 output classes; model '" +
                                   name_ + "' has one output: use bce_with_logits");
  if (!loss.class_weights.empty() && static_cast<int>(loss.class_weights.size()) != num_classes_)
    return Status::InvalidArgument("class_weights has " + std::to_string(loss.class_weights.size()) +
                                   " values for a model of " + std::to_string(num_classes_) +
                                   " classes");
  loss_ = loss;
  host_loss_ = host;
  return Status::OK();
}

Backend::LossResult Model::Loss(int batch, float* dlogits) {
  if (!host_loss_)
    return backend_->SoftmaxCrossEntropy(logits(), labels_.data(), batch, num_classes_, dlogits);
  if (backend_->host_memory()) {
    const LossValue v = ComputeLoss(loss_, logits(), batch, num_classes_, staging_labels_.data(),
                                    staging_targets_.data(), dlogits);
    return {v.loss_sum, v.correct};
  }
  // On a device the outputs come to the host and their gradient goes back: a batch's
  // outputs are small next to the step's other traffic.
  const size_t n = static_cast<size_t>(batch) * num_classes_;
  host_logits_.resize(n);
  backend_->CopyToHost(host_logits_.data(), logits(), n * sizeof(float));
  if (dlogits) host_dlogits_.resize(n);
  const LossValue v = ComputeLoss(loss_, host_logits_.data(), batch, num_classes_, staging_labels_.data(),
                                  staging_targets_.data(), dlogits ? host_dlogits_.data() : nullptr);
  if (dlogits) backend_->CopyFromHost(dlogits, host_dlogits_.data(), n * sizeof(float));
  return {v.loss_sum, v.correct};
}

std::string Model::Summary() const {
  if (imported_graph()) {
    std::string s = name_ + ": graph " + graph_->hash().substr(0, 16) + ", input " +
                    ShapeToString(input_shape_) + ", " + std::to_string(graph_->num_trainable()) +
                    " parameters + " + std::to_string(graph_->num_state()) + " state values\n";
    for (const auto& n : graph_->graph().nodes) s += "  " + n.op_type + " " + n.name + "\n";
    return s;
  }
  std::string s = name_ + ": input " + ShapeToString(input_shape_) + ", " +
                  std::to_string(num_params_) + " parameters" +
                  (graph_ ? ", trained as a graph of " + std::to_string(graph_->graph().nodes.size()) + " nodes" : "") +
                  "\n";
  for (size_t i = 0; i < layers_.size(); ++i) {
    s += "  " + layers_[i]->Describe() + " -> " + ShapeToString(shapes_[i + 1]) + " (" +
         std::to_string(layers_[i]->num_params()) + " params)\n";
  }
  return s;
}

void Model::InitParams(uint64_t seed) {
  if (imported_graph()) {  // the imported initializers are the initial model, whatever the seed
    backend_->CopyFromHost(params_ptr_, initial_params_.data(), initial_params_.size() * sizeof(float));
    return;
  }
  Rng rng(seed);
  std::vector<float> host(num_params_);
  size_t offset = 0;
  for (auto& layer : layers_) {
    layer->InitParams(rng, host.data() + offset);
    offset += layer->num_params();
  }
  backend_->CopyFromHost(params_ptr_, host.data(), host.size() * sizeof(float));
}

std::vector<float> Model::GetParams() const {
  std::vector<float> out(num_params_);
  backend_->CopyToHost(out.data(), params_ptr_, out.size() * sizeof(float));
  return out;
}

std::vector<float> Model::GetGrads() const {
  std::vector<float> out(num_params_);
  backend_->CopyToHost(out.data(), grads_ptr_, out.size() * sizeof(float));
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
  backend_->CopyFromHost(params_ptr_, values.data(), values.size() * sizeof(float));
  return Status::OK();
}

void Model::Reserve(int max_batch) {
  FM_CHECK_GT(max_batch, 0);
  if (max_batch <= max_batch_) return;
  max_batch_ = max_batch;
  labels_ = DeviceBuffer<int32_t>(backend_, max_batch);
  staging_labels_.resize(max_batch);
  if (graph_) {
    // Plans are made per batch size when a batch is loaded (a worker that only trains never
    // holds an evaluation-sized plan). Shapes were checked for one sample at creation; a
    // graph whose shapes hold for one sample but not for a batch (a Reshape to a fixed
    // batch) fails LoadBatch's check, a programmer-visible bug.
    if (!backend_->host_memory()) staging_.resize(ShapeSize(input_shape_) * max_batch);
    return;  // a built-in's layers get their buffers when a DP-SGD pass first needs them
  }
  ReserveLayerBuffers(max_batch);
  staging_.resize(ShapeSize(input_shape_) * max_batch);
}

void Model::ReserveLayerBuffers(int max_batch) {
  layer_batch_ = max_batch;
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
  for (auto& layer : layers_) layer->Reserve(backend_, max_batch);
}

bool Model::TakesChannelsFirst(const Dataset& data) const {
  const SampleShape& d = data.sample_shape;
  return imported_graph() && d.size() == 3 && d[2] > 1 &&
         input_shape_ == SampleShape{d[2], d[0], d[1]};
}

void Model::CopySample(const Dataset& data, size_t row, bool channels_first, float* dst) const {
  const float* src = data.sample(row);
  if (!channels_first) {
    std::memcpy(dst, src, data.sample_size() * sizeof(float));
    return;
  }
  const size_t h = data.sample_shape[0], w = data.sample_shape[1], c = data.sample_shape[2];
  const size_t plane = h * w;
  for (size_t p = 0; p < plane; ++p)
    for (size_t k = 0; k < c; ++k) dst[k * plane + p] = src[p * c + k];
}

Status Model::CheckCompatible(const Dataset& data) const {
  // A graph model takes its input as the file declares it (NCHW images): the data's
  // samples must hold as many values; multi-channel images (HWC) are transposed on the way
  // in (TakesChannelsFirst), single-channel HWC and CHW are the same bytes.
  const bool same_size = data.sample_size() == ShapeSize(input_shape_);
  if (data.sample_shape != input_shape_ && !((imported_graph() || input_shape_.size() == 1) && same_size) &&
      !(input_shape_.size() == 1 &&
                                             data.sample_size() == ShapeSize(input_shape_))) {
    return Status::InvalidArgument("data samples have shape " + ShapeToString(data.sample_shape) +
                                   " but model '" + name_ + "' expects " +
                                   ShapeToString(input_shape_));
  }
  if (imported_graph() && data.sample_shape.size() == 3 && data.sample_shape[2] > 1 &&
      data.sample_shape != input_shape_ && !TakesChannelsFirst(data)) {
    return Status::InvalidArgument("images of " + ShapeToString(data.sample_shape) +
                                   " (height x width x channels) do not fit model '" + name_ +
                                   "', whose input is " + ShapeToString(input_shape_) +
                                   "; a channels-first model takes them as [channels, height, width]");
  }
  if (IsRegression(loss_.kind)) {
    if (data.target_dim != num_classes_ ||
        data.targets.size() != data.size() * static_cast<size_t>(data.target_dim))
      return Status::InvalidArgument("loss " + std::string(LossKindName(loss_.kind)) +
                                     " needs " + std::to_string(num_classes_) +
                                     " float target(s) per sample for model '" + name_ +
                                     "', the data has " + std::to_string(data.target_dim));
    return Status::OK();
  }
  if (loss_.kind == LossKind::kBceWithLogits) {
    for (int32_t y : data.labels)
      if (y != 0 && y != 1)
        return Status::InvalidArgument("bce_with_logits needs labels 0 and 1, the data has " +
                                       std::to_string(y));
    return Status::OK();
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

void Model::StageTargets(const Dataset& data, const uint32_t* indices, size_t first, int batch) {
  if (!host_loss_ || !IsRegression(loss_.kind)) return;
  const size_t d = static_cast<size_t>(data.target_dim);
  staging_targets_.resize(d * batch);
  for (int i = 0; i < batch; ++i) {
    const size_t row = indices ? indices[i] : first + i;
    std::memcpy(staging_targets_.data() + i * d, data.target(row), d * sizeof(float));
  }
}

float* Model::InputFor(int batch) {
  if (!graph_) return acts_[0];
  if (builtin_on_graph_ && clipped_passes_) {
    EnsureLayerBuffers();
    return acts_[0];
  }
  FM_CHECK(graph_->Plan(batch).ok());
  return graph_->input(0, batch);
}

void Model::LoadBatch(const Dataset& data, const uint32_t* indices, int batch) {
  FM_CHECK_LE(batch, max_batch_);
  const size_t s = data.sample_size();
  StageTargets(data, indices, 0, batch);
  // Gathered straight into the input on a host-memory backend; staged for a device.
  float* input = InputFor(batch);
  float* dst = backend_->host_memory() ? input : staging_.data();
  const bool channels_first = TakesChannelsFirst(data);
  for (int i = 0; i < batch; ++i) {
    CopySample(data, indices[i], channels_first, dst + i * s);
    staging_labels_[i] = data.labels[indices[i]];
  }
  if (dst != input) backend_->CopyFromHost(input, dst, s * batch * sizeof(float));
  backend_->CopyFromHost(labels_.data(), staging_labels_.data(), batch * sizeof(int32_t));
}

void Model::LoadContiguousBatch(const Dataset& data, size_t first, int batch) {
  FM_CHECK_LE(batch, max_batch_);
  const size_t s = data.sample_size();
  float* input = InputFor(batch);
  StageTargets(data, nullptr, first, batch);
  if (host_loss_)
    std::memcpy(staging_labels_.data(), data.labels.data() + first, batch * sizeof(int32_t));
  if (TakesChannelsFirst(data)) {
    float* dst = backend_->host_memory() ? input : staging_.data();
    for (int i = 0; i < batch; ++i) CopySample(data, first + i, true, dst + i * s);
    if (dst != input) backend_->CopyFromHost(input, dst, s * batch * sizeof(float));
  } else {
    backend_->CopyFromHost(input, data.sample(first), s * batch * sizeof(float));
  }
  backend_->CopyFromHost(labels_.data(), data.labels.data() + first, batch * sizeof(int32_t));
}

void Model::Forward(int batch, bool training, uint64_t seed) {
  logits_from_layers_ = true;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Forward(*backend_, acts_[i], acts_[i + 1], batch, training,
                        SplitMix64(seed + i));
  }
}

Backend::LossResult Model::ForwardWithLossGradient(int batch, uint64_t seed) {
  FM_CHECK_LE(batch, max_batch_);
  if (on_graph()) {
    if (!GraphForward(batch, /*training=*/true, seed)) return {NAN, 0};
    return Loss(batch, graph_->output_grad(0));
  }
  Forward(batch, /*training=*/true, seed);
  return Loss(batch, dacts_[layers_.size()]);
}

Backend::LossResult Model::ForwardBackward(int batch, uint64_t seed) {
  const auto loss = ForwardWithLossGradient(batch, seed);
  if (graph_) {
    if (std::isnan(loss.loss_sum) && !status_.ok()) return loss;
    graph_->Backward();
    return loss;
  }
  for (size_t i = layers_.size(); i-- > 0;) {
    layers_[i]->Backward(*backend_, acts_[i], acts_[i + 1], dacts_[i + 1], dacts_[i], batch);
  }
  return loss;
}

Backend::LossResult Model::ForwardBackwardSgd(int batch, uint64_t seed, float lr) {
  if (graph_) {
    const auto loss = ForwardWithLossGradient(batch, seed);
    if (status_.ok()) graph_->BackwardSgd(lr);
    return loss;
  }
  const auto loss = ForwardWithLossGradient(batch, seed);
  for (size_t i = layers_.size(); i-- > 0;) {
    Layer& layer = *layers_[i];
    if (layer.BackwardSgd(*backend_, acts_[i], acts_[i + 1], dacts_[i + 1], dacts_[i], batch, lr)) {
      continue;
    }
    layer.Backward(*backend_, acts_[i], acts_[i + 1], dacts_[i + 1], dacts_[i], batch);
    if (const size_t n = layer.num_params(); n > 0) {
      backend_->SgdStep(params_ptr_ + param_offsets_[i], grads_ptr_ + param_offsets_[i],
                        /*velocity=*/nullptr, nullptr, n, SgdStepParams{.lr = lr});
    }
  }
  return loss;
}

Backend::LossResult Model::Evaluate(int batch) {
  FM_CHECK_LE(batch, max_batch_);
  if (graph_) {
    if (!GraphForward(batch, /*training=*/false, 0)) return {NAN, 0};
    return Loss(batch, nullptr);
  }
  Forward(batch, /*training=*/false, 0);
  return Loss(batch, nullptr);
}

}  // namespace fedmesh
