// The private parts of GraphModel (core/graph/graph_model.h): where each named value lives
// and the buffers and kernel calls planned for one batch size. Shared by the files that
// implement GraphModel (graph_model.cc, graph_model_dp.cc); nothing else includes it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/graph/graph_model.h"

namespace fedmesh::graph {

enum class GraphModel::Where { kInput, kParam, kState, kConst, kActivation };

struct GraphModel::ValueRef {
  Where where = Where::kActivation;
  size_t index = 0;  // input number, offset into params/state/consts, or activation slot
  Dims dims;         // fixed dims (params, state, consts); inputs: declared
};

struct GraphModel::Values_ {
  std::unordered_map<std::string, ValueRef> refs;
  size_t num_acts = 0;
};

// Buffers and kernel calls for one batch size.
struct GraphModel::Plan_ {
  int64_t batch = 0;
  uint64_t last_use = 0;  // GraphModel::use_clock_ when last planned, selected or run
  std::vector<Dims> act_dims;          // per activation slot
  std::vector<float*> act;             // per activation slot
  std::vector<float*> act_grad;        // per activation slot; null when no gradient flows
  std::vector<float*> input_data;      // per graph input
  std::vector<float*> input_grad;      // per graph input (null unless requested)
  std::vector<KernelCall> calls;       // per node (unused for Constant nodes)
  // BackwardSgd: the calls with parameters read by one kernel that can step them stepped
  // in place, and the (offset, size) ranges left for a separate SgdStep.
  std::vector<KernelCall> sgd_calls;
  std::vector<std::pair<size_t, size_t>> sgd_rest;
  // Backward: the (offset, size) ranges of the gradient vector to zero first; parameters
  // whose one reader overwrites their gradient (KernelCall::overwrite_input) are left out.
  std::vector<std::pair<size_t, size_t>> grad_zero;
  // Backward and BackwardSgd: the (offset, size) ranges of grad_arena past the output
  // gradients to zero first; activations whose one reader overwrites their gradient
  // (OpKernel::CanOverwriteInputGradient) are left out.
  std::vector<std::pair<size_t, size_t>> act_grad_zero;
  std::vector<bool> run_backward;      // per node
  // Per node: a Relu that runs inside the kernel producing its input (that call's
  // relu_epilogue), so Forward and Backward skip it. See GraphModelOptions::fuse_relu.
  std::vector<bool> fused;
  std::vector<Dims> input_dims;        // per graph input
  std::vector<std::vector<Dims>> node_in, node_out;  // per node: what the calls point at
  std::vector<std::pair<size_t, size_t>> fusions;    // (producer, Relu) node pairs
  DeviceBuffer<float> arena;           // activations, workspaces
  // Output gradients first, then the rest. Allocated by GraphModel::BindGradients at the
  // plan's first training Forward (or output_grad / Backward), so a plan that only
  // evaluates holds none; until then act_grad, input_grad and the calls' activation and
  // input gradient pointers are null.
  DeviceBuffer<float> grad_arena;
  bool grads_bound = false;
  size_t grad_floats = 0;              // grad_arena's size once bound
  static constexpr size_t kNoGrad = SIZE_MAX;
  std::vector<size_t> act_grad_offset;    // per activation slot: offset in grad_arena or kNoGrad
  std::vector<size_t> input_grad_offset;  // per graph input: the same
  size_t output_grad_floats = 0;       // the head of grad_arena that Backward keeps
};

}  // namespace fedmesh::graph
