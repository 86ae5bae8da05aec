// Layer: one differentiable stage of a sequential model. A layer's parameters are a view
// into the model's single flat parameter buffer (and its gradients into the flat gradient
// buffer), so updates, averaging, codecs and checkpoints all work on one vector with no
// per-layer copies. Layers run all arithmetic through the Backend, so one definition
// serves CPU and CUDA. Per-sample shapes exclude the batch dimension; images are HWC.
// Thread-safety: a layer belongs to one model, driven by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/rng.h"
#include "core/status.h"

namespace fedmesh {

using SampleShape = std::vector<int>;
size_t ShapeSize(const SampleShape& s);
std::string ShapeToString(const SampleShape& s);

class Layer {
 public:
  virtual ~Layer() = default;

  // A short description such as "Dense(784->256)".
  virtual std::string Describe() const = 0;
  // Checks the input shape and returns the output shape; called once before anything else.
  virtual Result<SampleShape> Configure(const SampleShape& input) = 0;
  // Number of float parameters (weights then bias) this layer owns in the flat buffer.
  virtual size_t num_params() const { return 0; }
  // Points the layer at its slices of the model's parameter and gradient buffers.
  virtual void Bind(float* params, float* grads) {
    (void)params;
    (void)grads;
  }
  // Writes num_params() initial values into host memory, drawing from `rng` in a fixed
  // order (deterministic from the model seed).
  virtual void InitParams(Rng& rng, float* host_params) const {
    (void)rng;
    (void)host_params;
  }
  // Allocates whatever the layer keeps between Forward and Backward (im2col columns,
  // pooling argmax, dropout mask) for batches up to max_batch.
  virtual void Reserve(Backend* backend, int max_batch) {
    (void)backend;
    (void)max_batch;
  }
  // True when the output is the input itself (Flatten): the model then passes the input
  // pointer through instead of allocating and copying.
  virtual bool is_view() const { return false; }

  // y = f(x) for `batch` samples. `seed` varies per step; only stochastic layers read it.
  virtual void Forward(Backend& be, const float* x, float* y, int batch, bool training,
                       uint64_t seed) = 0;
  // Given dL/dy, writes dL/dparams into the bound gradient slice (overwriting it) and,
  // when dx is not null, dL/dx. x and y are the Forward input and output of this step.
  virtual void Backward(Backend& be, const float* x, const float* y, const float* dy,
                        float* dx, int batch) = 0;
  // Backward fused with a plain SGD step on this layer's parameters (w -= lr * dL/dw):
  // returns false, touching nothing, when the layer has no fused form; the model then
  // runs Backward and the step itself. A fused layer need not write its gradient slice.
  // Layers that compute dx from their weights must do so before updating them.
  virtual bool BackwardSgd(Backend& be, const float* x, const float* y, const float* dy,
                           float* dx, int batch, float lr) {
    (void)be, (void)x, (void)y, (void)dy, (void)dx, (void)batch, (void)lr;
    return false;
  }
};

}  // namespace fedmesh
