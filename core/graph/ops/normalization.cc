// BatchNormalization and LayerNormalization. Statistics are accumulated in double, two
// passes (mean, then squared deviations), so large activations do not lose the variance.
//
// BatchNormalization follows PyTorch in training: normalise with the batch mean and the
// biased batch variance, then update the running statistics in place with the UNBIASED
// variance, running = momentum * running + (1 - momentum) * batch (ONNX's momentum is
// PyTorch's 1 - momentum; ONNX's spec text for opset 14/15 updates running_var with the
// biased variance, PyTorch and this kernel with n/(n-1) times it). Out of training it uses
// the running statistics. The executor, not the training_mode attribute, decides which.
// LayerNormalization (opset 17) normalises over dims [axis, rank).
// Thread-safety: OpenMP inside a call; channels (rows) are independent, so results do
// not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/graph/ops/lane_sums.h"
#include "core/graph/ops/ops.h"

namespace fedmesh::graph::ops {
namespace {

constexpr int64_t kParallelWork = 32768;  // below this, one thread is faster

class BatchNorm final : public OpKernel {
 public:
  BatchNorm(std::string label, float epsilon, float momentum, size_t num_outputs)
      : label_(std::move(label)), eps_(epsilon), momentum_(momentum), num_outputs_(num_outputs) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const Dims& x = in[0];
    if (x.size() < 2)
      return Status::InvalidArgument(label_ + " needs X of rank >= 2 ([N,C,...]), got " +
                                     DimsToString(x));
    static const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
    for (size_t i = 1; i < 5; ++i)
      if (in[i] != Dims{x[1]})
        return Status::InvalidArgument(label_ + ": " + kNames[i] + " must be [" +
                                       std::to_string(x[1]) + "] for X " + DimsToString(x) +
                                       ", got " + DimsToString(in[i]));
    // Y, then running mean and var (or mean, var, saved_mean, saved_var before opset 14).
    out->assign(num_outputs_, Dims{x[1]});
    (*out)[0] = x;
    return Status::OK();
  }

  // Per channel: the mean and inverse standard deviation Forward normalised with, then a
  // flag (1 when Forward used batch statistics).
  size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>&) const override {
    return 2 * static_cast<size_t>(in[0][1]) + 1;
  }

  bool IsStateInput(size_t i) const override { return i == 3 || i == 4; }

