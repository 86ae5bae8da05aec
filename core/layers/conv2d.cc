#include "core/layers/conv2d.h"

#include "core/layers/dense.h"

namespace fedmesh {

std::string Conv2d::Describe() const {
  return "Conv2d(" + std::to_string(geom_.channels) + "->" + std::to_string(o_.out_channels) +
         ", k=" + std::to_string(o_.kernel) + ", s=" + std::to_string(o_.stride) +
         ", p=" + std::to_string(o_.padding) + ")";
}

Result<SampleShape> Conv2d::Configure(const SampleShape& input) {
  if (input.size() != 3) {
    return Status::InvalidArgument("Conv2d expects an HWC image input, got " +
                                   ShapeToString(input));
  }
  if (o_.out_channels <= 0 || o_.kernel <= 0 || o_.stride <= 0 || o_.padding < 0) {
    return Status::InvalidArgument("Conv2d needs out_channels, kernel, stride > 0 and padding >= 0");
  }
  geom_.in_h = input[0];
  geom_.in_w = input[1];
  geom_.channels = input[2];
  geom_.kernel_h = geom_.kernel_w = o_.kernel;
  geom_.stride = o_.stride;
  geom_.pad = o_.padding;
  if (geom_.in_h + 2 * o_.padding < o_.kernel || geom_.in_w + 2 * o_.padding < o_.kernel) {
    return Status::InvalidArgument("Conv2d kernel " + std::to_string(o_.kernel) +
                                   " is larger than the padded input " + ShapeToString(input));
  }
  return SampleShape{geom_.out_h(), geom_.out_w(), o_.out_channels};
}

WindowGeometry Conv2d::Geometry(int batch) const {
  WindowGeometry g = geom_;
  g.batch = batch;
  return g;
}

void Conv2d::Bind(float* params, float* grads) {
  const size_t nw = size_t(o_.out_channels) * col_len();
  w_ = params;
  b_ = params + nw;
  dw_ = grads;
  db_ = grads + nw;
}

void Conv2d::InitParams(Rng& rng, float* host_params) const {
  InitHeUniform(rng, col_len(), size_t(o_.out_channels) * col_len(), o_.out_channels, host_params);
}

void Conv2d::Reserve(Backend* backend, int max_batch) {
  const size_t n = backend->ConvWorkspaceFloats(Geometry(max_batch), o_.out_channels);
  if (workspace_.size() < n) workspace_ = DeviceBuffer<float>(backend, n);
}

void Conv2d::Forward(Backend& be, const float* x, float* y, int batch, bool, uint64_t) {
  be.Conv2dForward(x, Geometry(batch), w_, b_, o_.out_channels, y, workspace_.data(),
                   workspace_.size());
}

void Conv2d::Backward(Backend& be, const float* x, const float*, const float* dy, float* dx,
                      int batch) {
  be.Conv2dBackward(x, Geometry(batch), w_, o_.out_channels, dy, dw_, db_, dx,
                    workspace_.data(), workspace_.size());
}

Status Conv2d::PerExampleBackward(Backend& be, const float* x, const float* dy, float* dx,
                                  int batch, float* per_example) {
  return be.Conv2dPerExampleBackward(x, Geometry(batch), w_, o_.out_channels, dy, per_example, dx,
                                     workspace_.data(), workspace_.size());
}

}  // namespace fedmesh
