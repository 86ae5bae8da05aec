// MaxPool2d over NHWC images; remembers the argmax of each output for Backward.
// Thread-safety: see core/layer.h.
#pragma once

#include "core/layer.h"

namespace fedmesh {

class MaxPool2d final : public Layer {
 public:
  // stride <= 0 means stride = kernel (non-overlapping windows).
  explicit MaxPool2d(int kernel, int stride = 0) : kernel_(kernel), stride_(stride > 0 ? stride : kernel) {}
  std::string Describe() const override;
  Result<SampleShape> Configure(const SampleShape& input) override;
  void Reserve(Backend* backend, int max_batch) override;
  void Forward(Backend& be, const float* x, float* y, int batch, bool training,
               uint64_t seed) override;
  void Backward(Backend& be, const float* x, const float* y, const float* dy, float* dx,
                int batch) override;

 private:
  int kernel_, stride_;
  WindowGeometry geom_;
  size_t in_size_ = 0, out_size_ = 0;  // per sample
  DeviceBuffer<int32_t> argmax_;
};

}  // namespace fedmesh