  Status Forward(const KernelCall& c) override {
    const Dims& xd = *c.in_dims[0];
    const int64_t N = xd[0], C = xd[1], S = NumElements(xd) / std::max<int64_t>(1, N * C);
    const int64_t count = N * S;  // values per channel
    const float* x = c.in[0];
    const float* scale = c.in[1];
    const float* bias = c.in[2];
    float* run_mean = c.in[3];
    float* run_var = c.in[4];
    float* y = c.out[0];
    float* mean = c.workspace;
    float* inv_std = c.workspace + C;
    if (c.training && count < 2)
      return Status::InvalidArgument(label_ +
                                     ": training needs more than one value per "
                                     "channel to estimate a variance, got X " +
                                     DimsToString(xd));
    c.workspace[2 * C] = c.training ? 1.0f : 0.0f;
#pragma omp parallel for schedule(static) if (N * C * S > kParallelWork)
    for (int64_t ch = 0; ch < C; ++ch) {
      double m, v;
      if (c.training) {
        // Float sums over one plane (in lanes: they vectorise), double across planes; one
        // pass for both moments, shifted by the channel's first value so that the
        // variance does not cancel away (activations' means are often far from 0).
        const float k = x[ch * S];
        double s = 0.0, ss = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          float a, b;
          LaneShiftedSums(x + (n * C + ch) * S, S, k, &a, &b);
          s += a;
          ss += b;
        }
        m = k + s / static_cast<double>(count);
        const double q = std::max(0.0, ss - s * s / static_cast<double>(count));  // sum (x - m)^2
        v = q / static_cast<double>(count);  // biased: what the batch is normalised with
        const double unbiased = q / static_cast<double>(count - 1);
        run_mean[ch] = static_cast<float>(momentum_ * run_mean[ch] + (1.0 - momentum_) * m);
        run_var[ch] = static_cast<float>(momentum_ * run_var[ch] + (1.0 - momentum_) * unbiased);
      } else {
        m = run_mean[ch];
        v = run_var[ch];
      }
      const double inv = 1.0 / std::sqrt(v + eps_);
      mean[ch] = static_cast<float>(m);
      inv_std[ch] = static_cast<float>(inv);
      const float a = static_cast<float>(scale[ch] * inv);  // y = a * x + b
      const float b = static_cast<float>(bias[ch] - scale[ch] * inv * m);
      for (int64_t n = 0; n < N; ++n) {
        const float* p = x + (n * C + ch) * S;
        float* q = y + (n * C + ch) * S;
        if (c.relu_epilogue) {
          for (int64_t i = 0; i < S; ++i) {
            const float v = a * p[i] + b;
            q[i] = v > 0.0f ? v : 0.0f;
          }
        } else {
          for (int64_t i = 0; i < S; ++i) q[i] = a * p[i] + b;
        }
      }
      // Optional outputs: running mean and var after the update, then the batch mean and
      // (biased) variance the batch was normalised with: opset 9's saved_mean, saved_var.
      if (c.out.size() > 1 && c.out[1]) c.out[1][ch] = run_mean[ch];
      if (c.out.size() > 2 && c.out[2]) c.out[2][ch] = run_var[ch];
      if (c.out.size() > 3 && c.out[3]) c.out[3][ch] = static_cast<float>(m);
      if (c.out.size() > 4 && c.out[4]) c.out[4][ch] = static_cast<float>(v);
    }
    return Status::OK();
  }

  bool CanOverwriteInputGradient(size_t i) const override { return i == 0; }
  bool CanFuseRelu(const std::vector<Dims>&, const std::vector<Dims>&) const override { return true; }

  // The gradient through Y only (the statistics outputs carry none). After a training
  // forward the batch statistics depend on X; after an eval forward they are constants.
  // With a fused Relu, Y's gradient is dout[0] where out[0] > 0, else 0.
  void Backward(const KernelCall& c) override {
    const Dims& xd = *c.in_dims[0];
    const int64_t N = xd[0], C = xd[1], S = NumElements(xd) / std::max<int64_t>(1, N * C);
    const double count = static_cast<double>(N * S);
    const bool batch_stats = c.workspace[2 * C] != 0.0f;
    const float* x = c.in[0];
    const float* scale = c.in[1];
    const float* dy = c.dout[0];
    const float* mean = c.workspace;
    const float* inv_std = c.workspace + C;
    float* dx = c.din[0];
    float* dscale = c.din[1];
    float* dbias = c.din[2];
    const bool assign_dx = c.Write(0).keep == 0.0f;  // CanOverwriteInputGradient
    const float* relu_y = c.relu_epilogue ? c.out[0] : nullptr;
#pragma omp parallel for schedule(static) if (N * C * S > kParallelWork)
    for (int64_t ch = 0; ch < C; ++ch) {
      const double inv = inv_std[ch];
      const float mf = mean[ch];
      double sg = 0.0, sgx = 0.0;  // sum dy, sum dy * xhat (float within a plane)
      for (int64_t n = 0; n < N; ++n) {
        const float* p = x + (n * C + ch) * S;
        const float* g = dy + (n * C + ch) * S;
        float a = 0.0f, b = 0.0f;
        if (relu_y) {
          LaneMaskedSumAndDot(g, relu_y + (n * C + ch) * S, p, S, mf, &a, &b);
        } else {
          LaneSumAndDot(g, p, S, mf, &a, &b);
        }
        sg += a;
        sgx += b * inv;
      }
      if (dscale) dscale[ch] += static_cast<float>(sgx);
      if (dbias) dbias[ch] += static_cast<float>(sg);
      if (!dx) continue;
      const double k = scale[ch] * inv;
      // Batch statistics: dx = k * (dy - mean(dy) - xhat * mean(dy * xhat)).
      const double mg = batch_stats ? sg / count : 0.0;
      const double mgx = batch_stats ? sgx / count : 0.0;
      // dx += k*g - k*mg - k*inv*mgx * (x - m), in float.
      const float kf = static_cast<float>(k), c0 = static_cast<float>(k * mg),
                  c1 = static_cast<float>(k * inv * mgx);
      for (int64_t n = 0; n < N; ++n) {
        const float* p = x + (n * C + ch) * S;
        const float* g = dy + (n * C + ch) * S;
        float* d = dx + (n * C + ch) * S;
        if (relu_y) {
          const float* r = relu_y + (n * C + ch) * S;
          auto masked = [&](int64_t i) { const float v = g[i]; return r[i] > 0.0f ? v : 0.0f; };
          if (assign_dx) {
            for (int64_t i = 0; i < S; ++i) d[i] = kf * masked(i) - c0 - c1 * (p[i] - mf);
          } else {
            for (int64_t i = 0; i < S; ++i) d[i] += kf * masked(i) - c0 - c1 * (p[i] - mf);
          }
        } else if (assign_dx) {
          for (int64_t i = 0; i < S; ++i) d[i] = kf * g[i] - c0 - c1 * (p[i] - mf);
        } else {
          for (int64_t i = 0; i < S; ++i) d[i] += kf * g[i] - c0 - c1 * (p[i] - mf);
        }
      }
    }
  }

 private:
  std::string label_;
  float eps_, momentum_;
  size_t num_outputs_;
};

