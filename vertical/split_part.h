// SplitPart: one party's piece of a split model (a bottom model over its own columns, or
// the label party's top model over the concatenated bottom outputs): a GraphModel with one
// input [batch, in_cols] and one output [batch, out_cols], whose gradients are summed over
// a step's micro-batches and applied once per step by SGD with momentum, as GPipe does.
// Each micro-batch of a step runs its forward in its own slot, whose activations stay until
// its backward (activation stashing, not GPipe's rematerialisation: no second forward, at
// the memory of one whole batch's activations, as unpipelined training holds).
// Weight stashing (PipeDream): a training forward remembers the weights it ran on. When a
// Step changes them before that forward's backward (split training with `staleness` 1:
// the next step's forwards run before this step's gradients are in), the Step keeps a copy
// of the old weights and the backward runs on it, so every micro-batch's gradient is the
// exact gradient at the weights its forward used; the Step still updates the current ones.
// At most one copy is kept per weight version some pending forward still needs.
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

  // The most slots a part keeps activations for: two steps' micro-batches (kMaxMicroBatches
  // each) while one step's forwards run before the last step's gradients are in.
  static constexpr uint32_t kMaxSlots = 8192;
  static constexpr uint32_t kMaxMicroBatches = kMaxSlots / 2;

  // Runs `rows` rows of `input` (rows x in_cols, row-major) in `slot` (a micro-batch's
  // index in its step; < kMaxSlots), whose activations then stay until the slot's next
  // Forward. `seed` fixes dropout.
  Status Forward(const float* input, int64_t rows, bool training, uint64_t seed, uint32_t slot = 0);
  const float* output() const { return model_->output(0); }
  // d loss / d output of the last Forward: write rows x out_cols, then Backward.
  float* output_grad() { return model_->output_grad(0); }
  // Adds the last Forward's parameter gradients (from output_grad()) to the step's sum; that
  // forward's slot no longer waits for a backward.
  void Backward();
  // Backward of `slot`'s last Forward (a training one), from `dout` (its rows x out_cols):
  // adds its parameter gradients to the step's sum. FailedPrecondition when the slot holds
  // no training forward (none, or its backward already ran).
  Status BackwardSlot(uint32_t slot, const float* dout);
  // d loss / d input of the last Backward (options.input_gradients).
  const float* input_grad() const { return model_->input_grad(0); }
  // One SGD step on the summed gradients, which it then clears. Keeps the weights aside
  // first when a pending training forward ran on them (weight stashing).
  void Step();
  // Weight copies kept for pending forwards (0 or 1 in split training), for tests.
  size_t stashed() const { return stash_.size(); }
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
  // Puts the weights of `version` into the model (the current ones kept in current_).
  void Load(uint64_t version);
  void LoadCurrent() { Load(version_); }
  // Runs the model's backward and adds its parameter gradients to the step's sum.
  void Accumulate();

  struct Pending {
    int64_t rows = 0;
    uint64_t version = 0;  // the weights its forward ran on
  };
  std::map<uint32_t, Pending> slot_rows_;  // slots holding a training forward
  uint32_t last_slot_ = 0;                 // the last Forward's slot
  uint64_t version_ = 0;                   // Steps taken (and Restores)
  uint64_t loaded_ = 0;                    // the version whose weights are in the model
  std::map<uint64_t, std::vector<float>> stash_;  // older versions pending forwards need
  std::vector<float> current_;                    // the current weights while an old one is loaded
};

}  // namespace fedmesh::vertical
