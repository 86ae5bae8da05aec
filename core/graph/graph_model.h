// GraphModel: runs a Graph forward and backward. Its parameters live in ONE contiguous
// float32 buffer (and their gradients in another), so codecs, secure aggregation, DP,
// gossip and storage work on the flat vector unchanged. The flat vector holds the
// trainable parameters in the graph's initializer order, then the non-trainable state
// (BatchNorm running statistics) in initializer order: the state travels with the model
// and is averaged like the weights (as FedAvg over a PyTorch state_dict does), while
// optimizers step only the trainable head and its gradient stays zero.
//
// Which initializers are trainable: every float32 initializer of rank >= 1 except those a
// kernel declares as state (BatchNormalization's mean and var). int64 initializers and
// rank-0 floats are constants (shapes, axes, the 2.0 of a Pow, an epsilon), as are the
// outputs of Constant nodes.
//
// Buffers are planned once per batch size (Plan): every activation and kernel workspace
// is allocated then, the gradients at the plan's first training Forward (so a plan that
// only evaluates, such as the test set's, holds none), and Forward and Backward allocate
// nothing after that. Forward runs the nodes in topological order, Backward in reverse.
//
// Where it runs: on the backend it is given. Every buffer (parameters, gradients,
// activations, inputs, constants) is in the backend's memory, so every pointer this class
// returns is a device pointer on a CudaBackend: read and write them with the backend's
// copies. On the CPU backend the kernels are core/graph/ops/; on a CudaBackend they are
// core/cuda/graph/ (an op without a CUDA kernel is refused at Create, naming the node).
// Thread-safety: one thread drives a GraphModel at a time.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/graph/graph.h"
#include "core/graph/op_kernel.h"
#include "core/status.h"

namespace fedmesh::graph {

struct GraphModelOptions {
  // Also compute d loss / d input for float inputs (tests and gradient checks); default
  // off, since training never needs it.
  bool input_gradients = false;
  GraphLimits limits;
  // Fill every planned activation, input, workspace and gradient buffer with NaN when it is
  // made (tests: an element a kernel leaves unwritten, or a gradient it adds to without
  // the executor having zeroed it, shows). Default off.
  bool poison_plans = false;
  // Run a Relu inside the node that produces its input where that node's kernel can
  // (OpKernel::CanFuseRelu: BatchNormalization, Conv, an Add or Sub of same-shape operands
  // on the CPU) and the Relu is that value's only reader: one pass over the activation fewer in
  // Forward and in Backward; results equal the unfused graph's up to float rounding (the
  // compiler contracts the fused loops' products into FMAs differently). The fused-away
  // value itself is then not kept (value() of it is unspecified). Default on.
  bool fuse_relu = true;
  // Plans kept in slot 0 (one per batch size, each with all its activations and
  // gradients): planning one more drops the least recently used (never the current plan).
  // Bounds memory where batch sizes vary (the last batch of every client of a simulation,
  // DP-SGD's Poisson batches). 0 = no bound. Default 4.
  int max_plans = 4;
};

// Where one named tensor sits in a flat buffer.
struct TensorSlot {
  std::string name;
  Dims dims;
  size_t offset = 0;  // in floats
  size_t size = 0;    // in floats
};

class GraphModel {
 public:
  // Finalizes the graph, creates every kernel (an unsupported op fails here, naming the
  // node) and copies the initializers into the flat buffers.
  static Result<std::unique_ptr<GraphModel>> Create(Graph g, Backend* backend,
                                                    const GraphModelOptions& options = {});
  ~GraphModel();

  const Graph& graph() const { return graph_; }
  // CanonicalHash(graph()), computed once.
  const std::string& hash() const { return hash_; }
  Backend& backend() { return *backend_; }

  // The flat vector: num_trainable() parameters, then num_state() state values.
  size_t num_trainable() const { return num_trainable_; }
  size_t num_state() const { return num_state_; }
  size_t num_flat() const { return num_trainable_ + num_state_; }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }
  // Slots of the trainable tensors and of the state tensors; offsets are into params().
  const std::vector<TensorSlot>& param_slots() const { return param_slots_; }
  const std::vector<TensorSlot>& state_slots() const { return state_slots_; }

  // Graph inputs and outputs: dims with -1 where the batch goes.
  size_t num_inputs() const { return graph_.inputs.size(); }
  size_t num_outputs() const { return graph_.outputs.size(); }

  // Plans buffers for batches of `batch` samples (cached per size; fails if the graph's
  // shapes do not hold for that batch, naming the node). `slot` > 0: another set of
  // buffers for the same size, so that the activations of several forwards are kept at
  // once (pipelined micro-batches: each one's backward runs from its own forward, with no
  // recomputation). A slot > 0 keeps one size: planning it for another drops the old plan.
  Status Plan(int64_t batch, uint32_t slot = 0);
  // The planned buffer of input k: fill it before Forward.
  // REQUIRES: Plan(batch, slot) succeeded.
  float* input(size_t k, int64_t batch, uint32_t slot = 0);
  const Dims& input_dims(size_t k, int64_t batch) const;

