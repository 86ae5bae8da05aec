#include "core/data/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "core/rng.h"

namespace fedmesh {
namespace {

constexpr const char* kSchemes[] = {"iid", "dirichlet", "shards", "quantity"};
constexpr int kDirichletAttempts = 100;

using Parts = std::vector<std::vector<uint32_t>>;

std::string Num(double v) { return FormatNumber(v); }

std::vector<uint32_t> Iota(size_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), 0u);
  return v;
}

// Cuts `order` into consecutive runs of the given sizes. REQUIRES: sizes sum to order.size().
Parts CutBySizes(const std::vector<uint32_t>& order, const std::vector<size_t>& sizes) {
  Parts parts(sizes.size());
  size_t pos = 0;
  for (size_t j = 0; j < sizes.size(); ++j) {
    parts[j].assign(order.begin() + static_cast<std::ptrdiff_t>(pos),
                    order.begin() + static_cast<std::ptrdiff_t>(pos + sizes[j]));
    pos += sizes[j];
  }
  FM_CHECK_EQ(pos, order.size());
  return parts;
}

// n split into k sizes that differ by at most one, the larger ones first.
std::vector<size_t> EqualSizes(size_t n, size_t k) {
  std::vector<size_t> sizes(k, n / k);
  for (size_t j = 0; j < n % k; ++j) ++sizes[j];
  return sizes;
}

Parts PartitionIid(size_t n, size_t k, Rng& rng) {
  std::vector<uint32_t> order = Iota(n);
  rng.Shuffle(order);
  return CutBySizes(order, EqualSizes(n, k));
}

// Per class, Dirichlet(alpha) proportions over partitions cut that class's shuffled
// indices (Hsu et al. 2019). A draw can starve a partition, so the proportions are redrawn
// until every partition has min_size samples. Sizes are checked before anything is
// materialised, and the winning draw is replayed from a saved Rng, so an attempt costs
// O(num_classes * k) time and O(k) memory whatever the number of classes.
Result<Parts> PartitionDirichlet(const std::vector<int32_t>& labels, int num_classes, size_t k,
                                 double alpha, size_t min_size, Rng& rng) {
  std::vector<std::vector<uint32_t>> by_class(static_cast<size_t>(num_classes));
  for (size_t i = 0; i < labels.size(); ++i)
    by_class[labels[i]].push_back(static_cast<uint32_t>(i));
  for (auto& members : by_class) rng.Shuffle(members);

  // Calls emit(class, partition, begin, end) for each non-empty run of a class's indices.
  auto draw = [&](Rng& r, auto&& emit) {
    for (size_t c = 0; c < by_class.size(); ++c) {
      const size_t nc = by_class[c].size();
      if (nc == 0) continue;
      const std::vector<double> p = r.Dirichlet(alpha, k);
      double cum = 0.0;
      size_t prev = 0;
      for (size_t j = 0; j < k; ++j) {
        cum += p[j];
        // Cumulative rounding keeps the total exact and each share within one of p[j]*nc.
        size_t cut =
            j + 1 == k
                ? nc
                : std::min(nc, static_cast<size_t>(std::llround(cum * static_cast<double>(nc))));
        cut = std::max(cut, prev);
        if (cut > prev) emit(c, j, prev, cut);
        prev = cut;
      }
    }
  };

  std::vector<size_t> sizes(k);
  size_t smallest = 0;
  for (int attempt = 0; attempt < kDirichletAttempts; ++attempt) {
    const Rng saved = rng;
    std::fill(sizes.begin(), sizes.end(), 0);
    draw(rng, [&](size_t, size_t j, size_t b, size_t e) { sizes[j] += e - b; });
    smallest = *std::min_element(sizes.begin(), sizes.end());
    if (smallest < min_size) continue;

    Parts parts(k);
    for (size_t j = 0; j < k; ++j) parts[j].reserve(sizes[j]);
    Rng replay = saved;
    draw(replay, [&](size_t c, size_t j, size_t b, size_t e) {
      parts[j].insert(parts[j].end(), by_class[c].begin() + static_cast<std::ptrdiff_t>(b),
                      by_class[c].begin() + static_cast<std::ptrdiff_t>(e));
    });
    return parts;
  }
  return Status::FailedPrecondition(
      "dirichlet partitioning with alpha " + Num(alpha) + " over " + std::to_string(k) +
      " partitions left some partition with fewer than min_partition_size " +
      std::to_string(min_size) + " samples in " + std::to_string(kDirichletAttempts) +
      " draws (last draw's smallest: " + std::to_string(smallest) +
      "); raise alpha, lower num_partitions or lower min_partition_size");
}

