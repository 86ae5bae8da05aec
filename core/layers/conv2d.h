// Conv2d over NHWC images as im2col + one GEMM for the whole batch: the column matrix has
// one row per output pixel (N*OH*OW rows) and KH*KW*C columns, and W is stored
// [out_channels, KH, KW, C] so y = cols W^T lands directly in NHWC. The columns are kept
// from Forward to Backward, where dW = dy^T cols reuses them.
// Thread-safety: see core/layer.h.
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

 private:
  int col_len() const { return o_.kernel * o_.kernel * geom_.channels; }
  WindowGeometry Geometry(int batch) const;

  Conv2dOptions o_;
  WindowGeometry geom_;  // batch left 0; filled per call
  float* w_ = nullptr;
  float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
  DeviceBuffer<float> cols_;   // im2col of the last Forward input
  DeviceBuffer<float> dcols_;  // scratch for Backward
};

}  // namespace fedmesh
