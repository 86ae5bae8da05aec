// Partitioners: split one labelled dataset into the private datasets of simulated clients,
// with the non-IID patterns federated-learning papers study: IID, Dirichlet label skew,
// label shards (McMahan et al.) and quantity (size) skew. The result depends only on the
// labels and the PartitionSpec: all randomness comes from fedmesh::Rng seeded with
// spec.seed, so a seed gives the same partitions on every machine and compiler, and a
// simulator can compute just the partition of the client it needs (PartitionFor).
// Thread-safety: stateless; concurrent calls are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace fedmesh {

struct PartitionSpec {
  // How labels are distributed: "iid" (default), "dirichlet", "shards" or "quantity".
  std::string scheme = "iid";
  // dirichlet: concentration of the per-class Dirichlet over partitions. Default 0.5;
  // small (0.1) gives few classes per partition, large (100+) approaches IID. Must be > 0.
  double alpha = 0.5;
  // shards: how many label-sorted shards each partition receives. Default 2 (the FedAvg
  // paper's pathological split). Must be >= 1.
  int shards_per_partition = 2;
  // quantity: sigma of the log-normal partition sizes. Default 1.0 (sizes commonly differ
  // by 5x or more); 0 gives equal sizes. Must be >= 0.
  double quantity_sigma = 1.0;
  // Number of partitions (clients). Default 1. Must be in 1..num_samples.
  int num_partitions = 1;
  // Seed of the fedmesh::Rng stream. Default 0. Same seed + same labels = same partitions.
  uint64_t seed = 0;
  // Fewest samples any partition may receive. Default 1 (no client is left empty).
  // dirichlet redraws until it holds; quantity reserves it; iid and shards are near-equal
  // and fail with FailedPrecondition in the rare case that violates it.
  size_t min_partition_size = 1;
};

// InvalidArgument, with what to change, when `spec` cannot partition num_samples samples:
// an unknown scheme, alpha <= 0, num_partitions outside 1..num_samples,
// shards_per_partition < 1, quantity_sigma < 0, non-finite numbers,
// num_partitions * min_partition_size > num_samples, or (shards) fewer samples than shards.
Status ValidatePartitionSpec(const PartitionSpec& spec, size_t num_samples);

// Splits sample indices 0..labels.size()-1 into spec.num_partitions partitions. Every
// index appears in exactly one partition; indices are ascending within a partition.
// Errors: InvalidArgument (bad spec, num_classes < 1, a label outside 0..num_classes-1),
// FailedPrecondition (dirichlet could not give every partition min_partition_size samples
// in 100 draws, or a shards/iid partition fell below min_partition_size).
Result<std::vector<std::vector<uint32_t>>> PartitionAll(const std::vector<int32_t>& labels,
                                                        int num_classes, const PartitionSpec& spec);

// Partition `index` of PartitionAll(labels, num_classes, spec), identical to it.
// Errors: those of PartitionAll, and OutOfRange when index is not in 0..num_partitions-1.
Result<std::vector<uint32_t>> PartitionFor(const std::vector<int32_t>& labels, int num_classes,
                                           const PartitionSpec& spec, int index);

// How far partitions' label distributions are from the global one: the mean over non-empty
// partitions of the total-variation distance between the partition's label histogram and
// that of all `labels` (0: identical, 1: disjoint supports). 0 when no partition is
// non-empty. REQUIRES: labels in 0..num_classes-1, indices < labels.size().
double LabelSkew(const std::vector<int32_t>& labels, int num_classes,
                 const std::vector<std::vector<uint32_t>>& parts);

}  // namespace fedmesh
