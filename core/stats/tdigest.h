// TDigest: a mergeable quantile sketch (Dunning and Ertl, "Computing extremely accurate
// quantiles using t-digests", 2019), the merging variant with the k1 (arcsine) scale
// function. Sites summarise a feature into at most ~compression centroids; the aggregator
// merges the sites' digests and reads quantiles from the union, with an error that is
// smallest at the tails. Federated statistics (core/stats/site_statistics.h) use it for
// the quantiles that sums cannot give.
// Thread-safety: not thread-safe; a const digest after Compress() may be read from many.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "core/status.h"

namespace fedmesh {

class TDigest {
 public:
  struct Centroid {
    double mean = 0.0;
    double weight = 0.0;
  };

  // compression (delta) bounds the centroids to about delta; finite, >= 10. Default 100:
  // quantile errors well under 1% of rank at 1e5 values, a few kB per feature.
  explicit TDigest(double compression = 100.0);

  // Adds `x` with weight `w`. REQUIRES: x finite, w > 0.
  void Add(double x, double w = 1.0);
  // Adds every centroid of `other`.
  void Merge(const TDigest& other);
  // A digest from centroids another process sent (means ascending, weights > 0, finite)
  // and that process's min and max. InvalidArgument when they are not.
  static Result<TDigest> FromCentroids(std::span<const double> means,
                                       std::span<const double> weights, double min, double max,
                                       double compression = 100.0);

  // The value below which a fraction q of the weight lies, interpolated between centroids
  // (and min/max at the ends). q in [0, 1]; NaN when empty.
  double Quantile(double q);
  // Folds pending values into the centroids; centroids() is then current.
  void Compress();
  const std::vector<Centroid>& centroids() const { return centroids_; }
  double total_weight() const { return total_; }
  double min() const { return min_; }
  double max() const { return max_; }

 private:
  double compression_;
  std::vector<Centroid> centroids_;  // compressed, means ascending
  std::vector<Centroid> pending_;    // added since the last Compress
  double total_ = 0.0;
  double min_, max_;
};

}  // namespace fedmesh
