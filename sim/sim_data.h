// SimData: the dataset of a simulation, loaded once from the [data] source (any source of
// core/data/data_source.h, with fedmesh-node's options): a central test set, and the
// training rows cut into data_shards partitions (any partitioner of core/data/partition.h,
// seeded with the simulation's seed). The central test set is the source's [data] test,
// else its own test split (fashion-mnist), else test_fraction of its rows held out per
// class (LoadSiteData's split, seeded by the simulation's seed), and none with test_fraction
// 0; the rest is partitioned. With federated evaluation each shard then gives
// client_test_fraction of its rows (per class, SplitHeldOut) as the held-out data of the
// clients training on it, who never train on them.
// Client c trains on shard c mod data_shards, so a million clients can share the 60,000
// Fashion-MNIST images; with data_shards = clients (the default) every client has its own
// partition, exactly as PartitionFor gives it to a real node. The shards' samples are
// copied out once, at load (partitions are disjoint, so this costs one more copy of the
// training split at most), rather than for every training job.
// Sharded runs (sim/client_shards.h): a rank copies out only the shards its own clients
// train on; the others stay empty (their row indices, hence SizeOf, are kept everywhere:
// every rank's round engine registers every client with its example count).
// Thread-safety: const after LoadSimData; read from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/data/dataset.h"
#include "core/model_zoo.h"
#include "core/status.h"
#include "sim/client_shards.h"
#include "sim/sim_options.h"

namespace fedmesh {

struct SimData {
  Dataset train;
  Dataset test;  // the central test set; empty: no central evaluation
  // The test set cut into chunks of kTestChunk samples: evaluated in parallel, one chunk
  // per job, and summed in chunk order, so results do not depend on the thread count.
  std::vector<Dataset> test_chunks;
  static constexpr size_t kTestChunk = 1000;
  std::vector<std::vector<uint32_t>> shards;  // training rows: indices into train, ascending
  std::vector<Dataset> shard_data;            // train.Subset(shards[k])
  // Federated evaluation: each shard's held-out rows (never in shards[k]); empty otherwise.
  std::vector<Dataset> shard_test;
  std::vector<uint64_t> shard_test_sizes;  // their row counts, on every rank

  const std::vector<uint32_t>& ShardOf(uint64_t client) const {
    return shards[client % shards.size()];
  }
  uint64_t SizeOf(uint64_t client) const { return ShardOf(client).size(); }
  // The samples of client `client` (what a node holds). REQUIRES: this rank owns it.
  const Dataset& DataOf(uint64_t client) const { return shard_data[client % shard_data.size()]; }
  // A nonzero id of DataOf(client), the same for clients that share a shard (for
  // BatchedClient::data_id: the shards do not change during a run).
  uint64_t DataIdOf(uint64_t client) const { return client % shard_data.size() + 1; }
  // How many held-out samples client `client` has. REQUIRES: federated evaluation.
  uint64_t TestSizeOf(uint64_t client) const {
    return shard_test_sizes[client % shard_test_sizes.size()];
  }
  // The held-out samples of client `client`. REQUIRES: federated evaluation (shard_test
  // set); this rank owns it.
  const Dataset& TestOf(uint64_t client) const { return shard_test[client % shard_test.size()]; }
  // The model spec with the data's input shape and class count filled in.
  ModelSpec Spec(const ModelSpec& model) const;
};

// Loads options.data (test trimmed to test_samples) and partitions it, copying out the
// shards of the clients `owner` says this rank owns (all by default). Errors name the
// dataset or the partition setting.
Result<SimData> LoadSimData(const SimOptions& options, const ClientShards& owner = {});

}  // namespace fedmesh
