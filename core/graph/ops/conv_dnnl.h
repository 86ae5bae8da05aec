// DnnlConv: the CPU Conv of one geometry (batch shape) through oneDNN's primitives, in the
// blocked layouts oneDNN's JIT kernels want (nChw16c and friends), with reorders from and
// to the graph's NCHW / OIHW tensors at the edges. Created by the Conv kernel (conv.cc)
// once per planned shape; everything it touches besides the tensors lives in the caller's
// workspace, so a training step allocates nothing. Where fedmesh is built without oneDNN
// (FEDMESH_HAVE_DNNL unset) or oneDNN has no implementation for a geometry, Create returns
// null and the kernel keeps its im2col + OpenBLAS path. Results differ from that path by
// float rounding only; for one thread count and one CPU they are the same run to run.
// Thread-safety: one instance is driven by one thread (its kernel's executor); oneDNN
// parallelises inside a call over the calling thread's OpenMP team.
#pragma once

#include <cstddef>
#include <memory>

#include "core/graph/ops/window_geometry.h"
#include "core/status.h"

namespace fedmesh::graph::ops {

// Which CPU convolution Conv kernels created from now on use (process-wide; read at kernel
// creation). The default is oneDNN where built, unless FEDMESH_CPU_CONV=im2col is set in the
// environment (benchmarks compare the two that way); tests switch it to run both.
enum class CpuConvEngine { kDnnl, kIm2col };
// FEDMESH_CPU_CONV as an engine: unset or empty is the default (oneDNN where built), "dnnl"
// kDnnl, "im2col" kIm2col; any other value InvalidArgument naming the variable, so that a
// typo does not silently keep the default (GraphModel::Create on the CPU refuses it).
Result<CpuConvEngine> CpuConvEngineFromEnvironment();
void SetCpuConvEngine(CpuConvEngine engine);
CpuConvEngine GetCpuConvEngine();
// True when this build links oneDNN.
bool DnnlConvBuilt();

class DnnlConv {
 public:
  virtual ~DnnlConv() = default;
  // Null when oneDNN is not built in or cannot run g (the reason is logged at debug level).
  static std::unique_ptr<DnnlConv> Create(const ConvGeometry& g, bool has_bias);

  // Floats of workspace Forward and Backward need (alignment slack included).
  virtual size_t workspace_floats() const = 0;
  // y = conv(x, w) + b (b may be null). False when oneDNN failed (the kernel says so).
  virtual bool Forward(const float* x, const float* w, const float* b, float* y, float* workspace) = 0;
  // dx += dX, or dx = dX where assign_dx (dx may be null); when want_weights, the plain [M, C/group, kH, kW] dW and [M]
  // dB are left in the workspace at weight_grad() / bias_grad(). Reads neither w nor x
  // after it returns, so the caller may then overwrite w (the fused SGD step).
  // forward_src_staged: this instance's Forward of this x was the last use of this
  // workspace, so the X it reordered is still there (the caller tracks that).
  virtual bool Backward(const float* x, const float* w, const float* dy, float* dx, bool assign_dx,
                        bool want_weights, bool forward_src_staged, float* workspace) = 0;
  virtual const float* weight_grad(const float* workspace) const = 0;
  virtual const float* bias_grad(const float* workspace) const = 0;
};

}  // namespace fedmesh::graph::ops
