// SimConfig: what `fedmesh-sim --config exp.toml [--set section.key=value ...]` reads,
// checked against SimConfigSchema (the keys of docs/config.md, "fedmesh-sim") and turned
// into SimOptions. Thread-safety: pure functions returning values.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "config/config_schema.h"
#include "sim/sim_options.h"

namespace fedmesh {

const ConfigSchema& SimConfigSchema();

// LoadConfig(SimConfigSchema(), path, overrides) converted to SimOptions and checked with
// Validate; errors name the file (or --set) and the key.
Result<SimOptions> LoadSimConfig(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace fedmesh