  // Runs the graph on the input buffers of the plan of (batch, slot), which becomes the
  // current plan: output(), output_grad(), Backward() and value() refer to it.
  Status Forward(int64_t batch, bool training, uint64_t seed, uint32_t slot = 0);
  // Makes the plan of (batch, slot) current again, with the values its last Forward left
  // (another slot's Forward in between does not touch them). NotFound when not planned.
  Status Select(int64_t batch, uint32_t slot);
  // Output k of the last Forward, and its concrete dims.
  const float* output(size_t k) const;
  const Dims& output_dims(size_t k) const;
  // Output k's dims in the plan for `batch`. REQUIRES: Plan(batch) succeeded.
  const Dims& output_dims_for(size_t k, int64_t batch) const;
  // The gradient of the loss with respect to output k: write it after Forward, then call
  // Backward. Zeroed by Forward.
  float* output_grad(size_t k);
  // Fills grads() (overwriting) with d loss / d params, and input_grad() when
  // options.input_gradients, from output_grad() of the last Forward (a training one).
  void Backward();
  const float* input_grad(size_t k) const;
  // Backward fused with a plain SGD step (w -= lr * dL/dw) on the trainable parameters:
  // parameters read by one kernel that can step them (Gemm's weight and bias) are updated
  // inside that kernel's backward, with no gradient buffer pass; the rest get their
  // gradients and one SgdStep. Equal to Backward then the step up to rounding; grads() is
  // left unspecified.
  void BackwardSgd(float lr);
  // DP-SGD without a per-example gradient (core/graph/graph_model_dp.cc): OK when every
  // node with trainable parameters has a per-example norm rule: a Gemm whose A is not a
  // parameter and not transposed (B and C parameters: nn.Linear), a LayerNormalization
  // over axes >= 1 (Scale and B), or a Conv (W and B; each example's gradient made and
  // dropped in turn). Unimplemented naming the first node without one (the caller then
  // runs the examples one at a time).
  Status PerExampleRulesCover() const;
  // After a training Forward of `batch` rows and output_grad() = d(mean loss)/d(output):
  // grads() := sum_j min(1, clip / (||g_j|| + 1e-6)) g_j, g_j being example j's own loss
  // gradient (batch times its rows' share), with ||g_j|| from each node's rule (norms[j]
  // when not null). One backward pass, then the parameterised nodes' backward again with
  // each example's output gradient rows rescaled. REQUIRES: PerExampleRulesCover() is OK.
  // Unimplemented (grads() then unspecified) where a shape defeats a rule at run time.
  Status ClippedBackward(double clip, float* norms);
  // Relus of the plan for `batch` that run inside the node before them (fuse_relu).
  // REQUIRES: Plan(batch) succeeded.
  size_t num_fused_relus(int64_t batch) const;
  // Bytes the plans hold now (activations, inputs, workspaces and gradients of every batch
  // size and slot); the parameters and their gradients are not counted.
  size_t planned_bytes() const;
  // Any value of the last Forward by name (tests, debugging); null if unknown.
  const float* value(const std::string& name, Dims* dims = nullptr) const;

  // Named copies of the parameters and state (export, .npz, tests).
  std::vector<Tensor> ParamTensors() const;
  std::vector<Tensor> StateTensors() const;

 private:
  struct Plan_;
  struct Values_;
  struct ValueRef;
  enum class Where;
  GraphModel() = default;
  Status Init(const GraphModelOptions& options);
  // Which inputs of node k are trainable parameters.
  std::vector<bool> ParamInputs(size_t k) const;
  // Allocates p's gradient buffer (output gradients zeroed) and points p's gradients and
  // its calls at it; once per plan.
  void BindGradients(Plan_& p);

  Graph graph_;
  std::string hash_;
  Backend* backend_ = nullptr;
  GraphModelOptions options_;
  std::vector<std::unique_ptr<OpKernel>> kernels_;  // one per node (null for Constant)
  std::map<std::string, Tensor> constants_;         // constant values by name
  size_t num_trainable_ = 0, num_state_ = 0;
  DeviceBuffer<float> params_, grads_;
  std::vector<TensorSlot> param_slots_, state_slots_;
  std::vector<float> constant_floats_;  // float constants, one block, see value_index_
  DeviceBuffer<float> constant_device_;  // the same in backend memory (when not host memory)
  const float* constants() const;        // the block the kernels read
  std::unique_ptr<Values_> values_;  // where every named value lives
  // Plans by (batch, slot). Slot 0 caches every size; a slot > 0 holds one plan.
  std::map<std::pair<int64_t, uint32_t>, std::unique_ptr<Plan_>> plans_;
  // Any plan of `batch` (every slot's dims are the same). REQUIRES: one exists.
  const Plan_& AnyPlan(int64_t batch) const;
  Plan_* current_ = nullptr;  // the plan of the last Forward
  uint64_t use_clock_ = 0;    // ticks at every plan use (Plan_::last_use)
  std::vector<double> dp_sq_;       // ClippedBackward's per-example squared norms
  std::vector<float> dp_scaled_;    // ... and one node's output gradient, rows rescaled
};

// DP-SGD's clip factor for an example of gradient norm `norm`: min(1, clip / (norm + 1e-6)),
// as Opacus.
inline float DpClipFactor(double norm, double clip) {
  return static_cast<float>(std::min(1.0, clip / (norm + 1e-6)));
}

// The ranges (offset, size) of the flat vector whose tensor names match any of `patterns`
// (globs: '*' any run of characters, '?' one), trainable and state tensors alike, in
// flat-vector order. A pattern that matches nothing is an error listing the names, so a
// typo cannot silently share what a site meant to keep.
Result<std::vector<std::pair<size_t, size_t>>> MatchTensors(const GraphModel& m,
                                                            const std::vector<std::string>& patterns);

}  // namespace fedmesh::graph