// McMahan et al.'s pathological split: sort by label, cut into k * s equal shards, give
// each partition s random shards. When class sizes are multiples of the shard size every
// shard holds one label, so a partition sees at most s labels.
Parts PartitionShards(const std::vector<int32_t>& labels, int num_classes, size_t k, size_t s,
                      Rng& rng) {
  // Counting sort: stable, so indices stay ascending within a label.
  std::vector<size_t> start(static_cast<size_t>(num_classes) + 1, 0);
  for (int32_t l : labels) ++start[static_cast<size_t>(l) + 1];
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<uint32_t> sorted(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) sorted[start[labels[i]]++] = static_cast<uint32_t>(i);

  const size_t num_shards = k * s;
  const std::vector<size_t> shard_sizes = EqualSizes(labels.size(), num_shards);
  std::vector<size_t> shard_begin(num_shards + 1, 0);
  std::partial_sum(shard_sizes.begin(), shard_sizes.end(), shard_begin.begin() + 1);

  std::vector<uint32_t> shard_order = Iota(num_shards);
  rng.Shuffle(shard_order);
  Parts parts(k);
  for (size_t j = 0; j < k; ++j) {
    for (size_t t = 0; t < s; ++t) {
      const uint32_t sh = shard_order[j * s + t];
      parts[j].insert(parts[j].end(), sorted.begin() + static_cast<std::ptrdiff_t>(shard_begin[sh]),
                      sorted.begin() + static_cast<std::ptrdiff_t>(shard_begin[sh + 1]));
    }
  }
  return parts;
}

// Quantity skew: log-normal relative sizes, labels IID. Each partition first gets
// min_size samples; the rest is shared in proportion to the weights, rounded by largest
// remainder so the sizes sum exactly to n.
Parts PartitionQuantity(size_t n, size_t k, double sigma, size_t min_size, Rng& rng) {
  // Weights exp(sigma * z) normalised in log space (subtract the max), which is the same
  // distribution as Rng::LogNormal but cannot overflow to inf for a large sigma.
  std::vector<double> logw(k);
  for (auto& z : logw) z = sigma * rng.Normal();
  const double top = *std::max_element(logw.begin(), logw.end());
  std::vector<double> w(k);
  double sum = 0.0;
  for (size_t j = 0; j < k; ++j) sum += (w[j] = std::exp(logw[j] - top));

  const size_t spare = n - k * min_size;
  std::vector<size_t> sizes(k);
  std::vector<std::pair<double, size_t>> remainder(k);  // (fraction, partition)
  size_t assigned = 0;
  for (size_t j = 0; j < k; ++j) {
    const double share = static_cast<double>(spare) * w[j] / sum;
    const auto whole = std::min(spare, static_cast<size_t>(std::floor(share)));
    sizes[j] = min_size + whole;
    assigned += whole;
    remainder[j] = {share - static_cast<double>(whole), j};
  }
  // Rounding can leave assigned slightly above spare only through floating error; clamp
  // by taking back from the largest partitions, then hand out the rest by remainder.
  while (assigned > spare) {
    const size_t j =
        static_cast<size_t>(std::max_element(sizes.begin(), sizes.end()) - sizes.begin());
    --sizes[j];
    --assigned;
  }
  std::sort(remainder.begin(), remainder.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (size_t t = 0; assigned < spare; t = (t + 1) % k, ++assigned) ++sizes[remainder[t].second];

  std::vector<uint32_t> order = Iota(n);
  rng.Shuffle(order);
  return CutBySizes(order, sizes);
}

Status ValidateLabels(const std::vector<int32_t>& labels, int num_classes) {
  if (num_classes < 1) {
    return Status::InvalidArgument("num_classes must be >= 1, got " + std::to_string(num_classes));
  }
  if (labels.size() > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("cannot partition " + std::to_string(labels.size()) +
                                   " samples: indices are 32-bit, split the dataset first");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes) {
      return Status::InvalidArgument("label " + std::to_string(labels[i]) + " at sample " +
                                     std::to_string(i) + " is outside 0.." +
                                     std::to_string(num_classes - 1) + " for num_classes " +
                                     std::to_string(num_classes));
    }
  }
  return Status::OK();
}

}  // namespace

