#include "core/graph/graph_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "core/check.h"
#include "core/graph/graph_model_internal.h"
#include "core/graph/ops/conv_dnnl.h"
#include "core/rng.h"

namespace fedmesh::graph {

namespace {

// Within limits.max_tensor_elements: Finalize checked the dims a file declares, but the
// shapes kernels infer from them (Pad, Concat, Gather, a convolution's columns) are only
// known here, and the plan allocates them all.
Status CheckPlanned(const Dims& d, const GraphLimits& limits, const std::string& what) {
  int64_t n = 1;
  for (int64_t x : d) {
    if (x < 0) return Status::InvalidArgument(what + " " + DimsToString(d) + " has a negative dim");
    if (x > 0 && n > limits.max_tensor_elements / x)
      return Status::InvalidArgument(what + " " + DimsToString(d) + " has more than " +
                                     std::to_string(limits.max_tensor_elements) + " elements");
    n *= x;
  }
  return Status::OK();
}

// A Constant node's value as a Tensor (value, value_float(s), value_int(s)).
Result<Tensor> ConstantValue(const Node& n) {
  Tensor t;
  if (n.Has("value")) {
    t = n.attrs.at("value").t;
  } else if (n.Has("value_float")) {
    t.f = {n.Float("value_float", 0.0f)};
  } else if (n.Has("value_floats")) {
    t.f = n.attrs.at("value_floats").floats;
    t.dims = {static_cast<int64_t>(t.f.size())};
  } else if (n.Has("value_int")) {
    t.dtype = DType::kInt64;
    t.i = {n.Int("value_int", 0)};
  } else if (n.Has("value_ints")) {
    t.dtype = DType::kInt64;
    t.i = n.Ints("value_ints", {});
    t.dims = {static_cast<int64_t>(t.i.size())};
  } else {
    return Status::InvalidArgument(n.Label() + " has no value attribute this reader supports "
                                   "(value, value_float(s), value_int(s))");
  }
  if (n.outputs.size() != 1) return Status::InvalidArgument(n.Label() + " needs one output");
  t.name = n.outputs[0];
  return t;
}

}  // namespace

GraphModel::~GraphModel() = default;

Result<std::unique_ptr<GraphModel>> GraphModel::Create(Graph g, Backend* backend,
                                                       const GraphModelOptions& options) {
  std::unique_ptr<GraphModel> m(new GraphModel());
  m->graph_ = std::move(g);
  m->backend_ = backend;
  FM_RETURN_IF_ERROR(m->Init(options));
  return m;
}

Status GraphModel::Init(const GraphModelOptions& options) {
  options_ = options;
  FM_RETURN_IF_ERROR(Finalize(&graph_, options.limits));
  hash_ = CanonicalHash(graph_);
  for (const Tensor& t : graph_.initializers)
    if (t.dtype == DType::kInt64 || t.dims.empty()) constants_[t.name] = t;
  for (const Node& n : graph_.nodes)
    if (n.op_type == "Constant") {
      FM_ASSIGN_OR_RETURN(Tensor t, ConstantValue(n));
      constants_[t.name] = std::move(t);
    }
  auto lookup = [this](const std::string& name) -> const Tensor* {
    auto it = constants_.find(name);
    return it == constants_.end() ? nullptr : &it->second;
  };
  std::unordered_map<std::string, bool> is_state;
  kernels_.resize(graph_.nodes.size());
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    const Node& n = graph_.nodes[k];
    if (n.op_type == "Constant") continue;
    // Every kernel writes its first output; only later ones (a mask, statistics) may be
    // left unnamed.
    if (n.outputs.empty() || n.outputs[0].empty())
      return Status::InvalidArgument(n.Label() + " names no output");
    KernelContext ctx{&n, graph_.opset, lookup};
    if (backend_->kind() == BackendKind::kCuda) {
      FM_ASSIGN_OR_RETURN(kernels_[k], MakeCudaKernel(ctx));
    } else {
      // The engine a CPU Conv runs on comes from the environment: a bad value is an error
      // here, not a silent default.
      if (n.op_type == "Conv") FM_RETURN_IF_ERROR(ops::CpuConvEngineFromEnvironment().status());
      FM_ASSIGN_OR_RETURN(kernels_[k], MakeKernel(ctx));
    }
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (kernels_[k]->IsStateInput(i) && !n.inputs[i].empty()) is_state[n.inputs[i]] = true;
  }
  // Parameters then state, each in initializer order; every value checked finite.
  auto values = std::make_unique<Values_>();
  Values_& table = *values;
  for (const Tensor& t : graph_.initializers) {
    if (constants_.count(t.name)) continue;
    for (size_t i = 0; i < t.f.size(); ++i)
      if (!std::isfinite(t.f[i]))
        return Status::InvalidArgument("initializer '" + t.name + "' holds a non-finite value (" +
                                       std::to_string(t.f[i]) + ") at index " +
                                       std::to_string(i));
    TensorSlot slot{t.name, t.dims, 0, t.f.size()};
    if (is_state.count(t.name)) {
      slot.offset = num_state_;
      num_state_ += t.f.size();
      state_slots_.push_back(slot);
    } else {
      slot.offset = num_trainable_;
      num_trainable_ += t.f.size();
      param_slots_.push_back(slot);
    }
  }
  for (TensorSlot& s : state_slots_) s.offset += num_trainable_;
  params_ = DeviceBuffer<float>(backend_, num_flat());
  grads_ = DeviceBuffer<float>(backend_, num_flat());
  backend_->Fill(grads_.data(), num_flat(), 0.0f);
  for (const auto* slots : {&param_slots_, &state_slots_})
    for (const TensorSlot& s : *slots) {
      table.refs[s.name] = {slots == &state_slots_ ? Where::kState : Where::kParam, s.offset, s.dims};
      if (s.size > 0)  // an empty tensor's data (and an empty buffer) may be null
        backend_->CopyFromHost(params_.data() + s.offset,
                               graph_.FindInitializer(s.name)->f.data(), s.size * sizeof(float));
    }
  // Constants as floats (int64 values are exact up to 2^24, enough for shapes and ids).
  for (auto& [name, t] : constants_) {
    table.refs[name] = {Where::kConst, constant_floats_.size(), t.dims};
    if (t.dtype == DType::kFloat32) {
      constant_floats_.insert(constant_floats_.end(), t.f.begin(), t.f.end());
    } else {
      for (int64_t v : t.i) constant_floats_.push_back(static_cast<float>(v));
    }
  }
  if (!backend_->host_memory() && !constant_floats_.empty()) {
    constant_device_ = DeviceBuffer<float>(backend_, constant_floats_.size());
    backend_->CopyFromHost(constant_device_.data(), constant_floats_.data(),
                           constant_floats_.size() * sizeof(float));
  }
  for (size_t k = 0; k < graph_.inputs.size(); ++k)
    table.refs[graph_.inputs[k].name] = {Where::kInput, k, graph_.inputs[k].dims};
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    if (graph_.nodes[k].op_type == "Constant") continue;
    for (const std::string& o : graph_.nodes[k].outputs)
      if (!o.empty()) table.refs[o] = {Where::kActivation, table.num_acts++, {}};
  }
  values_ = std::move(values);
  return Status::OK();
}

