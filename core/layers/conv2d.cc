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
  const size_t n = size_t(max_batch) * geom_.out_h() * geom_.out_w() * col_len();
  if (cols_.size() < n) {
    cols_ = DeviceBuffer<float>(backend, n);
    dcols_ = DeviceBuffer<float>(backend, n);
  }
}

void Conv2d::Forward(Backend& be, const float* x, float* y, int batch, bool, uint64_t) {
  const WindowGeometry g = Geometry(batch);
  const int rows = batch * g.out_h() * g.out_w();
  be.Im2Col(x, g, cols_.data());
  be.Gemm(false, true, rows, o_.out_channels, col_len(), 1.0f, cols_.data(), col_len(), w_,
          col_len(), 0.0f, y, o_.out_channels);
  be.AddBias(y, b_, rows, o_.out_channels);
}

void Conv2d::Backward(Backend& be, const float*, const float*, const float* dy, float* dx,
                      int batch) {
  const WindowGeometry g = Geometry(batch);
  const int rows = batch * g.out_h() * g.out_w();
  const int oc = o_.out_channels;
  be.Gemm(true, false, oc, col_len(), rows, 1.0f, dy, oc, cols_.data(), col_len(), 0.0f, dw_,
          col_len());
  be.BiasGrad(dy, db_, rows, oc);
  if (dx != nullptr) {
    be.Gemm(false, false, rows, col_len(), oc, 1.0f, dy, oc, w_, col_len(), 0.0f,
            dcols_.data(), col_len());
    be.Col2Im(dcols_.data(), g, dx);
  }
}

}  // namespace fedmesh
