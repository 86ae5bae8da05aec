// Record-level differential privacy at a site: DP-SGD's settings ([privacy] in the node's
// config, --set privacy.*=... with --local-only) and the site's own privacy ledger, an RDP
// accountant over every DP-SGD step the site has trained (crypto/dp/rdp_accountant.h).
// The site decides: a budget it would exceed refuses the work, whatever the aggregator
// asks. docs/privacy.md, "Record-level DP (DP-SGD)".
// Thread-safety: RecordPrivacyLedger is a value used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "config/config_schema.h"
#include "core/status.h"
#include "core/trainer.h"
#include "core/wire/messages.h"
#include "crypto/dp/rdp_accountant.h"

namespace fedmesh {

struct RecordPrivacyOptions {
  std::string mode = "off";       // "off" | "dp-sgd"
  double clip = 1.0;              // L2 bound on one record's gradient
  double noise_multiplier = 1.0;  // Gaussian noise standard deviation over clip
  double delta = 1e-5;            // the delta epsilon is reported for, in (0, 1)
  double epsilon_budget = 0.0;    // refuse work that would spend more; 0 = no budget
  bool enabled() const { return mode == "dp-sgd"; }
};

// The [privacy] keys, for the node's schema and local-only's --set.
std::vector<ConfigKey> RecordPrivacyKeys();
RecordPrivacyOptions RecordPrivacyFromConfig(const ConfigValues& values);
Status ValidateRecordPrivacy(const RecordPrivacyOptions& options);
// --local-only's --set overrides: only [privacy] keys (the others have flags); errors name
// the override and the key, as the federated mode's loader does.
Result<RecordPrivacyOptions> RecordPrivacyFromOverrides(const std::vector<std::string>& overrides);

class RecordPrivacyLedger {
 public:
  // A ledger that has spent nothing. InvalidArgument for options ValidateRecordPrivacy refuses.
  static Result<RecordPrivacyLedger> Create(const RecordPrivacyOptions& options);

  // The trainer's DP-SGD settings, with Gaussian noise from a CSPRNG-keyed stream
  // (crypto/dp/gaussian_noise.h): keyed from the OS, or from `seed` for the simulator's
  // reproducible runs (never on a real site). Internal when libsodium cannot start.
  Result<DpSgdOptions> TrainerOptions(std::optional<uint64_t> seed = std::nullopt) const;
  // Epsilon (for options.delta) spent so far, and as it would be after `steps` more steps
  // at sampling rate q.
  double epsilon() const { return epsilon_; }
  Result<double> EpsilonAfter(double q, int64_t steps) const;
  // OK when no budget is set or EpsilonAfter(q, steps) <= epsilon_budget; otherwise
  // FailedPrecondition: "privacy budget: ... would spend epsilon X of budget Y (spent Z)".
  Status CheckBudget(double q, int64_t steps) const;
  // Composes `steps` DP-SGD steps at rate q.
  Status Spend(double q, int64_t steps);
  int64_t steps() const { return steps_; }
  // epsilon(), delta and steps() as a FitResult / SecAggMaskedInput carries them.
  wire::RecordPrivacyReport Report() const {
    return {epsilon_, options_.delta, static_cast<uint64_t>(steps_)};
  }

  // What the node's store keeps (attributes "privacy/rdp", the RDP per order as exact
  // decimal doubles, and "privacy/steps"), and back. FromAttributes leaves the ledger empty
  // when they are absent; Corruption when they do not parse or do not fit the orders.
  std::map<std::string, std::string> ToAttributes() const;
  Status FromAttributes(const std::map<std::string, std::string>& attributes);
  const RecordPrivacyOptions& options() const { return options_; }

 private:
  RecordPrivacyLedger(RecordPrivacyOptions options, RdpAccountant accountant)
      : options_(std::move(options)), accountant_(std::move(accountant)) {}
  Status Refresh();

  RecordPrivacyOptions options_;
  RdpAccountant accountant_;
  double epsilon_ = 0.0;
  int64_t steps_ = 0;
};

}  // namespace fedmesh