Status GraphModel::Plan(int64_t batch, uint32_t slot) {
  if (batch <= 0) return Status::InvalidArgument("batch must be positive");
  if (auto it = plans_.find({batch, slot}); it != plans_.end()) {
    it->second->last_use = ++use_clock_;
    return Status::OK();
  }
  const Values_& table = *values_;
  auto p = std::make_unique<Plan_>();
  p->batch = batch;
  p->act_dims.resize(table.num_acts);
  std::vector<bool> act_needs_grad(table.num_acts, false);
  std::vector<Dims>& input_dims = p->input_dims;
  input_dims.resize(graph_.inputs.size());
  for (size_t k = 0; k < graph_.inputs.size(); ++k) {
    input_dims[k] = graph_.inputs[k].dims;
    for (int64_t& d : input_dims[k])
      if (d < 0) d = batch;
  }
  auto dims_of = [&](const ValueRef& r) -> const Dims& {
    switch (r.where) {
      case Where::kInput: return input_dims[r.index];
      case Where::kActivation: return p->act_dims[r.index];
      default: return r.dims;
    }
  };
  auto needs_grad = [&](const ValueRef& r) {
    switch (r.where) {
      case Where::kParam: return true;
      case Where::kInput:
        return options_.input_gradients && graph_.inputs[r.index].dtype == DType::kFloat32;
      case Where::kActivation: return static_cast<bool>(act_needs_grad[r.index]);
      default: return false;
    }
  };
  // Shapes, in topological order.
  std::vector<std::vector<Dims>>& node_in = p->node_in;
  std::vector<std::vector<Dims>>& node_out = p->node_out;
  node_in.resize(graph_.nodes.size());
  node_out.resize(graph_.nodes.size());
  std::vector<size_t> workspace(graph_.nodes.size(), 0);
  p->run_backward.assign(graph_.nodes.size(), false);
  p->fused.assign(graph_.nodes.size(), false);
  std::vector<size_t> producer(table.num_acts, SIZE_MAX);  // activation slot -> node (output 0)
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    const Node& n = graph_.nodes[k];
    if (!kernels_[k]) continue;
    bool grad = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) {
        node_in[k].push_back({});
        continue;
      }
      const ValueRef& r = table.refs.at(n.inputs[i]);
      node_in[k].push_back(dims_of(r));
      if (!kernels_[k]->IsIndexInput(i) && !kernels_[k]->IsStateInput(i) && needs_grad(r))
        grad = true;
    }
    Status s = kernels_[k]->InferShapes(node_in[k], &node_out[k]);
    if (!s.ok())
      return Status::InvalidArgument("at batch size " + std::to_string(batch) + ": " +
                                     s.message());
    if (node_out[k].size() < n.outputs.size())
      return Status::InvalidArgument(n.Label() + " has " + std::to_string(n.outputs.size()) +
                                     " outputs; " + n.op_type + " gives " +
                                     std::to_string(node_out[k].size()));
    for (const Dims& d : node_out[k]) {
      s = CheckPlanned(d, options_.limits, n.Label() + " output");
      if (!s.ok())
        return Status::InvalidArgument("at batch size " + std::to_string(batch) + ": " +
                                       s.message());
    }
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (n.outputs[o].empty()) continue;
      const ValueRef& r = table.refs.at(n.outputs[o]);
      p->act_dims[r.index] = node_out[k][o];
      act_needs_grad[r.index] = grad;
      if (o == 0) producer[r.index] = k;
    }
    p->run_backward[k] = grad;
    workspace[k] = kernels_[k]->WorkspaceFloats(node_in[k], node_out[k]);
    if (workspace[k] > static_cast<uint64_t>(options_.limits.max_tensor_elements))
      return Status::InvalidArgument("at batch size " + std::to_string(batch) + ": " +
                                     n.Label() + " needs " + std::to_string(workspace[k]) +
                                     " floats of workspace, more than the limit of " +
                                     std::to_string(options_.limits.max_tensor_elements));
  }
  // One arena for activations and workspaces; one for gradients, graph outputs first.
  size_t floats = 0, grad_floats = 0;
  for (const Dims& d : p->act_dims) floats += NumElements(d);
  for (const Dims& d : input_dims) floats += NumElements(d);
  for (size_t w : workspace) floats += w;
  std::vector<bool> is_output(table.num_acts, false);
  for (const ValueInfo& o : graph_.outputs) {
    const ValueRef& r = table.refs.at(o.name);
    if (r.where != Where::kActivation)
      return Status::InvalidArgument("graph output '" + o.name + "' must be computed by a node");
    is_output[r.index] = true;
    act_needs_grad[r.index] = true;  // the loss writes it, whether or not it flows further
  }
  std::map<size_t, int> uses;                   // parameter offset -> reads by kernels
  std::vector<int> act_uses(table.num_acts, 0);  // activation slot -> reads by kernels
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    if (!kernels_[k]) continue;
    for (const std::string& in : graph_.nodes[k].inputs) {
      if (in.empty()) continue;
      const ValueRef& r = table.refs.at(in);
      if (r.where == Where::kParam) ++uses[r.index];
      if (r.where == Where::kActivation) ++act_uses[r.index];
    }
  }
  // Relus fused into their input's producer (options_.fuse_relu): the value between them
  // is neither written nor differentiated (no gradient buffer).
  std::vector<std::pair<size_t, size_t>> fusions;  // (producer, relu)
  for (size_t j = 0; j < graph_.nodes.size() && options_.fuse_relu; ++j) {
    const Node& n = graph_.nodes[j];
    if (!kernels_[j] || n.op_type != "Relu" || n.inputs.size() != 1) continue;
    const ValueRef& r = table.refs.at(n.inputs[0]);
    if (r.where != Where::kActivation || act_uses[r.index] != 1 || is_output[r.index]) continue;
    const size_t k = producer[r.index];
    if (k == SIZE_MAX || !kernels_[k]->CanFuseRelu(node_in[k], node_out[k])) continue;
    p->fused[j] = true;
    act_needs_grad[r.index] = false;
    fusions.push_back({k, j});
  }
  for (size_t a = 0; a < table.num_acts; ++a)
    if (act_needs_grad[a]) grad_floats += NumElements(p->act_dims[a]);
  if (options_.input_gradients)
    for (const Dims& d : input_dims) grad_floats += NumElements(d);
  p->arena = DeviceBuffer<float>(backend_, floats);
  p->grad_floats = grad_floats;  // allocated by BindGradients
  if (options_.poison_plans) backend_->Fill(p->arena.data(), floats, std::nanf(""));
  float* cursor = p->arena.data();
  p->act.assign(table.num_acts, nullptr);
  p->act_grad.assign(table.num_acts, nullptr);
  for (size_t a = 0; a < table.num_acts; ++a) {
    p->act[a] = cursor;
    cursor += NumElements(p->act_dims[a]);
  }
  for (const Dims& d : input_dims) {
    p->input_data.push_back(cursor);
    cursor += NumElements(d);
  }
  // Reshapes on the CPU (OpKernel::IsViewFor) share their input's buffer, in topological
  // order so that a view of a view finds the storage: no copy per step (the mlp's Flatten of
  // a batch of images). Their own slot in the arena stays unused.
  for (size_t k = 0; k < graph_.nodes.size() && backend_->host_memory(); ++k) {
    const Node& n = graph_.nodes[k];
    if (!kernels_[k] || n.inputs.empty() || n.inputs[0].empty()) continue;
    const ValueRef& in = table.refs.at(n.inputs[0]);
    if (!kernels_[k]->IsViewFor({dims_of(in)})) continue;
    float* data = in.where == Where::kActivation ? p->act[in.index]
                  : in.where == Where::kInput    ? p->input_data[in.index]
                                                 : nullptr;
    if (data != nullptr) p->act[table.refs.at(n.outputs[0]).index] = data;
  }
  // Gradient offsets (the buffer itself waits for BindGradients).
  size_t gcursor = 0;
  p->act_grad_offset.assign(table.num_acts, Plan_::kNoGrad);
  for (size_t a = 0; a < table.num_acts; ++a)
    if (is_output[a]) {
      p->act_grad_offset[a] = gcursor;
      gcursor += NumElements(p->act_dims[a]);
    }
  p->output_grad_floats = gcursor;
  for (size_t a = 0; a < table.num_acts; ++a)
    if (act_needs_grad[a] && !is_output[a]) {
      p->act_grad_offset[a] = gcursor;
      gcursor += NumElements(p->act_dims[a]);
    }
  p->input_grad.assign(graph_.inputs.size(), nullptr);
  p->input_grad_offset.assign(graph_.inputs.size(), Plan_::kNoGrad);
  for (size_t k = 0; k < graph_.inputs.size(); ++k)
    if (options_.input_gradients) {
      if (graph_.inputs[k].dtype == DType::kFloat32) p->input_grad_offset[k] = gcursor;
      gcursor += NumElements(input_dims[k]);
    }
  // Kernel calls.
  auto data_of = [&](const ValueRef& r) -> float* {
    switch (r.where) {
      case Where::kInput: return p->input_data[r.index];
      case Where::kParam: return params_.data() + r.index;
      case Where::kState: return params_.data() + r.index;
      case Where::kConst: return const_cast<float*>(constants()) + r.index;
      case Where::kActivation: return p->act[r.index];
    }
    return nullptr;
  };
  // Activation and input gradients are pointed at by BindGradients.
  auto grad_of = [&](const ValueRef& r) -> float* {
    return r.where == Where::kParam ? grads_.data() + r.index : nullptr;
  };
  p->calls.resize(graph_.nodes.size());
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    if (!kernels_[k]) continue;
    const Node& n = graph_.nodes[k];
    KernelCall& c = p->calls[k];
    c.be = backend_;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) {
        c.in.push_back(nullptr);
        c.in_dims.push_back(&node_in[k][i]);
        c.din.push_back(nullptr);
        continue;
      }
      const ValueRef& r = table.refs.at(n.inputs[i]);
      c.in.push_back(data_of(r));
      c.in_dims.push_back(&node_in[k][i]);
      const bool want = !kernels_[k]->IsIndexInput(i) && !kernels_[k]->IsStateInput(i);
      c.din.push_back(want ? grad_of(r) : nullptr);
    }
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (n.outputs[o].empty()) {
        c.out.push_back(nullptr);
        c.out_dims.push_back(&node_out[k][o]);
        c.dout.push_back(nullptr);
        continue;
      }
      const ValueRef& r = table.refs.at(n.outputs[o]);
      c.out.push_back(p->act[r.index]);
      c.out_dims.push_back(&node_out[k][o]);
      c.dout.push_back(nullptr);
    }
    c.workspace = cursor;
    cursor += workspace[k];
  }
  for (const auto& [k, j] : fusions) {
    KernelCall& c = p->calls[k];
    c.out[0] = p->calls[j].out[0];
    c.relu_epilogue = true;
  }
  p->fusions = std::move(fusions);
  // The fused-SGD variant of the calls.
  // A parameter read by one kernel that writes its gradient in one pass (CanStepInput):
  // Backward lets the kernel overwrite its gradient instead of zeroing and accumulating,
  // BackwardSgd lets it step the parameter in place.
  // An activation read by one kernel input, whose kernel writes that gradient in one pass
  // (CanOverwriteInputGradient), is not zeroed before Backward or BackwardSgd: the kernel
  // assigns it. Saves a memset of most of the gradient arena and the kernels' reads of zeros.
  std::set<size_t> single;  // offsets of such parameters
  std::vector<bool> act_overwritten(table.num_acts, false);
  p->sgd_calls = p->calls;  // no overwrite_input set yet
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    if (!kernels_[k] || !p->run_backward[k] || p->fused[k]) continue;
    const Node& n = graph_.nodes[k];
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      const ValueRef& r = table.refs.at(n.inputs[i]);
      KernelCall& sgd = p->sgd_calls[k];
      KernelCall& plain = p->calls[k];
      if (r.where == Where::kParam && uses[r.index] == 1 && kernels_[k]->CanStepInput(i)) {
        sgd.step_input.resize(n.inputs.size(), false);
        sgd.step_input[i] = true;
        sgd.din[i] = params_.data() + r.index;
        plain.overwrite_input.resize(n.inputs.size(), false);
        plain.overwrite_input[i] = true;
        single.insert(r.index);
      } else if (r.where == Where::kActivation && act_uses[r.index] == 1 && !is_output[r.index] &&
                 act_needs_grad[r.index] && kernels_[k]->CanOverwriteInputGradient(i)) {
        for (KernelCall* c : {&plain, &sgd}) {
          c->overwrite_input.resize(n.inputs.size(), false);
          c->overwrite_input[i] = true;
        }
        act_overwritten[r.index] = true;
      }
    }
  }
  auto add_range = [](std::vector<std::pair<size_t, size_t>>& ranges, size_t offset, size_t size) {
    if (size == 0) return;
    if (!ranges.empty() && ranges.back().first + ranges.back().second == offset) {
      ranges.back().second += size;
    } else {
      ranges.push_back({offset, size});
    }
  };
  {
    // The gradient arena past the output gradients, in its layout order (see above).
    size_t offset = p->output_grad_floats;
    for (size_t a = 0; a < table.num_acts; ++a) {
      if (!act_needs_grad[a] || is_output[a]) continue;
      const size_t size = NumElements(p->act_dims[a]);
      if (!act_overwritten[a]) add_range(p->act_grad_zero, offset, size);
      offset += size;
    }
    add_range(p->act_grad_zero, offset, p->grad_floats - offset);  // input gradients
  }
  for (const TensorSlot& s : param_slots_) {
    if (single.count(s.offset)) continue;
    add_range(p->sgd_rest, s.offset, s.size);
    add_range(p->grad_zero, s.offset, s.size);
  }
  // The state's gradient stays zero (nothing writes it; readers of the flat gradient see it).
  for (const TensorSlot& s : state_slots_) add_range(p->grad_zero, s.offset, s.size);
  if (slot > 0) {
    // A slot keeps one size (a pipeline's micro-batches are one size but the last).
    std::erase_if(plans_, [&](const auto& kv) {
      if (kv.first.second != slot) return false;
      if (current_ == kv.second.get()) current_ = nullptr;
      return true;
    });
  }
  if (slot == 0 && options_.max_plans > 0) {
    // The least recently used other sizes go (their buffers with them).
    for (;;) {
      size_t kept = 0;
      auto oldest = plans_.end();
      for (auto it = plans_.begin(); it != plans_.end(); ++it) {
        if (it->first.second != 0) continue;
        ++kept;
        if (it->second.get() != current_ && (oldest == plans_.end() || it->second->last_use < oldest->second->last_use))
          oldest = it;
      }
      if (kept < static_cast<size_t>(options_.max_plans) || oldest == plans_.end()) break;
      plans_.erase(oldest);
    }
  }
  p->last_use = ++use_clock_;
  plans_[{batch, slot}] = std::move(p);
  return Status::OK();
}