Dims StripLeadingOnes(const Dims& d) {
  size_t k = 0;
  while (k + 1 < d.size() && d[k] == 1) ++k;
  return Dims(d.begin() + k, d.end());
}

class LayerNorm final : public OpKernel {
 public:
  LayerNorm(std::string label, int64_t axis, float epsilon, bool has_bias, size_t num_outputs)
      : label_(std::move(label)),
        axis_(axis),
        eps_(epsilon),
        has_bias_(has_bias),
        num_outputs_(num_outputs) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const Dims& x = in[0];
    const int64_t r = static_cast<int64_t>(x.size());
    if (axis_ < -r || axis_ >= r)
      return Status::InvalidArgument(label_ + ": axis " + std::to_string(axis_) +
                                     " is out of range for X " + DimsToString(x));
    const int64_t ax = Axis(x);
    const Dims norm(x.begin() + ax, x.end());
    // Scale and B cover the normalised dims (leading 1s allowed, no other broadcasting).
    for (size_t i = 1; i < (has_bias_ ? 3u : 2u); ++i)
      if (StripLeadingOnes(in[i]) != StripLeadingOnes(norm))
        return Status::InvalidArgument(label_ + ": " + (i == 1 ? "Scale " : "B ") +
                                       DimsToString(in[i]) + " must match the normalised dims " +
                                       DimsToString(norm) + " of X " + DimsToString(x) + " (axis " +
                                       std::to_string(axis_) + ")");
    Dims stat = x;
    std::fill(stat.begin() + ax, stat.end(), 1);
    out->assign(num_outputs_, stat);
    (*out)[0] = x;
    return Status::OK();
  }

  // Per row: the mean, then the inverse standard deviation.
  size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>&) const override {
    int64_t rows, len;
    Extents(in[0], &rows, &len);
    return 2 * static_cast<size_t>(rows);
  }

  Status Forward(const KernelCall& c) override {
    int64_t rows, len;
    Extents(*c.in_dims[0], &rows, &len);
    const float* x = c.in[0];
    const float* scale = c.in[1];
    const float* bias = has_bias_ ? c.in[2] : nullptr;
    float* y = c.out[0];
    float* mean = c.workspace;
    float* inv_std = c.workspace + rows;
    float* mean_out = c.out.size() > 1 ? c.out[1] : nullptr;
    float* inv_out = c.out.size() > 2 ? c.out[2] : nullptr;
#pragma omp parallel for schedule(static) if (rows * len > kParallelWork)
    for (int64_t r = 0; r < rows; ++r) {
      const float* p = x + r * len;
      float* q = y + r * len;
      double s = 0.0;
      for (int64_t j = 0; j < len; ++j) s += p[j];
      const double m = s / static_cast<double>(len);
      double v = 0.0;
      for (int64_t j = 0; j < len; ++j) v += (p[j] - m) * (p[j] - m);
      const double inv = 1.0 / std::sqrt(v / static_cast<double>(len) + eps_);
      for (int64_t j = 0; j < len; ++j) {
        const double h = (p[j] - m) * inv;
        q[j] = static_cast<float>(h * scale[j] + (bias ? bias[j] : 0.0f));
      }
      mean[r] = static_cast<float>(m);
      inv_std[r] = static_cast<float>(inv);
      if (mean_out) mean_out[r] = mean[r];
      if (inv_out) inv_out[r] = inv_std[r];
    }
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    int64_t rows, len;
    Extents(*c.in_dims[0], &rows, &len);
    const float* x = c.in[0];
    const float* scale = c.in[1];
    const float* dy = c.dout[0];
    const float* mean = c.workspace;
    const float* inv_std = c.workspace + rows;
    // Gradients reaching the Mean and InvStdDev outputs, when something consumed them.
    const float* dmean = c.dout.size() > 1 ? c.dout[1] : nullptr;
    const float* dinv = c.dout.size() > 2 ? c.dout[2] : nullptr;
    const double n = static_cast<double>(len);
    if (float* dx = c.din[0]) {
#pragma omp parallel for schedule(static) if (rows * len > kParallelWork)
      for (int64_t r = 0; r < rows; ++r) {
        const float* p = x + r * len;
        const float* g = dy + r * len;
        const double m = mean[r], inv = inv_std[r];
        double sg = 0.0, sgx = 0.0;  // sum of dy*scale, and of dy*scale*xhat
        for (int64_t j = 0; j < len; ++j) {
          const double gs = double(g[j]) * scale[j];
          sg += gs;
          sgx += gs * (p[j] - m) * inv;
        }
        // d mean / dx_j = 1/n; d inv / dx_j = -inv^2 * xhat_j / n.
        const double from_mean = dmean ? dmean[r] / n : 0.0;
        const double from_inv = dinv ? -double(dinv[r]) * inv * inv / n : 0.0;
        float* d = dx + r * len;
        for (int64_t j = 0; j < len; ++j) {
          const double xhat = (p[j] - m) * inv;
          const double gs = double(g[j]) * scale[j];
          d[j] += static_cast<float>(inv * (gs - sg / n - xhat * sgx / n) + from_mean +
                                     from_inv * xhat);
        }
      }
    }
    float* dscale = c.din[1];
    float* dbias = has_bias_ ? c.din[2] : nullptr;
    if (!dscale && !dbias) return;
    // Column sums over rows, in blocks of columns so each thread reads rows contiguously
    // and the order of every sum is fixed.
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (len + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * len > kParallelWork)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t j0 = b * kBlock, j1 = std::min(len, j0 + kBlock);
      double ss[kBlock] = {}, sb[kBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const float* p = x + r * len;
        const float* g = dy + r * len;
        const double m = mean[r], inv = inv_std[r];
        for (int64_t j = j0; j < j1; ++j) {
          ss[j - j0] += double(g[j]) * (p[j] - m) * inv;
          sb[j - j0] += g[j];
        }
      }
      for (int64_t j = j0; j < j1; ++j) {
        if (dscale) dscale[j] += static_cast<float>(ss[j - j0]);
        if (dbias) dbias[j] += static_cast<float>(sb[j - j0]);
      }
    }
  }

 private:
  int64_t Axis(const Dims& x) const {
    return axis_ < 0 ? axis_ + static_cast<int64_t>(x.size()) : axis_;
  }
  void Extents(const Dims& x, int64_t* rows, int64_t* len) const {
    const int64_t ax = Axis(x);
    *rows = *len = 1;
    for (int64_t k = 0; k < static_cast<int64_t>(x.size()); ++k) (k < ax ? *rows : *len) *= x[k];
  }

  std::string label_;
  int64_t axis_;
  float eps_;
  bool has_bias_;
  size_t num_outputs_;
};

}  // namespace

