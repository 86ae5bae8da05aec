// The parameter-free layers: ReLU, Flatten (a view: no copy) and Dropout (inverted
// dropout with a counter-based mask, identical on every backend for the same seed).
// Thread-safety: see core/layer.h.
#pragma once

#include "core/layer.h"

namespace fedmesh {

class Relu final : public Layer {
 public:
  std::string Describe() const override { return "ReLU"; }
  Result<SampleShape> Configure(const SampleShape& input) override;
  void Forward(Backend& be, const float* x, float* y, int batch, bool training,
               uint64_t seed) override;
  void Backward(Backend& be, const float* x, const float* y, const float* dy, float* dx,
                int batch) override;

 private:
  size_t size_ = 0;
};

class Flatten final : public Layer {
 public:
  std::string Describe() const override { return "Flatten"; }
  Result<SampleShape> Configure(const SampleShape& input) override;
  bool is_view() const override { return true; }
  void Forward(Backend& be, const float* x, float* y, int batch, bool training,
               uint64_t seed) override;
  void Backward(Backend& be, const float* x, const float* y, const float* dy, float* dx,
                int batch) override;

 private:
  size_t size_ = 0;
};

class Dropout final : public Layer {
 public:
  explicit Dropout(float p) : p_(p) {}
  std::string Describe() const override { return "Dropout(" + std::to_string(p_) + ")"; }
  Result<SampleShape> Configure(const SampleShape& input) override;
  void Reserve(Backend* backend, int max_batch) override;
  void Forward(Backend& be, const float* x, float* y, int batch, bool training,
               uint64_t seed) override;
  void Backward(Backend& be, const float* x, const float* y, const float* dy, float* dx,
                int batch) override;

 private:
  float p_;
  size_t size_ = 0;
  bool last_training_ = false;
  DeviceBuffer<float> mask_;
};

}  // namespace fedmesh
