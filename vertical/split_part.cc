#include "vertical/split_part.h"

#include <algorithm>
#include <cstring>

#include "core/builtin_graph.h"
#include "core/model.h"

namespace fedmesh::vertical {

Result<std::unique_ptr<SplitPart>> SplitPart::Create(graph::Graph g, const SplitPartOptions& options,
                                                     const std::string& what) {
  if (g.inputs.size() != 1 || g.outputs.size() != 1) {
    return Status::InvalidArgument(what + ": a split part has one input and one output; this graph has " +
                                   std::to_string(g.inputs.size()) + " inputs and " +
                                   std::to_string(g.outputs.size()) + " outputs");
  }
  std::unique_ptr<SplitPart> p(new SplitPart());
  p->options_ = options;
  p->backend_ = MakeCpuBackend(1);
  graph::GraphModelOptions go;
  go.input_gradients = options.input_gradients;
  FM_ASSIGN_OR_RETURN(p->model_, graph::GraphModel::Create(std::move(g), p->backend_.get(), go));
  FM_RETURN_IF_ERROR(p->model_->Plan(1).WithContext(what));
  const graph::Dims& in = p->model_->input_dims(0, 1);
  const graph::Dims& out = p->model_->output_dims_for(0, 1);
  if (in.size() != 2 || out.size() != 2) {
    return Status::InvalidArgument(what + ": input and output must be [batch, n] (a table's rows in, a vector per row "
                                          "out); flatten images inside the model");
  }
  p->in_cols_ = in[1];
  p->out_cols_ = out[1];
  p->grad_sum_.assign(p->model_->num_trainable(), 0.0f);
  p->velocity_.assign(p->model_->num_trainable(), 0.0f);
  return p;
}

Result<std::unique_ptr<SplitPart>> SplitPart::FromBuiltin(const ModelSpec& spec, uint64_t seed,
                                                           const SplitPartOptions& options) {
  auto backend = MakeCpuBackend(1);
  FM_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, BuildModel(spec, backend.get()));
  model->InitParams(seed);
  FM_ASSIGN_OR_RETURN(graph::Graph g, BuiltinModelGraph(spec, model->GetParams()));
  return Create(std::move(g), options, "built-in " + SpecToText(spec));
}

Status SplitPart::Forward(const float* input, int64_t rows, bool training, uint64_t seed, uint32_t slot) {
  if (slot >= kMaxSlots) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + ": a part keeps at most " +
                                   std::to_string(kMaxSlots));
  }
  LoadCurrent();
  slot_rows_.erase(slot);
  FM_RETURN_IF_ERROR(model_->Plan(rows, slot));
  std::memcpy(model_->input(0, rows, slot), input, static_cast<size_t>(rows * in_cols_) * sizeof(float));
  FM_RETURN_IF_ERROR(model_->Forward(rows, training, seed, slot));
  if (training) slot_rows_[slot] = Pending{rows, version_};
  last_slot_ = slot;
  return Status::OK();
}

void SplitPart::Load(uint64_t version) {
  if (version == loaded_) return;
  float* w = model_->params();
  const size_t n = model_->num_flat();
  if (loaded_ == version_) current_.assign(w, w + n);
  const std::vector<float>& from = version == version_ ? current_ : stash_.at(version);
  std::copy(from.begin(), from.end(), w);
  loaded_ = version;
}

void SplitPart::Backward() {
  // The last forward's activations are used up: its slot no longer waits (nor needs weights
  // kept for it).
  slot_rows_.erase(last_slot_);
  Accumulate();
}

void SplitPart::Accumulate() {
  model_->Backward();
  const float* g = model_->grads();
  for (size_t i = 0; i < grad_sum_.size(); ++i) grad_sum_[i] += g[i];
}

Status SplitPart::BackwardSlot(uint32_t slot, const float* dout) {
  auto it = slot_rows_.find(slot);
  if (it == slot_rows_.end()) {
    return Status::FailedPrecondition("micro-batch " + std::to_string(slot) + " has no training forward to go back through");
  }
  const Pending pending = it->second;
  // The backward runs on the weights its forward used (weight stashing).
  Load(pending.version);
  FM_RETURN_IF_ERROR(model_->Select(pending.rows, slot));
  std::memcpy(model_->output_grad(0), dout, static_cast<size_t>(pending.rows * out_cols_) * sizeof(float));
  slot_rows_.erase(it);
  Accumulate();
  if (pending.version != version_) {
    bool needed = false;
    for (const auto& [s, p] : slot_rows_) needed = needed || p.version == pending.version;
    if (!needed) {  // the last backward on those weights: the current ones go back in
      LoadCurrent();
      stash_.erase(pending.version);
    }
  }
  return Status::OK();
}

Status SplitPart::Restore(const std::vector<float>& params, const std::vector<float>& velocity) {
  if (params.size() != model_->num_flat() || velocity.size() != velocity_.size()) {
    return Status::InvalidArgument("a checkpoint of " + std::to_string(params.size()) + " parameters for a part of " +
                                   std::to_string(model_->num_flat()) + ": another model");
  }
  std::copy(params.begin(), params.end(), model_->params());
  velocity_ = velocity;
  std::fill(grad_sum_.begin(), grad_sum_.end(), 0.0f);
  slot_rows_.clear();
  stash_.clear();
  loaded_ = ++version_;
  return Status::OK();
}

void SplitPart::Step() {
  LoadCurrent();
  bool needed = false;
  for (const auto& [s, pending] : slot_rows_) needed = needed || pending.version == version_;
  if (needed) stash_[version_].assign(model_->params(), model_->params() + model_->num_flat());
  // Copies no pending forward needs any more go (a slot whose forward was run again).
  for (auto it = stash_.begin(); it != stash_.end();) {
    bool used = false;
    for (const auto& [s, pending] : slot_rows_) used = used || pending.version == it->first;
    it = used ? std::next(it) : stash_.erase(it);
  }
  ++version_;
  loaded_ = version_;
  SgdStepParams p;
  p.lr = options_.lr;
  p.momentum = options_.momentum;
  backend_->SgdStep(model_->params(), grad_sum_.data(), velocity_.data(), nullptr, grad_sum_.size(), p);
  std::fill(grad_sum_.begin(), grad_sum_.end(), 0.0f);
}

}  // namespace fedmesh::vertical
