// OpKernel: the forward and backward computation of one graph node, created once per node
// at load from a table of op types (op_registry.cc), so an unsupported op is reported by
// name before anything runs. Shape checks (InferShapes) are separate from compute; the
// executor calls them once per batch size and plans every buffer from the result, so a
// training step allocates nothing.
//
// Tensors are float32 in the executor's memory (host memory: the graph ops run on the CPU
// backend). Run-time int64 values (embedding indices) travel as exact float32 integers.
// Constant inputs the kernel must know at load (Reshape's shape, Unsqueeze's axes) come
// from KernelContext. Backward ACCUMULATES into din (the executor zeroes gradients before
// the backward pass), so a value consumed by several nodes gets the sum of its gradients.
// Thread-safety: a kernel belongs to one executor, driven by one thread; kernels may use
// OpenMP inside a call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/graph/graph.h"
#include "core/status.h"

namespace fedmesh::graph {

// Everything a kernel may read at creation.
struct KernelContext {
  const Node* node = nullptr;
  int64_t opset = 17;
  // The constant value named `name` (an initializer or a Constant node's output), or null
  // when the value is computed at run time.
  std::function<const Tensor*(const std::string& name)> constant;
};

// One call of a kernel: pointers and concrete dims of every input and output, planned by
// the executor for one batch size. Absent optional inputs have null data.
struct KernelCall {
  Backend* be = nullptr;
  std::vector<float*> in;  // mutable for state inputs (BatchNorm running statistics)
  std::vector<const Dims*> in_dims;
  std::vector<float*> out;
  std::vector<const Dims*> out_dims;
  std::vector<float*> din;         // backward: accumulate here; null when not needed
  // Backward fused with plain SGD (GraphModel::BackwardSgd): where step_input[i] is true,
  // din[i] is the PARAMETER itself and the kernel applies din[i] += -lr * gradient, after
  // every use of its old value. Only for inputs the kernel declares CanStepInput. Empty
  // (the default) in ordinary backward passes.
  std::vector<bool> step_input;
  float lr = 0.0f;
  // Where overwrite_input[i] is true, din[i] (a parameter gradient read by no one else) was
  // not zeroed and the kernel writes din[i] = gradient. Only for CanStepInput inputs, and
  // for activations' gradients where CanOverwriteInputGradient(i).
  std::vector<bool> overwrite_input;

  // How Backward writes input i's gradient g: din[i] = keep * din[i] + scale * g.
  struct GradWrite {
    float scale = 1.0f;
    float keep = 1.0f;
  };
  GradWrite Write(size_t i) const {
    if (i < step_input.size() && step_input[i]) return {-lr, 1.0f};
    if (i < overwrite_input.size() && overwrite_input[i]) return {1.0f, 0.0f};
    return {};
  }
  std::vector<const float*> dout;  // backward: gradient of each output (zeros if unused)
  float* workspace = nullptr;      // WorkspaceFloats() floats, kept from Forward to Backward
  // A Relu fused into this node (OpKernel::CanFuseRelu): Forward writes max(0, result) to
  // out[0] (the Relu's output: x > 0 ? x : 0, NaN to 0, as the Relu kernel), and Backward's
  // dout[0] is the gradient of that output, which the kernel masks by out[0] > 0 (the
  // Relu's own rule, since out[0] > 0 exactly where the result was) before using it. The
  // kernel may mask dout[0] in place (Conv does): after Backward it holds the gradient of
  // the node's own result, which nothing but this node reads.
  bool relu_epilogue = false;
  bool training = false;
  uint64_t seed = 0;  // varies per step; only stochastic kernels read it
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  // Output dims from input dims (all concrete). Fails with a sentence naming the shapes.
  virtual Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const = 0;
  // Floats of workspace this call needs, for these shapes (InferShapes succeeded).
  virtual size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>& out) const {
    (void)in, (void)out;
    return 0;
  }
  // Input i is non-trainable state the kernel updates in training (running statistics).
  virtual bool IsStateInput(size_t i) const {
    (void)i;
    return false;
  }
  // Input i carries no gradient (indices, shapes, masks): the executor passes din[i] null.
  virtual bool IsIndexInput(size_t i) const {
    (void)i;
    return false;
  }
  // Input i (a parameter read by this node alone) may be stepped in place during Backward
  // (KernelCall::step_input) or have its gradient overwritten (overwrite_input): the kernel
  // writes din[i] once, as KernelCall::Write(i) says, and reads the input's old value for
  // nothing after writing it.
  virtual bool CanStepInput(size_t i) const {
    (void)i;
    return false;
  }
  // The gradient of input i (an activation read by this node alone) may be overwritten:
  // where KernelCall::overwrite_input[i] is set, din[i] was not zeroed and the kernel
  // writes din[i] = gradient (KernelCall::Write(i)), every element of it.
  virtual bool CanOverwriteInputGradient(size_t i) const {
    (void)i;
    return false;
  }
  // Output 0 holds input 0's values unchanged, in order (a reshape): the executor may make
  // output 0 the same buffer as input 0 (an activation or a graph input), and Forward then
  // sees c.out[0] == c.in[0] and must copy nothing. Gradients keep their own buffers.
  virtual bool IsView() const { return false; }
  // The same for inputs of these shapes (a Transpose that moves only axes of size 1).
  virtual bool IsViewFor(const std::vector<Dims>& in) const {
    (void)in;
    return IsView();
  }
  // A Relu that alone reads output 0 may run inside this kernel for these shapes
  // (KernelCall::relu_epilogue): saves the Relu's pass over memory each way.
  virtual bool CanFuseRelu(const std::vector<Dims>& in, const std::vector<Dims>& out) const {
    (void)in, (void)out;
    return false;
  }
  // Fails only on data a shape check cannot see (an embedding index out of range).
  virtual Status Forward(const KernelCall& c) = 0;
  virtual void Backward(const KernelCall& c) = 0;
};

using KernelFactory = Result<std::unique_ptr<OpKernel>> (*)(const KernelContext& ctx);

// The kernel for ctx.node, or an error naming the node, its op and the supported ops.
Result<std::unique_ptr<OpKernel>> MakeKernel(const KernelContext& ctx);
// The op types MakeKernel supports, sorted (for errors, --help and docs).
std::vector<std::string> SupportedOps();

// The CUDA kernel for ctx.node (core/cuda/graph/), for a GraphModel on a CudaBackend: the
// CPU factory's errors first, then Unimplemented naming the node when the op has no CUDA
// kernel yet (and, in a build without CUDA, for every op).
Result<std::unique_ptr<OpKernel>> MakeCudaKernel(const KernelContext& ctx);
// The op types MakeCudaKernel supports, sorted (empty in a build without CUDA).
std::vector<std::string> CudaSupportedOps();

}  // namespace fedmesh::graph
