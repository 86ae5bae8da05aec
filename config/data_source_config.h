// The [data] keys that name a data source and say how its rows become samples and labels
// (core/data/data_source.h DataSourceSpec): dataset, test, test_fraction, the csv options
// (label_column, label_values, features, categorical, categories, missing), num_classes,
// regression and the image options. Shared by fedmesh-node and fedmesh-sim, so both accept,
// bound and document them the same way (docs/data.md, docs/config.md). The split seed is
// not among them: a node seeds its split with [data] seed, the simulator with [sim] seed.
// Thread-safety: pure functions over immutable values.
#pragma once

#include <string>
#include <vector>

#include "core/data/data_source.h"
#include "core/status.h"
#include "config/config_loader.h"
#include "config/config_schema.h"

namespace fedmesh {

// The keys, in the order docs/config.md lists them. test_fraction's documentation says the
// rows are "seeded by <seed_key>" and "held out as <held_out_as>", which differ between a
// site ("[data] seed", "this site's test data") and the simulator.
std::vector<ConfigKey> DataSourceConfigKeys(const std::string& seed_key,
                                            const std::string& held_out_as);

// Fills every DataSourceSpec field but split_seed from those keys. InvalidArgument naming
// the key for an image_size that is not two whole numbers or image_channels = 2.
Status ReadDataSourceSpec(const ConfigValues& values, DataSourceSpec* spec);

}  // namespace fedmesh
