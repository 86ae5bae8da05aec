// The metrics lines of a federated evaluation, as fedmesh-aggregator and fedmesh-sim both
// write them: one "*" line with the example-weighted figures, then one per site.
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <vector>

#include "aggregator/federated_eval.h"
#include "core/json_line.h"

namespace fedmesh {

// The lines of `report`: the "*" line (round, model_version, federated_eval, site,
// sites_asked, sites_answered, then what `add_totals` adds (the driver's time and bytes),
// then num_examples, loss and every metric when the evaluation had federation figures),
// then one line per site unless more than `max_site_lines` sites answered. A
// cross-evaluation candidate's lines start with "candidate".
std::vector<JsonLine> FederatedEvalLines(const FederatedEvalReport& report, size_t max_site_lines,
                                         const std::function<void(JsonLine&)>& add_totals);

}  // namespace fedmesh
