// Every layer's analytic gradients (w.r.t. its input and its parameters) against central
// finite differences, and a whole model with the softmax cross-entropy head.
// Criterion: relative error ||analytic - numeric|| / max(||analytic||, ||numeric||) < 1e-3
// in float32, with inputs kept away from the kinks of ReLU and max pooling.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "core/layers/activations.h"
#include "core/layers/conv2d.h"
#include "core/layers/dense.h"
#include "core/layers/max_pool2d.h"
#include "core/model.h"

namespace fedmesh {
namespace {

double RelativeError(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max({std::sqrt(na), std::sqrt(nb), 1e-12});
}

// Inputs whose values are distinct and at least `gap` from each other and from zero, so
// a perturbation of +-eps (eps < gap/2) never crosses a ReLU or max-pool decision.
std::vector<float> SeparatedInput(size_t n, Rng& rng, float gap) {
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  rng.Shuffle(perm);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float mag = gap * (1.0f + static_cast<float>(perm[i]));
    v[i] = rng.Uniform() < 0.5 ? -mag : mag;
  }
  return v;
}

struct CheckResult {
  double input_error = 0;
  double param_error = 0;
};

// Loss = sum_i y_i * r_i (r random), so dL/dy = r exactly.
// The backend outlives the layer's buffers: tests own it.
Backend* TestBackend() {
  static std::unique_ptr<Backend> be = MakeCpuBackend(1);
  return be.get();
}

CheckResult CheckLayer(Layer& layer, const SampleShape& in_shape, int batch, uint64_t seed,
                       bool separated) {
  Backend* be = TestBackend();
  Rng rng(seed);
  auto out_shape = layer.Configure(in_shape);
  EXPECT_TRUE(out_shape.ok()) << out_shape.status().ToString();
  const size_t in_n = ShapeSize(in_shape) * batch, out_n = ShapeSize(*out_shape) * batch;
  std::vector<float> params(layer.num_params()), grads(layer.num_params());
  layer.Bind(params.data(), grads.data());
  layer.InitParams(rng, params.data());
  layer.Reserve(be, batch);

  std::vector<float> x = separated ? SeparatedInput(in_n, rng, 0.03f) : std::vector<float>(in_n);
  if (!separated) for (auto& v : x) v = static_cast<float>(rng.Normal());
  std::vector<float> r(out_n), y(out_n), dx(in_n);
  for (auto& v : r) v = static_cast<float>(rng.Normal());

  const uint64_t fwd_seed = 1234;
  auto loss = [&]() {
    std::vector<float> yy(out_n);
    layer.Forward(*be, x.data(), yy.data(), batch, /*training=*/true, fwd_seed);
    double s = 0;
    for (size_t i = 0; i < out_n; ++i) s += double(yy[i]) * r[i];
    return s;
  };
  layer.Forward(*be, x.data(), y.data(), batch, true, fwd_seed);
  layer.Backward(*be, x.data(), y.data(), r.data(), dx.data(), batch);
  const std::vector<float> analytic_params = grads;

  const float eps = 1e-2f;
  auto numeric = [&](std::vector<float>& v, size_t i) {
    const float orig = v[i];
    v[i] = orig + eps;
    const double lp = loss();
    v[i] = orig - eps;
    const double lm = loss();
    v[i] = orig;
    return (lp - lm) / (2.0 * eps);
  };
  CheckResult res;
  std::vector<double> a, n;
  for (size_t i = 0; i < in_n; ++i) {
    a.push_back(dx[i]);
    n.push_back(numeric(x, i));
  }
  res.input_error = RelativeError(a, n);
  a.clear();
  n.clear();
  for (size_t i = 0; i < params.size(); ++i) {
    a.push_back(analytic_params[i]);
    n.push_back(numeric(params, i));
  }
  res.param_error = params.empty() ? 0.0 : RelativeError(a, n);
  return res;
}

TEST(GradientCheck, Dense) {
  Dense layer(7);
  auto r = CheckLayer(layer, {13}, 4, 1, false);
  EXPECT_LT(r.input_error, 1e-3);
  EXPECT_LT(r.param_error, 1e-3);
}

TEST(GradientCheck, Relu) {
  Relu layer;
  auto r = CheckLayer(layer, {50}, 3, 2, true);
  EXPECT_LT(r.input_error, 1e-3);
}

TEST(GradientCheck, Conv2dSamePadding) {
  Conv2d layer({4, 3, 1, 1});
  auto r = CheckLayer(layer, {6, 5, 2}, 2, 3, false);
  EXPECT_LT(r.input_error, 1e-3);
  EXPECT_LT(r.param_error, 1e-3);
}

TEST(GradientCheck, Conv2dStrideTwoNoPadding) {
  Conv2d layer({3, 3, 2, 0});
  auto r = CheckLayer(layer, {7, 7, 3}, 2, 4, false);
  EXPECT_LT(r.input_error, 1e-3);
  EXPECT_LT(r.param_error, 1e-3);
}

TEST(GradientCheck, Conv2dStrideTwoPadTwo) {
  Conv2d layer({2, 5, 2, 2});
  auto r = CheckLayer(layer, {8, 6, 1}, 3, 5, false);
  EXPECT_LT(r.input_error, 1e-3);
  EXPECT_LT(r.param_error, 1e-3);
}

TEST(GradientCheck, MaxPool2d) {
  MaxPool2d layer(2);
  auto r = CheckLayer(layer, {6, 6, 3}, 2, 6, true);
  EXPECT_LT(r.input_error, 1e-3);
}

TEST(GradientCheck, MaxPool2dOverlapping) {
  MaxPool2d layer(3, 2);
  auto r = CheckLayer(layer, {7, 7, 2}, 2, 7, true);
  EXPECT_LT(r.input_error, 1e-3);
}

TEST(GradientCheck, Flatten) {
  Flatten layer;
  auto r = CheckLayer(layer, {3, 4, 2}, 2, 8, false);
  EXPECT_LT(r.input_error, 1e-3);
}

TEST(GradientCheck, DropoutWithFixedMask) {
  Dropout layer(0.3f);
  auto r = CheckLayer(layer, {40}, 3, 9, false);
  EXPECT_LT(r.input_error, 1e-3);
}

// The whole stack with the softmax cross-entropy head: d(mean loss)/d(params).
TEST(GradientCheck, ModelWithSoftmaxCrossEntropy) {
  auto be = MakeCpuBackend(1);
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Conv2d>(Conv2dOptions{3, 3, 1, 1}));
  layers.push_back(std::make_unique<Relu>());
  layers.push_back(std::make_unique<MaxPool2d>(2));
  layers.push_back(std::make_unique<Flatten>());
  layers.push_back(std::make_unique<Dense>(6));
  layers.push_back(std::make_unique<Relu>());
  layers.push_back(std::make_unique<Dense>(4));
  auto model = Model::Create("tiny", be.get(), {6, 6, 1}, 4, std::move(layers));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  m.InitParams(11);
  const int batch = 5;
  m.Reserve(batch);
  Dataset d;
  d.sample_shape = {6, 6, 1};
  d.num_classes = 4;
  Rng rng(12);
  for (int i = 0; i < batch * 36; ++i) d.features.push_back(static_cast<float>(rng.Normal()));
  for (int i = 0; i < batch; ++i) d.labels.push_back(static_cast<int32_t>(rng.UniformInt(4)));
  m.LoadContiguousBatch(d, 0, batch);
  m.ForwardBackward(batch, 0);
  const std::vector<float> analytic = m.GetGrads();
  std::vector<float> p = m.GetParams();
  auto loss = [&]() {
    EXPECT_TRUE(m.SetParams(p).ok());
    return m.Evaluate(batch).loss_sum / batch;
  };
  // Small: larger steps cross ReLU/max-pool decisions inside the stack (the error then
  // grows linearly with eps); loss is accumulated in double, so float noise stays small.
  const float eps = 3e-4f;
  std::vector<double> a(analytic.begin(), analytic.end()), n;
  for (size_t i = 0; i < p.size(); ++i) {
    const float orig = p[i];
    p[i] = orig + eps;
    const double lp = loss();
    p[i] = orig - eps;
    const double lm = loss();
    p[i] = orig;
    n.push_back((lp - lm) / (2.0 * eps));
  }
  EXPECT_LT(RelativeError(a, n), 1e-3);
}

}  // namespace
}  // namespace fedmesh
