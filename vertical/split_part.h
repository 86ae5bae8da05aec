// SplitPart: one party's piece of a split model (a bottom model over its own columns, or
// the label party's top model over the concatenated bottom outputs): a GraphModel with one
// input [batch, in_cols] and one output [batch, out_cols], whose gradients are summed over
// a step's micro-batches and applied once per step by SGD with momentum, as GPipe does.
// Each micro-batch of a step runs its forward in its own slot, whose activations stay until
// its backward (activation stashing, not GPipe's rematerialisation: no second forward, at
// the memory of one whole batch's activations, as unpipelined training holds).
// Thread-safety: one thread drives a part.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/graph/graph_model.h"
#include "core/model_zoo.h"
#include "core/status.h"

namespace fedmesh::vertical {

struct SplitPartOptions {
  float lr = 0.01f;       // learning rate, > 0. Default 0.01.
  float momentum = 0.0f;  // heavy-ball momentum in [0, 1). Default 0.
  // Also compute d loss / d input (the top model: each party's gradient). Default false.
  bool input_gradients = false;
};

class SplitPart {
 public:
  // `what` names the part in errors ("[split] bottom = model.onnx"). InvalidArgument when
  // the graph has other than one input and one output, or they are not [batch, n].
  static Result<std::unique_ptr<SplitPart>> Create(graph::Graph g, const SplitPartOptions& options,
                                                   const std::string& what);

  // A part built from a built-in model (core/model_zoo.h: mlp or logreg over a vector
  // input), initialised from `seed`: for tests and benchmarks that bring no ONNX file.
  static Result<std::unique_ptr<SplitPart>> FromBuiltin(const ModelSpec& spec, uint64_t seed,
                                                        const SplitPartOptions& options);

  int64_t in_cols() const { return in_cols_; }
  int64_t out_cols() const { return out_cols_; }
  graph::GraphModel& model() { return *model_; }
  const graph::GraphModel& model() const { return *model_; }

  // The most slots (micro-batches of one step) a part keeps activations for.
  static constexpr uint32_t kMaxSlots = 4096;

  // Runs `rows` rows of `input` (rows x in_cols, row-major) in `slot` (a micro-batch's
  // index in its step; < kMaxSlots), whose activations then stay until the slot's next
  // Forward. `seed` fixes dropout.
  Status Forward(const float* input, int64_t rows, bool training, uint64_t seed, uint32_t slot = 0);
  const float* output() const { return model_->output(0); }
  // d loss / d output of the last Forward: write rows x out_cols, then Backward.
  float* output_grad() { return model_->output_grad(0); }
  // Adds this micro-batch's parameter gradients to the step's sum.
  void Backward();
  // Backward of `slot`'s last Forward (a training one), from `dout` (its rows x out_cols):
  // adds its parameter gradients to the step's sum. FailedPrecondition when the slot holds
  // no training forward (none, or its backward already ran).
  Status BackwardSlot(uint32_t slot, const float* dout);
  // d loss / d input of the last Backward (options.input_gradients).
  const float* input_grad() const { return model_->input_grad(0); }
  // One SGD step on the summed gradients, which it then clears.
  void Step();
  // The optimizer's velocity (checkpoints keep it with the parameters).
  std::vector<float>& velocity() { return velocity_; }
  // Parameters (flat, with state) and velocity as saved; InvalidArgument for other sizes.
  Status Restore(const std::vector<float>& params, const std::vector<float>& velocity);

 private:
  SplitPart() = default;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<graph::GraphModel> model_;
  SplitPartOptions options_;
  int64_t in_cols_ = 0, out_cols_ = 0;
  std::vector<float> grad_sum_, velocity_;
  std::map<uint32_t, int64_t> slot_rows_;  // slots holding a training forward: its rows
};

}  // namespace fedmesh::vertical
