// The per-site answer to "did federation help my site?": after the last federated
// evaluation with [eval] finetune_epochs / local_only_epochs, one row per site with its
// held-out examples and, for the task's headline metric (auc when the sites report it,
// else accuracy, else r2), the global model's score, the site's local-only baseline and the
// global model fine-tuned at the site. Empty when no site reported either comparison.
// Thread-safety: pure function.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "aggregator/federated_eval.h"

namespace fedmesh {

// A Markdown table (header, separator, one row per site, then the example-weighted row),
// or "" when no site reported finetuned_* or local_only_* metrics.
std::string SiteComparisonTable(const FederatedEvalReport& report);

// Cross-evaluation (--cross-eval): a Markdown matrix, one row per candidate ("global" for
// the global model's report, else the site whose local model it was) and one column per
// site, of the headline metric; "" when `reports` is empty.
std::string CrossEvalTable(const std::vector<FederatedEvalReport>& reports);

}  // namespace fedmesh