KernelResult MakeBatchNormalization(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  if (n.inputs.size() != 5 ||
      std::any_of(n.inputs.begin(), n.inputs.end(), [](const std::string& s) { return s.empty(); }))
    return Status::InvalidArgument(n.Label() +
                                   " needs the five inputs X, scale, B, input_mean, input_var");
  if (n.outputs.empty() || n.outputs.size() > 5)
    return Status::InvalidArgument(n.Label() + " has " + std::to_string(n.outputs.size()) +
                                   " outputs; it takes 1 to 5");
  if (n.Int("spatial", 1) != 1)
    return Status::Unimplemented(n.Label() +
                                 ": spatial=0 (per-activation statistics, opset < 9) "
                                 "is not supported");
  const float eps = n.Float("epsilon", 1e-5f);
  const float momentum = n.Float("momentum", 0.9f);
  if (!(eps >= 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
    return Status::InvalidArgument(n.Label() + ": epsilon " + FormatNumber(eps) +
                                   " must be >= 0 and momentum " + FormatNumber(momentum) +
                                   " in [0, 1]");
  return std::unique_ptr<OpKernel>(new BatchNorm(n.Label(), eps, momentum, n.outputs.size()));
}

KernelResult MakeLayerNormalization(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  if (n.inputs.size() < 2 || n.inputs.size() > 3 || n.inputs[0].empty() || n.inputs[1].empty())
    return Status::InvalidArgument(n.Label() + " needs inputs X, Scale and an optional B");
  if (n.outputs.empty() || n.outputs.size() > 3)
    return Status::InvalidArgument(n.Label() + " has " + std::to_string(n.outputs.size()) +
                                   " outputs; it takes 1 to 3 (Y, Mean, InvStdDev)");
  const float eps = n.Float("epsilon", 1e-5f);
  if (!(eps >= 0.0f))
    return Status::InvalidArgument(n.Label() + ": epsilon " + FormatNumber(eps) + " must be >= 0");
  const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  return std::unique_ptr<OpKernel>(
      new LayerNorm(n.Label(), n.Int("axis", -1), eps, has_bias, n.outputs.size()));
}

}  // namespace fedmesh::graph::ops
