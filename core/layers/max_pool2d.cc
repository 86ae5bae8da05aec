#include "core/layers/max_pool2d.h"

namespace fedmesh {

std::string MaxPool2d::Describe() const {
  return "MaxPool2d(k=" + std::to_string(kernel_) + ", s=" + std::to_string(stride_) + ")";
}

Result<SampleShape> MaxPool2d::Configure(const SampleShape& input) {
  if (input.size() != 3) {
    return Status::InvalidArgument("MaxPool2d expects an HWC image input, got " +
                                   ShapeToString(input));
  }
  if (kernel_ <= 0 || kernel_ > input[0] || kernel_ > input[1]) {
    return Status::InvalidArgument("MaxPool2d kernel " + std::to_string(kernel_) +
                                   " does not fit input " + ShapeToString(input));
  }
  geom_.in_h = input[0];
  geom_.in_w = input[1];
  geom_.channels = input[2];
  geom_.kernel_h = geom_.kernel_w = kernel_;
  geom_.stride = stride_;
  geom_.pad = 0;
  SampleShape out{geom_.out_h(), geom_.out_w(), geom_.channels};
  in_size_ = ShapeSize(input);
  out_size_ = ShapeSize(out);
  return out;
}

void MaxPool2d::Reserve(Backend* backend, int max_batch) {
  if (argmax_.size() < out_size_ * max_batch) {
    argmax_ = DeviceBuffer<int32_t>(backend, out_size_ * max_batch);
  }
}

void MaxPool2d::Forward(Backend& be, const float* x, float* y, int batch, bool, uint64_t) {
  WindowGeometry g = geom_;
  g.batch = batch;
  be.MaxPoolForward(x, g, y, argmax_.data());
}

void MaxPool2d::Backward(Backend& be, const float*, const float*, const float* dy, float* dx,
                         int batch) {
  if (dx == nullptr) return;
  be.MaxPoolBackward(dy, argmax_.data(), out_size_ * batch, dx, in_size_ * batch);
}

}  // namespace fedmesh
