// Federated evaluation (issue 19): after a round closes, the aggregator sends the new
// global model to every connected site as an evaluate_only FitTask; each site evaluates it
// on its own held-out data, which never leaves it, and answers with its example count, mean
// loss and metrics (an evaluation FitResult). FederatedEvaluation collects the answers of
// one such evaluation until every asked site has answered or its deadline passes, and then
// reports every site's figures and their example-weighted mean. The RoundEngine owns it;
// it does no I/O.
// The weighted mean of per-site AUC or F1 is not the pooled AUC or F1 (they are not
// averages over examples); accuracy, losses and squared errors are exact.
// Thread-safety: not thread-safe; owned by one RoundEngine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/wire/messages.h"

namespace fedmesh {

struct FederatedEvalSettings {
  // Evaluate on the sites after rounds every, 2 * every, ... and after the last round.
  // Default: off.
  bool enabled = false;
  // >= 1. Default: 1 (every round).
  uint64_t every = 1;
  // Fewest answers for the evaluation to count (fewer: reported, without federated
  // metrics). >= 1. Default: 1.
  int min_sites = 1;
  // Seconds from sending the tasks to closing with the answers so far. Finite, > 0.
  // Default: 120.
  double timeout_s = 120.0;
  // The evaluation after the last round also asks each site to fine-tune the global model
  // on its own training data for this many epochs, and to train the federation's first
  // model alone for local_only_epochs, and to report both ("finetuned_*", "local_only_*"
  // metrics): the per-site answer to "did federation help?". 0 = not asked. Default: 0.
  // Size timeout_s for the training this takes.
  uint32_t finetune_epochs = 0;
  uint32_t local_only_epochs = 0;
  // Cross-evaluation (fedmesh-aggregator --cross-eval): the last evaluation also collects
  // the local-only models of the sites that share theirs ([eval] share_local_model at the
  // site), and each of them is then evaluated at every site like the global model, one
  // after the other: the matrix of every candidate on every site's held-out data. Needs
  // local_only_epochs > 0. Default: off.
  bool cross_eval = false;
};

// One site's answer.
struct SiteEval {
  uint64_t num_examples = 0;
  double loss = 0.0;
  std::map<std::string, double> metrics;
};

// The outcome of one federated evaluation.
struct FederatedEvalReport {
  uint64_t round = 0;          // the round whose model was evaluated
  // Cross-evaluation: the site whose local model was evaluated; empty for the global model.
  std::string candidate;
  uint64_t model_version = 0;  // that model's version
  uint32_t asked = 0;          // sites sent the task
  std::map<std::string, SiteEval> sites;  // the answers, by site
  // At least min_sites answered: `total` holds the example-weighted means (num_examples is
  // their sum). Otherwise `total` is empty.
  std::optional<SiteEval> total;
  // Env seconds from sending the tasks to closing (the last answer or the deadline).
  double duration_s = 0.0;
};

class FederatedEvaluation {
 public:
  FederatedEvaluation(uint64_t round, uint64_t model_version, std::set<std::string> asked,
                      double started_s, double deadline_s, int min_sites);

  uint64_t round() const { return round_; }
  double deadline_s() const { return deadline_s_; }
  // Every asked site answered.
  bool complete() const { return sites_.size() == asked_.size(); }

  // Records `site`'s answer; an empty string, or why it was refused (not asked, answered
  // already, no examples).
  std::string Accept(const std::string& site, const wire::FitResult& r);
  // `site` was revoked: the evaluation no longer waits for it (an answer it already gave
  // stays).
  void Forget(const std::string& site) {
    if (!sites_.contains(site)) asked_.erase(site);
  }
  // The report over the answers so far, closed at Env time `now`.
  FederatedEvalReport Close(double now) const;
  // Cross-evaluation: the candidate this evaluation scores (empty: the global model).
  void set_candidate(std::string c) { candidate_ = std::move(c); }
  const std::string& candidate() const { return candidate_; }

 private:
  uint64_t round_, model_version_;
  std::set<std::string> asked_;
  double started_s_, deadline_s_;
  int min_sites_;
  std::map<std::string, SiteEval> sites_;
  std::string candidate_;
};

}  // namespace fedmesh