Status ValidatePartitionSpec(const PartitionSpec& spec, size_t num_samples) {
  if (std::find(std::begin(kSchemes), std::end(kSchemes), spec.scheme) == std::end(kSchemes)) {
    return Status::InvalidArgument("unknown partition scheme \"" + spec.scheme +
                                   "\"; known schemes: iid, dirichlet, shards, quantity");
  }
  if (!(spec.alpha > 0.0) || !std::isfinite(spec.alpha)) {
    return Status::InvalidArgument("partition alpha must be a finite number > 0, got " +
                                   Num(spec.alpha) +
                                   "; use e.g. 0.1 for strong label skew, 100 for near-IID");
  }
  if (spec.shards_per_partition < 1) {
    return Status::InvalidArgument("shards_per_partition must be >= 1, got " +
                                   std::to_string(spec.shards_per_partition));
  }
  if (!(spec.quantity_sigma >= 0.0) || !std::isfinite(spec.quantity_sigma)) {
    return Status::InvalidArgument("quantity_sigma must be a finite number >= 0, got " +
                                   Num(spec.quantity_sigma));
  }
  if (spec.num_partitions < 1) {
    return Status::InvalidArgument("num_partitions must be >= 1, got " +
                                   std::to_string(spec.num_partitions));
  }
  const auto k = static_cast<size_t>(spec.num_partitions);
  if (k > num_samples) {
    return Status::InvalidArgument(
        "num_partitions " + std::to_string(k) + " exceeds the " + std::to_string(num_samples) +
        " samples; every partition needs at least one, lower num_partitions");
  }
  if (spec.min_partition_size > num_samples / k) {
    return Status::InvalidArgument("min_partition_size " + std::to_string(spec.min_partition_size) +
                                   " times num_partitions " + std::to_string(k) + " exceeds the " +
                                   std::to_string(num_samples) +
                                   " samples; lower min_partition_size or num_partitions");
  }
  if (spec.scheme == "shards" && k * static_cast<size_t>(spec.shards_per_partition) > num_samples) {
    return Status::InvalidArgument(
        "shards needs num_partitions * shards_per_partition = " +
        std::to_string(k * static_cast<size_t>(spec.shards_per_partition)) + " <= " +
        std::to_string(num_samples) + " samples; lower shards_per_partition or num_partitions");
  }
  return Status::OK();
}

