#include "core/metrics.h"

#include <algorithm>
#include <cmath>

namespace fedmesh {

Task TaskOf(LossKind kind) {
  switch (kind) {
    case LossKind::kCrossEntropy: return Task::kMulticlass;
    case LossKind::kBceWithLogits: return Task::kBinary;
    default: return Task::kRegression;
  }
}

MetricAccumulator::MetricAccumulator(Task task, int cols) : task_(task), cols_(cols) {
  const int classes = task == Task::kMulticlass ? cols : 1;
  tp_.assign(classes, 0);
  fp_.assign(classes, 0);
  fn_.assign(classes, 0);
}

void MetricAccumulator::Add(const float* out, int rows, const int32_t* labels,
                            const float* targets) {
  rows_ += rows;
  if (task_ == Task::kRegression) {
    for (int64_t i = 0; i < static_cast<int64_t>(rows) * cols_; ++i) {
      const double d = double(out[i]) - targets[i];
      se_ += d * d;
      ae_ += std::fabs(d);
      t_sum_ += targets[i];
      t_sq_ += double(targets[i]) * targets[i];
      ++t_count_;
    }
    return;
  }
  if (task_ == Task::kBinary) {
    for (int r = 0; r < rows; ++r) {
      const double z = out[r];
      const bool y = labels[r] != 0, pred = z > 0;
      correct_ += pred == y;
      tp_[0] += pred && y;
      fp_[0] += pred && !y;
      fn_[0] += !pred && y;
      // -log s(z) = softplus(-z) for a positive, -log(1 - s(z)) = softplus(z) for a negative.
      const double softplus_neg = z > 0 ? std::log1p(std::exp(-z)) : -z + std::log1p(std::exp(z));
      log_loss_sum_ += y ? softplus_neg : softplus_neg + z;
      scores_.push_back({static_cast<float>(z), y});
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const float* z = out + static_cast<int64_t>(r) * cols_;
    const int y = labels[r];
    int arg = 0;
    float mx = z[0];
    for (int c = 1; c < cols_; ++c)
      if (z[c] > mx) mx = z[c], arg = c;
    double sum = 0.0;
    for (int c = 0; c < cols_; ++c) sum += std::exp(double(z[c]) - mx);
    const double lse = mx + std::log(sum);
    log_loss_sum_ += lse - z[y];
    correct_ += arg == y;
    if (arg == y) {
      ++tp_[y];
    } else {
      ++fp_[arg];
      ++fn_[y];
    }
    if (cols_ == 2) scores_.push_back({static_cast<float>(z[1] - z[0]), y == 1});
  }
}

namespace {

// Area under the ROC curve from (score, positive) pairs: the Mann-Whitney statistic, ties
// counted half. NaN when one class is absent.
double Auc(std::vector<std::pair<float, bool>> s) {
  // A diverged model's NaN scores have no order: sorting them breaks std::sort's contract and
  // the tie loop below would never advance. The AUC of such scores is undefined.
  for (const auto& [score, positive] : s) {
    if (std::isnan(score)) return std::nan("");
  }
  std::sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double pos = 0, neg = 0, rank_sum = 0;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j < s.size() && s[j].first == s[i].first) ++j;
    const double avg_rank = (i + 1 + j) / 2.0;  // ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (s[k].second) {
        rank_sum += avg_rank;
        ++pos;
      } else {
        ++neg;
      }
    }
    i = j;
  }
  if (pos == 0 || neg == 0) return std::nan("");
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

std::map<std::string, double> MetricAccumulator::Finish() const {
  std::map<std::string, double> m;
  if (rows_ == 0) return m;
  if (task_ == Task::kRegression) {
    const double n = static_cast<double>(t_count_);
    m["mse"] = se_ / n;
    m["rmse"] = std::sqrt(se_ / n);
    m["mae"] = ae_ / n;
    const double sst = t_sq_ - t_sum_ * t_sum_ / n;
    m["r2"] = sst > 0 ? 1.0 - se_ / sst : std::nan("");
    return m;
  }
  m["accuracy"] = static_cast<double>(correct_) / rows_;
  m["log_loss"] = log_loss_sum_ / rows_;
  if (task_ == Task::kBinary) {
    const double p = Ratio(tp_[0], tp_[0] + fp_[0]), r = Ratio(tp_[0], tp_[0] + fn_[0]);
    m["precision"] = p;
    m["recall"] = r;
    m["f1"] = Ratio(2 * p * r, p + r);
    m["auc"] = Auc(scores_);
    return m;
  }
  double f1_sum = 0;
  int present = 0;
  for (int c = 0; c < cols_; ++c) {
    if (tp_[c] + fp_[c] + fn_[c] == 0) continue;
    ++present;
    f1_sum += Ratio(2.0 * tp_[c], 2.0 * tp_[c] + fp_[c] + fn_[c]);
  }
  m["macro_f1"] = present ? f1_sum / present : 0.0;
  if (cols_ == 2) m["auc"] = Auc(scores_);
  return m;
}

}  // namespace fedmesh
