#include "core/layers/dense.h"

#include <algorithm>
#include <cmath>

namespace fedmesh {

void InitHeUniform(Rng& rng, int fan_in, size_t weights, size_t biases, float* out) {
  const double bound = std::sqrt(6.0 / fan_in);
  for (size_t i = 0; i < weights; ++i) out[i] = static_cast<float>(rng.Uniform(-bound, bound));
  std::fill(out + weights, out + weights + biases, 0.0f);
}

std::string Dense::Describe() const {
  return "Dense(" + std::to_string(in_) + "->" + std::to_string(out_) + ")";
}

Result<SampleShape> Dense::Configure(const SampleShape& input) {
  if (input.size() != 1) {
    return Status::InvalidArgument("Dense expects a flat input, got " + ShapeToString(input) +
                                   ": put a Flatten layer before it");
  }
  if (out_ <= 0) return Status::InvalidArgument("Dense output size must be positive");
  in_ = input[0];
  return SampleShape{out_};
}

void Dense::Bind(float* params, float* grads) {
  w_ = params;
  b_ = params + size_t(out_) * in_;
  dw_ = grads;
  db_ = grads + size_t(out_) * in_;
}

void Dense::InitParams(Rng& rng, float* host_params) const {
  InitHeUniform(rng, in_, size_t(out_) * in_, out_, host_params);
}

void Dense::Forward(Backend& be, const float* x, float* y, int batch, bool, uint64_t) {
  be.Gemm(false, true, batch, out_, in_, 1.0f, x, in_, w_, in_, 0.0f, y, out_);
  be.AddBias(y, b_, batch, out_);
}

void Dense::Backward(Backend& be, const float* x, const float*, const float* dy, float* dx,
                     int batch) {
  ParamGrads(be, x, dy, batch);
  if (dx != nullptr) InputGrad(be, dy, dx, batch);
}

void Dense::InputGrad(Backend& be, const float* dy, float* dx, int batch) {
  be.Gemm(false, false, batch, in_, out_, 1.0f, dy, out_, w_, in_, 0.0f, dx, in_);
}

void Dense::ParamGrads(Backend& be, const float* x, const float* dy, int batch) {
  be.Gemm(true, false, out_, in_, batch, 1.0f, dy, out_, x, in_, 0.0f, dw_, in_);
  be.BiasGrad(dy, db_, batch, out_);
}

bool Dense::BackwardSgd(Backend& be, const float* x, const float*, const float* dy, float* dx,
                        int batch, float lr) {
  if (dx != nullptr) be.Gemm(false, false, batch, in_, out_, 1.0f, dy, out_, w_, in_, 0.0f, dx, in_);
  be.Gemm(true, false, out_, in_, batch, -lr, dy, out_, x, in_, 1.0f, w_, in_);
  be.BiasGrad(dy, db_, batch, out_);
  be.SgdStep(b_, db_, /*velocity=*/nullptr, nullptr, out_, SgdStepParams{.lr = lr});
  return true;
}

}  // namespace fedmesh
