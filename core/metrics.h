// Evaluation metrics by task, accumulated batch by batch over a model's outputs:
//   multi-class (cross_entropy): accuracy, log_loss, macro_f1 (mean F1 over the classes
//     that occur in the labels or the predictions), and auc when there are 2 classes
//   binary (bce_with_logits, one logit): accuracy, auc (ROC, ties counted half), precision,
//     recall, f1 (threshold 0.5), log_loss
//   regression (mse, huber): mse, rmse, mae, r2 (1 - SSE / SST around the targets' mean)
// Thread-safety: one thread per accumulator.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/loss.h"

namespace fedmesh {

enum class Task { kMulticlass, kBinary, kRegression };
Task TaskOf(LossKind kind);

class MetricAccumulator {
 public:
  MetricAccumulator(Task task, int cols);
  // REQUIRES: labels (classification) or targets (regression, rows * cols).
  void Add(const float* out, int rows, const int32_t* labels, const float* targets);
  // The metrics named above; empty when nothing was added.
  std::map<std::string, double> Finish() const;

 private:
  Task task_;
  int cols_;
  int64_t rows_ = 0;
  double log_loss_sum_ = 0.0;
  int64_t correct_ = 0;
  std::vector<int64_t> tp_, fp_, fn_;          // per class (binary: index 0 = positive)
  std::vector<std::pair<float, bool>> scores_; // binary / 2-class: (score, positive)
  double se_ = 0.0, ae_ = 0.0, t_sum_ = 0.0, t_sq_ = 0.0;
  int64_t t_count_ = 0;
};

}  // namespace fedmesh
