// The [train] loss keys (loss, class_weights, pos_weight) of fedmesh-node, fedmesh-aggregator
// and fedmesh-sim: one definition, so all three accept, bound and document them alike
// (core/loss.h, docs/models.md).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/loss.h"
#include "core/status.h"
#include "config/config_loader.h"
#include "config/config_schema.h"

namespace fedmesh {

// The three keys; `loss_doc` says what the loss is used for in that binary.
std::vector<ConfigKey> LossConfigKeys(const std::string& loss_doc);

// Reads them into `loss`, checked with ValidateLossOptions; errors name the key.
Status ReadLossOptions(const ConfigValues& values, LossOptions* loss);

}  // namespace fedmesh
