// Losses by task, computed on the host over a model's output [rows, cols]:
//   cross_entropy    softmax cross-entropy over classes, optional class weights (PyTorch's
//                    weighted mean: sum w[y] * nll / sum w[y])
//   bce_with_logits  binary, one logit per row (cols == 1), labels 0/1, optional pos_weight
//   mse              mean squared error against float targets, over rows x cols
//   huber            PyTorch's HuberLoss(delta): 0.5 d^2 within delta, delta (|d| - delta/2) out
// Each returns the summed loss over rows (the Trainer divides by the sample count) and
// writes the gradient of the batch's mean loss (the quantity SGD steps on) when asked.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace fedmesh {

enum class LossKind { kCrossEntropy, kBceWithLogits, kMse, kHuber };

struct LossOptions {
  LossKind kind = LossKind::kCrossEntropy;  // default: softmax cross-entropy
  std::vector<float> class_weights;         // cross_entropy: one per class; empty = all 1
  float pos_weight = 1.0f;                  // bce_with_logits: weight of the positive term
  float huber_delta = 1.0f;                 // huber: where the quadratic part ends
};

Result<LossKind> ParseLossKind(const std::string& name);
const char* LossKindName(LossKind kind);
// Finite, positive weights; at least 2 classes for class weights; delta > 0.
Status ValidateLossOptions(const LossOptions& o);
// True for losses over float targets (mse, huber) rather than integer labels.
inline bool IsRegression(LossKind k) { return k == LossKind::kMse || k == LossKind::kHuber; }

struct LossValue {
  double loss_sum = 0.0;  // over rows (each row's loss, weighted where weights apply)
  int64_t correct = 0;    // rows classified right (0 for regression)
};

// REQUIRES: labels (classification, in range) or targets (regression, rows * cols) as the
// kind needs; cols == 1 for bce_with_logits; class_weights empty or of size cols.
// dout (rows * cols) receives d(mean loss)/d(out) when not null.
LossValue ComputeLoss(const LossOptions& o, const float* out, int rows, int cols,
                      const int32_t* labels, const float* targets, float* dout);

}  // namespace fedmesh
