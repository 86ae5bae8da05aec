// GraphModel's DP-SGD path (core/graph/graph_model.h, ClippedBackward): each example's
// gradient norm from a rule per parameterised op (Gemm and LayerNormalization without a
// per-example gradient; Conv from one example's gradient at a time), and the clipped sum
// from the parameterised nodes' backward pass run again over output gradients whose rows
// are rescaled (their parameter gradients are linear in those rows).
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/graph/graph_model.h"
#include "core/graph/graph_model_internal.h"

namespace fedmesh::graph {

std::vector<bool> GraphModel::ParamInputs(size_t k) const {
  const Node& n = graph_.nodes[k];
  std::vector<bool> param(n.inputs.size(), false);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    auto it = values_->refs.find(n.inputs[i]);
    param[i] = it != values_->refs.end() && it->second.where == Where::kParam;
  }
  return param;
}

Status GraphModel::PerExampleRulesCover() const {
  if (!backend_->host_memory())
    return Status::Unimplemented("per-example clipping of graph models runs on the CPU backend, not on " +
                                 backend_->name());
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    const Node& n = graph_.nodes[k];
    const std::vector<bool> param = ParamInputs(k);
    if (std::find(param.begin(), param.end(), true) == param.end()) continue;
    const bool c_ok = param.size() < 3 || !param[2] || [&] {
      // C a row bias ([M] or [1, M]) or a scalar: B must be a parameter to know M.
      const Dims& c = values_->refs.at(n.inputs[2]).dims;
      int64_t count = 1;
      for (int64_t d : c) count *= d;
      if (count == 1) return true;
      if (!param[1] || (c.size() == 2 && c[0] != 1) || c.size() > 2) return false;
      const Dims& b = values_->refs.at(n.inputs[1]).dims;
      return b.size() == 2 && count == (n.Int("transB", 0) != 0 ? b[0] : b[1]);
    }();
    if (n.op_type == "Gemm" && !param[0] && n.Int("transA", 0) == 0 && c_ok) continue;
    if (n.op_type == "LayerNormalization" && !param[0] && n.Int("axis", -1) != 0) continue;
    if (n.op_type == "Conv" && !param[0]) continue;
    return Status::Unimplemented(n.Label() + " has trainable parameters and no per-example "
                                 "norm rule (Gemm over an activation, Conv, LayerNormalization)");
  }
  return Status::OK();
}

