// Model: a sequential stack of layers, or a graph (an imported ONNX model, see
// core/graph/graph_model.h), whose parameters live in ONE contiguous float32
// buffer and whose gradients live in another, both in backend memory. Everything that
// moves or combines models (updates, averaging, codecs, checkpoints) works on that flat
// vector. The model owns the activation buffers for batches up to Reserve()'s size, the
// staging for one input batch, and the softmax cross-entropy head.
// Thread-safety: one thread drives a model at a time.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/data/dataset.h"
#include "core/layer.h"
#include "core/loss.h"
#include "core/status.h"

namespace fedmesh {

namespace graph {
struct Graph;
class GraphModel;
struct Node;
}  // namespace graph

class Model {
 public:
  // Configures every layer in order against `input_shape`; fails with the offending
  // layer named if shapes do not chain or the last layer's output is not {num_classes}.
  static Result<std::unique_ptr<Model>> Create(std::string name, Backend* backend,
                                               SampleShape input_shape, int num_classes,
                                               std::vector<std::unique_ptr<Layer>> layers);

  // A model that runs `g` (its initializers are the initial parameters). The graph's
  // first input is the sample batch and its first output [N, classes] the logits.
  // Fails naming the node for an unsupported op or shapes that do not hold.
  static Result<std::unique_ptr<Model>> CreateFromGraph(std::string name, Backend* backend,
                                                        graph::Graph g);
  // A built-in model that trains on the graph executor: `make_graph(parameter count of
  // the configured layers)` gives its graph in the layer layout (core/builtin_graph.h
  // BuiltinTrainingGraph), `layers` are the same model's layers (core/model_zoo.cc), bound
  // here to the graph's flat buffers. The graph trains and
  // evaluates; the layers draw the initial parameters (InitParams gives the layer model's
  // vector for the same seed) and run DP-SGD's clipping (their batched per-example rules).
  // graph_model() stays null: to the rest of fedmesh this is the built-in its spec names
  // (stores, exports, gossip and the aggregator see no graph and no graph hash).
  // Fails if the graph's flat vector is not the layers' (size) or its input not `input_shape`.
  static Result<std::unique_ptr<Model>> CreateBuiltinOnGraph(std::string name, Backend* backend,
                                                             SampleShape input_shape, int num_classes,
                                                             std::vector<std::unique_ptr<Layer>> layers,
                                                             const std::function<Result<graph::Graph>(size_t)>& make_graph);
  ~Model();