void GraphModel::BindGradients(Plan_& p) {
  if (p.grads_bound) return;
  p.grad_arena = DeviceBuffer<float>(backend_, p.grad_floats);
  if (options_.poison_plans) backend_->Fill(p.grad_arena.data(), p.grad_floats, std::nanf(""));
  backend_->Fill(p.grad_arena.data(), p.output_grad_floats, 0.0f);
  float* base = p.grad_arena.data();
  auto at = [&](size_t offset) { return offset == Plan_::kNoGrad ? nullptr : base + offset; };
  const Values_& table = *values_;
  for (size_t a = 0; a < table.num_acts; ++a) p.act_grad[a] = at(p.act_grad_offset[a]);
  for (size_t k = 0; k < graph_.inputs.size(); ++k) p.input_grad[k] = at(p.input_grad_offset[k]);
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    if (!kernels_[k]) continue;
    const Node& n = graph_.nodes[k];
    for (KernelCall* c : {&p.calls[k], &p.sgd_calls[k]}) {
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i].empty() || kernels_[k]->IsIndexInput(i) || kernels_[k]->IsStateInput(i)) continue;
        const ValueRef& r = table.refs.at(n.inputs[i]);
        if (r.where == Where::kInput) c->din[i] = p.input_grad[r.index];
        if (r.where == Where::kActivation) c->din[i] = p.act_grad[r.index];
      }
      for (size_t o = 0; o < n.outputs.size(); ++o)
        if (!n.outputs[o].empty()) c->dout[o] = p.act_grad[table.refs.at(n.outputs[o]).index];
    }
  }
  for (const auto& [k, j] : p.fusions) p.calls[k].dout[0] = p.sgd_calls[k].dout[0] = p.calls[j].dout[0];
  p.grads_bound = true;
}

