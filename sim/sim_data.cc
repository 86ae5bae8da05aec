#include "sim/sim_data.h"

#include <algorithm>

#include "core/data/data_source.h"
#include "core/data/impute.h"
#include "core/data/partition.h"
#include "core/rng.h"

namespace fedmesh {

ModelSpec SimData::Spec(const ModelSpec& model) const {
  ModelSpec spec = model;
  spec.input_shape = train.sample_shape;
  spec.num_classes = std::max(train.num_classes, test.num_classes);
  return spec;
}

Result<SimData> LoadSimData(const SimOptions& o, const ClientShards& owner) {
  SimData d;
  DataSourceSpec source = o.data;
  source.split_seed = o.seed;
  {
    FM_ASSIGN_OR_RETURN(SiteData site, LoadSiteData(source));
    d.train = std::move(site.train);
    d.test = std::move(site.test);
  }
  if (HasMissing(d.train) || HasMissing(d.test)) {
    // [data] missing = "impute_mean": the means of the whole training split, which is what
    // federated statistics over every client would give.
    auto means = ColumnMeans(d.train);
    if (!means.ok()) return means.status().WithContext(o.data.train);
    FM_RETURN_IF_ERROR(ImputeMissing(d.train, *means).status());
    FM_RETURN_IF_ERROR(ImputeMissing(d.test, *means).status());
  }
  if (o.test_samples > 0 && o.test_samples < d.test.size()) {
    std::vector<uint32_t> first(o.test_samples);
    for (uint32_t i = 0; i < first.size(); ++i) first[i] = i;
    d.test = d.test.Subset(first);
  }
  for (size_t start = 0; start < d.test.size(); start += SimData::kTestChunk) {
    std::vector<uint32_t> idx;
    for (size_t i = start; i < std::min(d.test.size(), start + SimData::kTestChunk); ++i) {
      idx.push_back(static_cast<uint32_t>(i));
    }
    d.test_chunks.push_back(d.test.Subset(idx));
  }
  PartitionSpec p;
  p.scheme = o.partition;
  p.alpha = o.alpha;
  p.num_partitions = static_cast<int>(o.data_shards == 0 ? o.clients : o.data_shards);
  p.seed = o.seed;
  if (Status s = ValidatePartitionSpec(p, d.train.size()); !s.ok()) {
    return Status::InvalidArgument(
        s.message() + " (" + std::to_string(p.num_partitions) + " data shards of " +
        std::to_string(d.train.size()) +
        " samples: set data_shards so that clients share partitions)");
  }
  FM_ASSIGN_OR_RETURN(d.shards, PartitionAll(d.train.labels, d.train.num_classes, p));
  const std::vector<bool> needed = owner.NeededDataShards(o.clients, d.shards.size());
  if (o.federated_eval) {
    // Each shard's own split, seeded per shard; a shard too small to give a row of any
    // class keeps them all for training and its clients refuse evaluation tasks.
    const uint64_t salt = SplitMix64(o.seed ^ 0x636c69656e74ull);
    d.shard_test.reserve(d.shards.size());
    for (size_t k = 0; k < d.shards.size(); ++k) {
      std::vector<uint32_t>& shard = d.shards[k];
      std::vector<int32_t> labels(shard.size());
      for (size_t i = 0; i < shard.size(); ++i) labels[i] = d.train.labels[shard[i]];
      const HeldOutRows rows = SplitHeldOut(labels, o.client_test_fraction, SplitMix64(salt + k));
      std::vector<uint32_t> test;
      if (!rows.train.empty()) {
        for (uint32_t i : rows.test) test.push_back(shard[i]);
        std::vector<uint32_t> train;
        for (uint32_t i : rows.train) train.push_back(shard[i]);
        shard = std::move(train);
      }
      d.shard_test_sizes.push_back(test.size());
      d.shard_test.push_back(d.train.Subset(needed[k] ? test : std::vector<uint32_t>{}));
    }
  }
  d.shard_data.reserve(d.shards.size());
  for (size_t k = 0; k < d.shards.size(); ++k) {
    d.shard_data.push_back(d.train.Subset(needed[k] ? d.shards[k] : std::vector<uint32_t>{}));
  }
  return d;
}

}  // namespace fedmesh