Result<std::vector<std::vector<uint32_t>>> PartitionAll(const std::vector<int32_t>& labels,
                                                        int num_classes,
                                                        const PartitionSpec& spec) {
  FM_RETURN_IF_ERROR(ValidatePartitionSpec(spec, labels.size()));
  FM_RETURN_IF_ERROR(ValidateLabels(labels, num_classes));
  const size_t n = labels.size();
  const auto k = static_cast<size_t>(spec.num_partitions);
  Rng rng(spec.seed);

  Parts parts;
  if (spec.scheme == "iid") {
    parts = PartitionIid(n, k, rng);
  } else if (spec.scheme == "dirichlet") {
    FM_ASSIGN_OR_RETURN(parts, PartitionDirichlet(labels, num_classes, k, spec.alpha,
                                                  spec.min_partition_size, rng));
  } else if (spec.scheme == "shards") {
    parts = PartitionShards(labels, num_classes, k, static_cast<size_t>(spec.shards_per_partition),
                            rng);
  } else {
    parts = PartitionQuantity(n, k, spec.quantity_sigma, spec.min_partition_size, rng);
  }

  for (size_t j = 0; j < k; ++j) {
    if (parts[j].size() < spec.min_partition_size) {
      // Only reachable for shards, whose partitions hold whole shards.
      return Status::FailedPrecondition(
          spec.scheme + " partitioning gave partition " + std::to_string(j) + " only " +
          std::to_string(parts[j].size()) + " samples, fewer than min_partition_size " +
          std::to_string(spec.min_partition_size) + "; lower min_partition_size or num_partitions");
    }
    std::sort(parts[j].begin(), parts[j].end());
  }
  return parts;
}

Result<std::vector<uint32_t>> PartitionFor(const std::vector<int32_t>& labels, int num_classes,
                                           const PartitionSpec& spec, int index) {
  FM_RETURN_IF_ERROR(ValidatePartitionSpec(spec, labels.size()));
  if (index < 0) {
    return Status::OutOfRange("partition index " + std::to_string(index) + " is negative");
  }
  if (index >= spec.num_partitions) {
    return Status::OutOfRange("index " + std::to_string(index) + " >= num_partitions " +
                              std::to_string(spec.num_partitions));
  }
  // Every scheme draws from one Rng stream shared by all partitions, so partition i cannot
  // be computed without the others. The work is O(n) (a few ms for 60000 samples); a
  // caller that needs many partitions should call PartitionAll once instead.
  FM_ASSIGN_OR_RETURN(Parts parts, PartitionAll(labels, num_classes, spec));
  return std::move(parts[static_cast<size_t>(index)]);
}

double LabelSkew(const std::vector<int32_t>& labels, int num_classes,
                 const std::vector<std::vector<uint32_t>>& parts) {
  FM_CHECK_GE(num_classes, 1);
  const auto c_count = static_cast<size_t>(num_classes);
  std::vector<double> global(c_count, 0.0);
  for (int32_t l : labels) {
    FM_CHECK(l >= 0 && l < num_classes);
    global[static_cast<size_t>(l)] += 1.0;
  }
  for (double& g : global) g /= static_cast<double>(labels.size());

  // TV = 1/2 sum_c |p_c - q_c|. Classes absent from the partition contribute q_c each, so
  // only touched classes are visited: O(partition size), not O(num_classes), per partition.
  std::vector<size_t> count(c_count, 0);
  std::vector<size_t> touched;
  double total = 0.0;
  size_t nonempty = 0;
  for (const auto& part : parts) {
    if (part.empty()) continue;
    touched.clear();
    for (uint32_t i : part) {
      FM_CHECK_LT(i, labels.size());
      const auto l = static_cast<size_t>(labels[i]);
      if (count[l]++ == 0) touched.push_back(l);
    }
    double abs_sum = 0.0;
    double q_touched = 0.0;
    for (size_t l : touched) {
      const double p = static_cast<double>(count[l]) / static_cast<double>(part.size());
      abs_sum += std::fabs(p - global[l]);
      q_touched += global[l];
      count[l] = 0;
    }
    total += 0.5 * (abs_sum + std::max(0.0, 1.0 - q_touched));
    ++nonempty;
  }
  return nonempty == 0 ? 0.0 : total / static_cast<double>(nonempty);
}

}  // namespace fedmesh