const GraphModel::Plan_& GraphModel::AnyPlan(int64_t batch) const {
  auto it = plans_.lower_bound({batch, 0u});
  FM_CHECK(it != plans_.end() && it->first.first == batch);
  return *it->second;
}

float* GraphModel::input(size_t k, int64_t batch, uint32_t slot) { return plans_.at({batch, slot})->input_data[k]; }

const Dims& GraphModel::input_dims(size_t k, int64_t batch) const { return AnyPlan(batch).input_dims[k]; }

Status GraphModel::Select(int64_t batch, uint32_t slot) {
  auto it = plans_.find({batch, slot});
  if (it == plans_.end()) {
    return Status::NotFound("no plan for a batch of " + std::to_string(batch) + " in slot " + std::to_string(slot));
  }
  current_ = it->second.get();
  current_->last_use = ++use_clock_;
  return Status::OK();
}

Status GraphModel::Forward(int64_t batch, bool training, uint64_t seed, uint32_t slot) {
  auto it = plans_.find({batch, slot});
  if (it == plans_.end()) {
    FM_RETURN_IF_ERROR(Plan(batch, slot));
    it = plans_.find({batch, slot});
  }
  current_ = it->second.get();
  current_->last_use = ++use_clock_;
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    if (!kernels_[k] || current_->fused[k]) continue;
    KernelCall& c = current_->calls[k];
    c.training = training;
    c.seed = SplitMix64(seed + 0x9e3779b97f4a7c15ull * (k + 1));
    Status s = kernels_[k]->Forward(c);
    if (!s.ok()) return s;
  }
  if (training) BindGradients(*current_);
  if (current_->grads_bound) backend_->Fill(current_->grad_arena.data(), current_->output_grad_floats, 0.0f);
  return Status::OK();
}

