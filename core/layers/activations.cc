#include "core/layers/activations.h"

namespace fedmesh {

Result<SampleShape> Relu::Configure(const SampleShape& input) {
  size_ = ShapeSize(input);
  return input;
}
void Relu::Forward(Backend& be, const float* x, float* y, int batch, bool, uint64_t) {
  be.ReluForward(x, y, size_ * batch);
}
void Relu::Backward(Backend& be, const float*, const float* y, const float* dy, float* dx,
                    int batch) {
  if (dx != nullptr) be.ReluBackward(y, dy, dx, size_ * batch);
}

Result<SampleShape> Flatten::Configure(const SampleShape& input) {
  size_ = ShapeSize(input);
  return SampleShape{static_cast<int>(size_)};
}
// Flatten is a view: the model passes x through as y, so these only run if a caller
// gave distinct buffers.
void Flatten::Forward(Backend& be, const float* x, float* y, int batch, bool, uint64_t) {
  if (x != y) be.Copy(y, x, sizeof(float) * size_ * batch);
}
void Flatten::Backward(Backend& be, const float*, const float*, const float* dy, float* dx,
                       int batch) {
  if (dx != nullptr && dx != dy) be.Copy(dx, dy, sizeof(float) * size_ * batch);
}

Result<SampleShape> Dropout::Configure(const SampleShape& input) {
  if (!(p_ >= 0.0f && p_ < 1.0f)) {
    return Status::InvalidArgument("Dropout probability must be in [0, 1), got " +
                                   std::to_string(p_));
  }
  size_ = ShapeSize(input);
  return input;
}
void Dropout::Reserve(Backend* backend, int max_batch) {
  if (mask_.size() < size_ * max_batch) mask_ = DeviceBuffer<float>(backend, size_ * max_batch);
}
void Dropout::Forward(Backend& be, const float* x, float* y, int batch, bool training,
                      uint64_t seed) {
  last_training_ = training && p_ > 0.0f;
  if (last_training_) {
    be.DropoutForward(x, y, mask_.data(), size_ * batch, p_, seed);
  } else {
    be.Copy(y, x, sizeof(float) * size_ * batch);
  }
}
void Dropout::Backward(Backend& be, const float*, const float*, const float* dy, float* dx,
                       int batch) {
  if (dx == nullptr) return;
  if (last_training_) {
    be.Multiply(dy, mask_.data(), dx, size_ * batch);
  } else {
    be.Copy(dx, dy, sizeof(float) * size_ * batch);
  }
}

}  // namespace fedmesh
