#include "core/stats/tdigest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace fedmesh {
namespace {

// k1 scale: centroids near q = 0 and q = 1 stay small, so the tails are exact-ish.
double K1(double q, double compression) {
  return compression / (2.0 * std::numbers::pi) * std::asin(2.0 * std::clamp(q, 0.0, 1.0) - 1.0);
}

}  // namespace

TDigest::TDigest(double compression)
    : compression_(std::isfinite(compression) ? std::max(compression, 10.0) : 100.0),
      min_(std::numeric_limits<double>::infinity()),
      max_(-std::numeric_limits<double>::infinity()) {}

void TDigest::Add(double x, double w) {
  pending_.push_back({x, w});
  total_ += w;
  min_ = std::min(min_, x);
  max_ = std::max(max_, x);
  // Buffered so that a million adds sort in big batches, not one insert at a time.
  if (pending_.size() >= static_cast<size_t>(8 * compression_)) Compress();
}

void TDigest::Merge(const TDigest& other) {
  for (const Centroid& c : other.centroids_) pending_.push_back(c);
  for (const Centroid& c : other.pending_) pending_.push_back(c);
  total_ += other.total_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  Compress();
}

Result<TDigest> TDigest::FromCentroids(std::span<const double> means,
                                       std::span<const double> weights, double min, double max,
                                       double compression) {
  if (means.size() != weights.size()) {
    return Status::InvalidArgument("t-digest centroid means and weights differ in length");
  }
  TDigest d(compression);
  for (size_t i = 0; i < means.size(); ++i) {
    if (!std::isfinite(means[i]) || !std::isfinite(weights[i]) || !(weights[i] > 0) ||
        (i > 0 && means[i] < means[i - 1])) {
      return Status::InvalidArgument("t-digest centroid " + std::to_string(i) +
                                     " is not finite, has no weight or is out of order");
    }
    d.pending_.push_back({means[i], weights[i]});
    d.total_ += weights[i];
  }
  if (!means.empty()) {
    if (!std::isfinite(min) || !std::isfinite(max) || min > means.front() || max < means.back()) {
      return Status::InvalidArgument("t-digest min/max do not enclose its centroids");
    }
    d.min_ = min;
    d.max_ = max;
  }
  d.Compress();
  return d;
}

void TDigest::Compress() {
  if (pending_.empty()) return;
  std::vector<Centroid> all;
  all.reserve(centroids_.size() + pending_.size());
  all.insert(all.end(), centroids_.begin(), centroids_.end());
  all.insert(all.end(), pending_.begin(), pending_.end());
  pending_.clear();
  std::sort(all.begin(), all.end(),
            [](const Centroid& a, const Centroid& b) { return a.mean < b.mean; });
  centroids_.clear();
  double total = 0.0;
  for (const Centroid& c : all) total += c.weight;
  total_ = total;
  Centroid cur = all.front();
  double before = 0.0;  // weight left of `cur`
  double k_left = K1(0.0, compression_);
  for (size_t i = 1; i < all.size(); ++i) {
    const Centroid& next = all[i];
    const double q_right = (before + cur.weight + next.weight) / total;
    if (K1(q_right, compression_) - k_left <= 1.0) {
      // Weighted mean, updated incrementally to stay exact for equal means.
      cur.weight += next.weight;
      cur.mean += (next.mean - cur.mean) * next.weight / cur.weight;
    } else {
      centroids_.push_back(cur);
      before += cur.weight;
      k_left = K1(before / total, compression_);
      cur = next;
    }
  }
  centroids_.push_back(cur);
}

double TDigest::Quantile(double q) {
  Compress();
  if (centroids_.empty()) return std::numeric_limits<double>::quiet_NaN();
  q = std::clamp(q, 0.0, 1.0);
  if (centroids_.size() == 1) {
    return centroids_[0].weight <= 1.0 ? centroids_[0].mean : min_ + q * (max_ - min_);
  }
  const double target = q * total_;
  // Centroid i is taken to sit at cumulative weight before_i + w_i / 2; between two centres
  // the value is interpolated linearly, and from min to the first and the last to max.
  const Centroid& first = centroids_.front();
  if (target <= first.weight / 2.0) {
    if (first.weight <= 1.0) return first.mean;
    return min_ + (first.mean - min_) * target / (first.weight / 2.0);
  }
  double before = 0.0;
  for (size_t i = 0; i + 1 < centroids_.size(); ++i) {
    const Centroid& a = centroids_[i];
    const Centroid& b = centroids_[i + 1];
    const double ca = before + a.weight / 2.0;
    const double cb = before + a.weight + b.weight / 2.0;
    if (target <= cb) {
      const double t = (target - ca) / (cb - ca);
      return a.mean + t * (b.mean - a.mean);
    }
    before += a.weight;
  }
  const Centroid& last = centroids_.back();
  const double c_last = total_ - last.weight / 2.0;
  if (last.weight <= 1.0) return last.mean;
  return last.mean + (max_ - last.mean) * (target - c_last) / (last.weight / 2.0);
}

}  // namespace fedmesh