const float* GraphModel::output(size_t k) const {
  FM_CHECK(current_ != nullptr);
  return current_->act[values_->refs.at(graph_.outputs[k].name).index];
}

const Dims& GraphModel::output_dims(size_t k) const {
  FM_CHECK(current_ != nullptr);
  return current_->act_dims[values_->refs.at(graph_.outputs[k].name).index];
}

const Dims& GraphModel::output_dims_for(size_t k, int64_t batch) const {
  return AnyPlan(batch).act_dims[values_->refs.at(graph_.outputs[k].name).index];
}

float* GraphModel::output_grad(size_t k) {
  FM_CHECK(current_ != nullptr);
  BindGradients(*current_);
  return current_->act_grad[values_->refs.at(graph_.outputs[k].name).index];
}

void GraphModel::Backward() {
  FM_CHECK(current_ != nullptr);
  Plan_& p = *current_;
  BindGradients(p);
  for (const auto& [offset, size] : p.act_grad_zero) backend_->Fill(p.grad_arena.data() + offset, size, 0.0f);
  for (const auto& [offset, size] : p.grad_zero) backend_->Fill(grads_.data() + offset, size, 0.0f);
  for (size_t k = graph_.nodes.size(); k-- > 0;)
    if (kernels_[k] && p.run_backward[k] && !p.fused[k]) kernels_[k]->Backward(p.calls[k]);
}