Status GraphModel::ClippedBackward(double clip, float* norms) {
  FM_CHECK(current_ != nullptr);
  if (!backend_->host_memory()) return PerExampleRulesCover();  // says why not
  Plan_& p = *current_;
  const int64_t batch = p.batch;
  // Every activation's gradient (and unclipped parameter gradients, replaced below).
  Backward();
  dp_sq_.assign(static_cast<size_t>(batch), 0.0);
  std::vector<size_t> nodes;  // those with trainable parameters
  std::vector<double> gs, gb;
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    const std::vector<bool> param = ParamInputs(k);
    if (!kernels_[k] || std::find(param.begin(), param.end(), true) == param.end()) continue;
    nodes.push_back(k);
    const Node& n = graph_.nodes[k];
    const KernelCall& c = p.calls[k];
    const float* dy = c.dout[0];
    if (n.op_type == "Gemm") {
      const Dims& a = *c.in_dims[0];
      const Dims& y = *c.out_dims[0];
      if (a.size() != 2 || a[0] != batch) {
        return Status::Unimplemented(n.Label() + ": A " + DimsToString(a) + " is not [batch, K]");
      }
      const int64_t kk = a[1], m = y[1];
      const double alpha = n.Float("alpha", 1.0f), beta = n.Float("beta", 1.0f);
      int64_t c_count = 0;
      if (param.size() > 2 && param[2]) {
        c_count = 1;
        for (int64_t d : *c.in_dims[2]) c_count *= d;
      }
      for (int64_t j = 0; j < batch; ++j) {
        double aa = 0.0, gg = 0.0, sg = 0.0;
        for (int64_t t = 0; t < kk; ++t) aa += double(c.in[0][j * kk + t]) * c.in[0][j * kk + t];
        for (int64_t t = 0; t < m; ++t) {
          gg += double(dy[j * m + t]) * dy[j * m + t];
          sg += dy[j * m + t];
        }
        // Example j's dB is alpha a_j dy_j^T (or its transpose): ||.||^2 = alpha^2 |a|^2 |dy|^2.
        if (param[1]) dp_sq_[j] += alpha * alpha * aa * gg;
        if (c_count == m) dp_sq_[j] += beta * beta * gg;
        else if (c_count == 1) dp_sq_[j] += beta * beta * sg * sg;
      }
    } else if (n.op_type == "Conv") {
      // Each example's W and B gradients from the kernel's own backward pass over that
      // example alone (its workspace is scratch there), one example at a time: the same
      // GEMMs as the batch's weight gradient, materialised per example, then dropped.
      const Dims& x = *c.in_dims[0];
      const Dims& y = *c.out_dims[0];
      if (x.empty() || x[0] != batch || y.empty() || y[0] != batch) {
        return Status::Unimplemented(n.Label() + ": X " + DimsToString(x) + " is not batch-major");
      }
      Dims x1 = x, y1 = y;
      x1[0] = y1[0] = 1;
      const int64_t per_x = NumElements(x) / batch, per_y = NumElements(y) / batch;
      const int64_t nw = param[1] ? NumElements(*c.in_dims[1]) : 0;
      const int64_t nb = param.size() > 2 && param[2] ? NumElements(*c.in_dims[2]) : 0;
      dp_scaled_.resize(static_cast<size_t>(nw + nb));
      KernelCall one = c;
      one.in_dims[0] = &x1;
      one.out_dims[0] = &y1;
      one.relu_epilogue = false;  // Backward above left dy masked by a fused Relu
      one.step_input.clear();
      one.overwrite_input.clear();
      one.din.assign(c.din.size(), nullptr);
      if (nw > 0) one.din[1] = dp_scaled_.data();
      if (nb > 0) one.din[2] = dp_scaled_.data() + nw;
      for (int64_t j = 0; j < batch; ++j) {
        one.in[0] = c.in[0] + j * per_x;
        one.dout[0] = dy + j * per_y;
        std::fill(dp_scaled_.begin(), dp_scaled_.end(), 0.0f);
        kernels_[k]->Backward(one);
        for (float v : dp_scaled_) dp_sq_[j] += double(v) * v;
      }
    } else {  // LayerNormalization (PerExampleRulesCover)
      const Dims& x = *c.in_dims[0];
      const int64_t rank = static_cast<int64_t>(x.size());
      const int64_t axis = n.Int("axis", -1), ax = axis < 0 ? axis + rank : axis;
      if (ax < 1 || x.empty() || x[0] != batch) {
        return Status::Unimplemented(n.Label() + ": normalises over the batch axis");
      }
      int64_t len = 1, rows = 1;  // per example: rows of len normalised values
      for (int64_t d = 1; d < rank; ++d) (d < ax ? rows : len) *= x[d];
      const double eps = n.Float("epsilon", 1e-5f);
      for (int64_t j = 0; j < batch; ++j) {
        gs.assign(len, 0.0);
        gb.assign(len, 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          const float* v = c.in[0] + (j * rows + r) * len;
          const float* g = dy + (j * rows + r) * len;
          double s = 0.0, q = 0.0;
          for (int64_t t = 0; t < len; ++t) s += v[t];
          const double mean = s / double(len);
          for (int64_t t = 0; t < len; ++t) q += (v[t] - mean) * (v[t] - mean);
          const double inv = 1.0 / std::sqrt(q / double(len) + eps);
          for (int64_t t = 0; t < len; ++t) {
            gs[t] += double(g[t]) * (v[t] - mean) * inv;
            gb[t] += g[t];
          }
        }
        for (int64_t t = 0; t < len; ++t) {
          if (param[1]) dp_sq_[j] += gs[t] * gs[t];
          if (param.size() > 2 && param[2]) dp_sq_[j] += gb[t] * gb[t];
        }
      }
    }
  }
  // The rows hold d(mean loss)/d(output): example j's own gradient is batch times its share.
  const double b = static_cast<double>(batch);
  std::vector<float> scale(static_cast<size_t>(batch));
  for (int64_t j = 0; j < batch; ++j) {
    const double norm = b * std::sqrt(dp_sq_[j]);
    if (norms != nullptr) norms[j] = static_cast<float>(norm);
    scale[j] = static_cast<float>(b) * DpClipFactor(norm, clip);
  }
  for (const auto& [offset, size] : p.grad_zero) backend_->Fill(grads_.data() + offset, size, 0.0f);
  for (size_t k : nodes) {
    KernelCall c = p.calls[k];
    const std::vector<bool> param = ParamInputs(k);
    for (size_t i = 0; i < c.din.size(); ++i)
      if (i >= param.size() || !param[i]) c.din[i] = nullptr;
    int64_t size = 1;
    for (int64_t d : *c.out_dims[0]) size *= d;
    const int64_t per = size / batch;
    dp_scaled_.resize(static_cast<size_t>(size));
    for (int64_t j = 0; j < batch; ++j)
      for (int64_t t = 0; t < per; ++t) dp_scaled_[j * per + t] = scale[j] * c.dout[0][j * per + t];
    c.dout[0] = dp_scaled_.data();
    kernels_[k]->Backward(c);
  }
  return Status::OK();
}

}  // namespace fedmesh::graph
