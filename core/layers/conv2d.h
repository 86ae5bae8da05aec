// Conv2d over NHWC images with W stored [out_channels, KH, KW, C], so that with im2col
// columns (one row per output pixel, KH*KW*C columns) y = cols W^T lands directly in
// NHWC. The arithmetic is the backend's Conv2dForward/Backward, which choose how to tile
// it; the layer owns only their workspace. Thread-safety: see core/layer.h.
#pragma once

#include "core/layer.h"

namespace fedmesh {

struct Conv2dOptions {
  int out_channels = 1;
  int kernel = 3;   // square kernel size
  int stride = 1;
  int padding = 0;  // zero padding on each side
};

class Conv2d final : public Layer {
 public:
  explicit Conv2d(const Conv2dOptions& o) : o_(o) {}
  std::string Describe() const override;
  Result<SampleShape> Configure(const SampleShape& input) override;
  size_t num_params() const override { return size_t(o_.out_channels) * (col_len() + 1); }
  void Bind(float* params, float* grads) override;
  void InitParams(Rng& rng, float* host_params) const override;
  void Reserve(Backend* backend, int max_batch) override;
  void Forward(Backend& be, const float* x, float* y, int batch, bool training,
               uint64_t seed) override;
  void Backward(Backend& be, const float* x, const float* y, const float* dy, float* dx,
                int batch) override;
  // DP-SGD: dx as Backward, and row n of per_example ([batch, num_params()], in this
  // layer's parameter order: weights then bias) example n's own parameter gradient
  // (Backend::Conv2dPerExampleBackward). Leaves the layer's gradient slice alone.
  Status PerExampleBackward(Backend& be, const float* x, const float* dy, float* dx, int batch,
                            float* per_example);

 private:
  int col_len() const { return o_.kernel * o_.kernel * geom_.channels; }
  WindowGeometry Geometry(int batch) const;

  Conv2dOptions o_;
  WindowGeometry geom_;  // batch left 0; filled per call
  float* w_ = nullptr;
  float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
  DeviceBuffer<float> workspace_;  // backend scratch, shared by Forward and Backward
};

}  // namespace fedmesh