void GraphModel::BackwardSgd(float lr) {
  FM_CHECK(current_ != nullptr);
  Plan_& p = *current_;
  BindGradients(p);
  for (const auto& [offset, size] : p.act_grad_zero) backend_->Fill(p.grad_arena.data() + offset, size, 0.0f);
  for (const auto& [offset, size] : p.sgd_rest) backend_->Fill(grads_.data() + offset, size, 0.0f);
  for (size_t k = graph_.nodes.size(); k-- > 0;) {
    if (!kernels_[k] || !p.run_backward[k] || p.fused[k]) continue;
    p.sgd_calls[k].lr = lr;
    kernels_[k]->Backward(p.sgd_calls[k]);
  }
  for (const auto& [offset, size] : p.sgd_rest)
    backend_->SgdStep(params_.data() + offset, grads_.data() + offset, /*velocity=*/nullptr,
                      nullptr, size, SgdStepParams{.lr = lr});
}

size_t GraphModel::num_fused_relus(int64_t batch) const {
  const std::vector<bool>& f = AnyPlan(batch).fused;
  return static_cast<size_t>(std::count(f.begin(), f.end(), true));
}

size_t GraphModel::planned_bytes() const {
  size_t floats = 0;
  for (const auto& [key, p] : plans_) floats += p->arena.size() + p->grad_arena.size();
  return floats * sizeof(float);
}

