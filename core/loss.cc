#include "core/loss.h"

#include <algorithm>
#include <cmath>

namespace fedmesh {

Result<LossKind> ParseLossKind(const std::string& name) {
  if (name == "cross_entropy") return LossKind::kCrossEntropy;
  if (name == "bce_with_logits") return LossKind::kBceWithLogits;
  if (name == "mse") return LossKind::kMse;
  if (name == "huber") return LossKind::kHuber;
  return Status::InvalidArgument("unknown loss '" + name +
                                 "'; known: cross_entropy, bce_with_logits, mse, huber");
}

const char* LossKindName(LossKind k) {
  switch (k) {
    case LossKind::kCrossEntropy: return "cross_entropy";
    case LossKind::kBceWithLogits: return "bce_with_logits";
    case LossKind::kMse: return "mse";
    case LossKind::kHuber: return "huber";
  }
  return "?";
}

Status ValidateLossOptions(const LossOptions& o) {
  for (float w : o.class_weights)
    if (!(std::isfinite(w) && w > 0))
      return Status::InvalidArgument("class_weights must be finite and > 0");
  if (!o.class_weights.empty() && o.kind != LossKind::kCrossEntropy)
    return Status::InvalidArgument("class_weights apply to cross_entropy only");
  if (!(std::isfinite(o.pos_weight) && o.pos_weight > 0))
    return Status::InvalidArgument("pos_weight must be finite and > 0");
  if (o.pos_weight != 1.0f && o.kind != LossKind::kBceWithLogits)
    return Status::InvalidArgument("pos_weight applies to bce_with_logits only");
  if (!(std::isfinite(o.huber_delta) && o.huber_delta > 0))
    return Status::InvalidArgument("huber delta must be finite and > 0");
  return Status::OK();
}

namespace {

// log(1 + exp(x)) without overflow.
double Softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

}  // namespace

LossValue ComputeLoss(const LossOptions& o, const float* out, int rows, int cols,
                      const int32_t* labels, const float* targets, float* dout) {
  LossValue v;
  switch (o.kind) {
    case LossKind::kCrossEntropy: {
      // Weighted mean: the gradient divides by the batch's total weight (rows when unweighted).
      double total_w = 0.0;
      for (int r = 0; r < rows; ++r) total_w += o.class_weights.empty() ? 1.0 : o.class_weights[labels[r]];
      for (int r = 0; r < rows; ++r) {
        const float* z = out + static_cast<int64_t>(r) * cols;
        const int y = labels[r];
        const double w = o.class_weights.empty() ? 1.0 : o.class_weights[y];
        float mx = z[0];
        int arg = 0;
        for (int c = 1; c < cols; ++c)
          if (z[c] > mx) mx = z[c], arg = c;
        double sum = 0.0;
        for (int c = 0; c < cols; ++c) sum += std::exp(double(z[c]) - mx);
        const double lse = mx + std::log(sum);
        v.loss_sum += w * (lse - z[y]);
        v.correct += arg == y;
        if (dout) {
          float* d = dout + static_cast<int64_t>(r) * cols;
          for (int c = 0; c < cols; ++c) {
            const double p = std::exp(double(z[c]) - lse);
            d[c] = static_cast<float>(w * (p - (c == y ? 1.0 : 0.0)) / total_w);
          }
        }
      }
      // Report the loss so that loss_sum / rows is the weighted mean, as PyTorch's is.
      if (!o.class_weights.empty() && total_w > 0) v.loss_sum *= rows / total_w;
      break;
    }
    case LossKind::kBceWithLogits: {
      for (int r = 0; r < rows; ++r) {
        const double z = out[r];
        const double y = labels[r] != 0 ? 1.0 : 0.0;
        // -(pw y log s(z) + (1-y) log(1-s(z))) = pw y softplus(-z) + (1-y) softplus(z)
        v.loss_sum += o.pos_weight * y * Softplus(-z) + (1 - y) * Softplus(z);
        v.correct += (z > 0) == (y > 0.5);
        if (dout) {
          const double s = 1.0 / (1.0 + std::exp(-z));
          dout[r] = static_cast<float>((-o.pos_weight * y * (1 - s) + (1 - y) * s) / rows);
        }
      }
      break;
    }
    case LossKind::kMse:
    case LossKind::kHuber: {
      const int64_t n = static_cast<int64_t>(rows) * cols;
      const double delta = o.huber_delta;
      for (int64_t i = 0; i < n; ++i) {
        const double d = double(out[i]) - targets[i];
        double l, g;
        if (o.kind == LossKind::kMse) {
          l = d * d;
          g = 2 * d;
        } else if (std::fabs(d) <= delta) {
          l = 0.5 * d * d;
          g = d;
        } else {
          l = delta * (std::fabs(d) - 0.5 * delta);
          g = d > 0 ? delta : -delta;
        }
        // Mean over every element; per row, the sum of its elements / cols.
        v.loss_sum += l / cols;
        if (dout) dout[i] = static_cast<float>(g / n);
      }
      break;
    }
  }
  return v;
}

}  // namespace fedmesh