  const std::string& name() const { return name_; }
  // The graph executor of a graph model (an imported or adopted graph), else null (a
  // built-in model, on whichever executor it runs).
  graph::GraphModel* graph_model() { return builtin_on_graph_ ? nullptr : graph_.get(); }
  const graph::GraphModel* graph_model() const { return builtin_on_graph_ ? nullptr : graph_.get(); }
  // The graph executor this model runs on, also for a built-in on the graph, else null.
  const graph::GraphModel* executor_graph() const { return graph_.get(); }
  // Parameters optimizers step: all of them, except a graph model's state (BatchNorm
  // running statistics), which ends the flat vector and travels with it.
  size_t num_trainable() const { return num_trainable_; }
  // OK, or the first error a graph model's forward pass met (an embedding index out of
  // range in the data); losses of failed passes are NaN.
  const Status& status() const { return status_; }
  // The loss ForwardBackward and Evaluate compute (default: softmax cross-entropy). Losses
  // other than unweighted cross-entropy are computed on the host: refused (changing
  // nothing) for a model whose backend memory is not host memory, and for outputs that do
  // not fit (bce_with_logits needs one output column, cross_entropy at least two).
  Status SetLoss(const LossOptions& loss);
  const LossOptions& loss() const { return loss_; }
  const SampleShape& input_shape() const { return input_shape_; }
  int num_classes() const { return num_classes_; }
  size_t num_params() const { return num_params_; }
  Backend& backend() { return *backend_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // One line per layer with its output shape and parameter count.
  std::string Summary() const;

  // The flat buffers, in backend memory.
  float* params() { return params_ptr_; }
  const float* params() const { return params_ptr_; }
  float* grads() { return grads_ptr_; }
  const float* grads() const { return grads_ptr_; }

  // Deterministic initialisation: the same seed gives the same parameters everywhere.
  void InitParams(uint64_t seed);
  std::vector<float> GetParams() const;
  // Fails (and changes nothing) unless values.size() == num_params() and all are finite.
  Status SetParams(std::span<const float> values);
  std::vector<float> GetGrads() const;

  // Allocates activations for batches up to max_batch (idempotent for smaller sizes).
  void Reserve(int max_batch);
  int max_batch() const { return max_batch_; }
  // Copies the samples at indices[0..batch) of `data` into the input batch.
  // REQUIRES: batch <= max_batch(), data matches input_shape() (see CheckCompatible).
  void LoadBatch(const Dataset& data, const uint32_t* indices, int batch);
  // Same, for `batch` consecutive samples starting at `first`.
  void LoadContiguousBatch(const Dataset& data, size_t first, int batch);
  // Checks the dataset's sample shape and label range against this model.
  Status CheckCompatible(const Dataset& data) const;
  // Whether `data`'s samples are images stored channels-last (Dataset's [H, W, C], C > 1)
  // and this is a graph model that takes them channels-first ([C, H, W], as an ONNX file
  // declares): LoadBatch and LoadContiguousBatch then transpose each sample on the way in.
  bool TakesChannelsFirst(const Dataset& data) const;

  // Forward + backward on the loaded batch: fills grads() with d(mean loss)/d(params).
  Backend::LossResult ForwardBackward(int batch, uint64_t seed);
  // Forward + backward + one plain SGD step (params -= lr * grads) on the loaded batch:
  // ForwardBackward then SgdStep with momentum, weight decay and the prox term off, up to
  // rounding (a fused Dense layer's GEMM rounds lr * dW before adding it to W, where
  // SgdStep's FMA rounds once). Layers that can fuse the step into their backward pass do
  // (Layer::BackwardSgd), so grads() is left unspecified.
  Backend::LossResult ForwardBackwardSgd(int batch, uint64_t seed, float lr);
  // DP-SGD's clipped sum (Abadi et al. 2016) on the loaded batch: a training forward and
  // backward pass, then grads() := the sum over the batch's examples of
  // g_j * min(1, clip / (||g_j|| + 1e-6)), g_j being example j's own loss gradient (the
  // batch loss is the mean of the examples'). `norms` (host memory, `batch` floats, may be
  // null) receives each ||g_j||. Layer models: a Dense layer's share of ||g_j||^2 is
  // ||dy_j||^2 (||x_j||^2 + 1) from its input and output gradient rows, and its clipped sum
  // one GEMM over dy with each row rescaled (no per-example gradient); a Conv2d layer's
  // per-example gradients come from one batched pass (Backend::Conv2dPerExampleBackward,
  // batch x its parameters floats) and are summed with their factors. Graph models use
  // GraphModel::ClippedBackward's rule per parameterised op (Gemm, LayerNormalization, Conv)
  // where every such node has one, and otherwise run each example alone (batch 1) and add
  // its clipped gradient. Fails, changing nothing, where SupportsPerExampleClipping() does.
  Result<Backend::LossResult> ForwardBackwardClipped(int batch, uint64_t seed, double clip,
                                                     float* norms);
  // DP-SGD's batches change size every step (Poisson sampling). While on, a built-in model
  // on the graph executor loads batches straight into its layers, which run its clipped
  // passes, instead of planning the graph for every batch size; only LoadBatch,
  // LoadContiguousBatch and ForwardBackwardClipped may run meanwhile. Other models ignore it.
  void set_clipped_passes(bool on) { clipped_passes_ = on; }
  // OK when ForwardBackwardClipped can run: a layer model whose parameterised layers are
  // Dense or Conv2d (logreg, mlp, cnn) or a graph model without BatchNormalization (it mixes
  // a batch's examples), on a backend with host memory, with a loss that is a plain mean
  // over the examples (no class weights). Otherwise Unimplemented or InvalidArgument saying
  // why.
  Status SupportsPerExampleClipping() const;
  // The BatchNormalization node of a graph model (it trains on the batch's statistics, so a
  // batch of one example cannot train it), or nullptr.
  const graph::Node* BatchStatisticsNode() const;
  // Forward only, in inference mode (dropout off).
  Backend::LossResult Evaluate(int batch);
  // The logits of the last Forward/Evaluate call ([batch, num_classes], backend memory).
  const float* logits() const;

 private:
  Model() = default;
  void Forward(int batch, bool training, uint64_t seed);
  // Copies sample `row` of `data` to `dst` in the input's layout (see TakesChannelsFirst).
  void CopySample(const Dataset& data, size_t row, bool channels_first, float* dst) const;
  // The training forward pass and the loss, with d loss / d logits in dacts_.back().
  Backend::LossResult ForwardWithLossGradient(int batch, uint64_t seed);

  // Configures layers_ against input_shape_ into shapes_; returns their parameter count.
  Result<size_t> ConfigureLayers();
  // Allocates the layers' activations and their gradients for batches up to max_batch.
  void ReserveLayerBuffers(int max_batch);
  // A built-in on the graph: sizes its layers' buffers for max_batch_ when they are not.
  void EnsureLayerBuffers() {
    if (layer_batch_ < max_batch_) ReserveLayerBuffers(max_batch_);
  }
  // Where LoadBatch puts `batch` samples: the graph's input, or the layers' (acts_[0]).
  float* InputFor(int batch);
  // The graph runs the model (not the layers: a layer model, or a built-in model's DP pass).
  bool on_graph() const { return graph_ != nullptr && !layer_pass_; }
  // An imported or adopted graph (its input is the file's), not a built-in on the graph.
  bool imported_graph() const { return graph_ != nullptr && !builtin_on_graph_; }

  std::string name_;
  Backend* backend_ = nullptr;
  bool builtin_on_graph_ = false;  // CreateBuiltinOnGraph: graph_ and layers_ share the buffers
  bool layer_pass_ = false;        // a built-in on the graph running its layers (DP-SGD)
  int layer_batch_ = 0;            // batch ReserveLayerBuffers last sized the layers' buffers for
  bool clipped_passes_ = false;    // set_clipped_passes: a built-in loads into its layers
  bool logits_from_layers_ = false;  // the last forward pass ran on the layers
  SampleShape input_shape_;
  int num_classes_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<SampleShape> shapes_;  // shapes_[i] is the input of layer i; back() the output
  // The loss over the output after a forward pass; dlogits (backend memory) receives the
  // gradient when not null.
  Backend::LossResult Loss(int batch, float* dlogits);
  // Copies the batch's regression targets (rows `indices`, or `first` onward) for Loss.
  void StageTargets(const Dataset& data, const uint32_t* indices, size_t first, int batch);
  bool GraphForward(int batch, bool training, uint64_t seed);
  // ForwardBackwardClipped for a graph model: its examples one at a time (core/model_dp.cc).
  Result<Backend::LossResult> GraphForwardBackwardClipped(int batch, uint64_t seed, double clip,
                                                          float* norms);

  size_t num_params_ = 0, num_trainable_ = 0;
  DeviceBuffer<float> params_, grads_;
  float* params_ptr_ = nullptr;  // params_ or the graph's flat buffer
  float* grads_ptr_ = nullptr;
  std::unique_ptr<graph::GraphModel> graph_;
  std::vector<float> initial_params_;  // a graph model's initializers, for InitParams
  LossOptions loss_;
  bool host_loss_ = false;              // loss_ needs ComputeLoss rather than the backend's
  std::vector<float> staging_targets_;  // the loaded batch's regression targets
  std::vector<float> host_logits_, host_dlogits_;  // a device's outputs for ComputeLoss
  Status status_;
  std::vector<size_t> param_offsets_;  // param_offsets_[i]: layer i's slice of params_
  std::vector<double> dp_sq_norms_;    // ForwardBackwardClipped's per-example squared norms
  std::vector<float> dp_scaled_dy_;    // ... and a Dense layer's dy with rows rescaled
  std::vector<std::vector<float>> dp_conv_rows_;  // ... a Conv2d layer's per-example gradients
  std::vector<float> dp_sum_;                     // ... a graph model's clipped sum

  int max_batch_ = 0;
  std::vector<DeviceBuffer<float>> owned_;  // activation and gradient storage
  std::vector<float*> acts_;                // acts_[i]: input of layer i; acts_.back(): logits
  std::vector<float*> dacts_;               // d loss / d acts_[i]; null where not needed
  DeviceBuffer<int32_t> labels_;
  std::vector<float> staging_;              // host-side gather buffer for one batch
  std::vector<int32_t> staging_labels_;
};

}  // namespace fedmesh