const float* GraphModel::input_grad(size_t k) const {
  FM_CHECK(current_ != nullptr);
  return current_->input_grad[k];
}

const float* GraphModel::value(const std::string& name, Dims* dims) const {
  const Values_& table = *values_;
  auto it = table.refs.find(name);
  if (it == table.refs.end()) return nullptr;
  const ValueRef& r = it->second;
  switch (r.where) {
    case Where::kActivation:
      if (!current_) return nullptr;
      if (dims) *dims = current_->act_dims[r.index];
      return current_->act[r.index];
    case Where::kInput:
      if (!current_) return nullptr;
      if (dims) *dims = current_->input_dims[r.index];
      return current_->input_data[r.index];
    case Where::kParam:
      if (dims) *dims = r.dims;
      return params_.data() + r.index;
    case Where::kState:
      if (dims) *dims = r.dims;
      return params_.data() + r.index;
    case Where::kConst:
      if (dims) *dims = r.dims;
      return constants() + r.index;
  }
  return nullptr;
}

const float* GraphModel::constants() const {
  return backend_->host_memory() ? constant_floats_.data() : constant_device_.data();
}

static std::vector<Tensor> Copies(const std::vector<TensorSlot>& slots, const float* base, Backend& be) {
  std::vector<Tensor> out;
  for (const TensorSlot& s : slots) {
    Tensor t;
    t.name = s.name;
    t.dims = s.dims;
    t.f.resize(s.size);
    if (s.size > 0) be.CopyToHost(t.f.data(), base + s.offset, s.size * sizeof(float));
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<Tensor> GraphModel::ParamTensors() const { return Copies(param_slots_, params_.data(), *backend_); }
std::vector<Tensor> GraphModel::StateTensors() const { return Copies(state_slots_, params_.data(), *backend_); }

namespace {

bool Glob(const char* p, const char* s) {
  if (*p == '\0') return *s == '\0';
  if (*p == '*') return Glob(p + 1, s) || (*s != '\0' && Glob(p, s + 1));
  if (*s == '\0') return false;
  return (*p == '?' || *p == *s) && Glob(p + 1, s + 1);
}

}  // namespace

Result<std::vector<std::pair<size_t, size_t>>> MatchTensors(
    const GraphModel& m, const std::vector<std::string>& patterns) {
  std::vector<std::pair<size_t, size_t>> out;
  std::vector<bool> used(patterns.size(), false);
  for (const auto* slots : {&m.param_slots(), &m.state_slots()})
    for (const TensorSlot& s : *slots) {
      bool hit = false;
      for (size_t k = 0; k < patterns.size(); ++k)
        if (Glob(patterns[k].c_str(), s.name.c_str())) hit = used[k] = true;
      if (hit) out.push_back({s.offset, s.size});
    }
  for (size_t k = 0; k < patterns.size(); ++k)
    if (!used[k]) {
      std::string names;
      for (const auto* slots : {&m.param_slots(), &m.state_slots()})
        for (const TensorSlot& s : *slots) names += (names.empty() ? "" : ", ") + s.name;
      return Status::InvalidArgument("local pattern '" + patterns[k] +
                                     "' matches no tensor of the model; its tensors are: " + names);
    }
  return out;
}

}  // namespace fedmesh::graph
