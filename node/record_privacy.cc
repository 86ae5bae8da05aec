#include "node/record_privacy.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "crypto/dp/gaussian_noise.h"

namespace fedmesh {

std::vector<ConfigKey> RecordPrivacyKeys() {
  return {
      StringKey("privacy", "mode", "off",
                "Record-level DP in this site's training: \"dp-sgd\" (per-example clipping, "
                "Gaussian noise, Poisson-sampled batches; not with BatchNormalization) or \"off\"")
          .Choices({"off", "dp-sgd"}),
      FloatKey("privacy", "clip", 1.0, "dp-sgd: L2 bound on one record's gradient").Min(0, true),
      FloatKey("privacy", "noise_multiplier", 1.0,
               "dp-sgd: noise standard deviation over clip, added to each batch's clipped sum")
          .Min(0),
      FloatKey("privacy", "delta", 1e-5, "dp-sgd: the delta the site's epsilon is reported for")
          .Min(0, true)
          .Max(1, true),
      FloatKey("privacy", "epsilon_budget", 0.0,
               "dp-sgd: refuse training that would spend more epsilon than this in all; 0 = no "
               "budget (epsilon is still reported)")
          .Min(0),
  };
}

RecordPrivacyOptions RecordPrivacyFromConfig(const ConfigValues& v) {
  RecordPrivacyOptions o;
  o.mode = v.GetString("privacy", "mode");
  o.clip = v.GetFloat("privacy", "clip");
  o.noise_multiplier = v.GetFloat("privacy", "noise_multiplier");
  o.delta = v.GetFloat("privacy", "delta");
  o.epsilon_budget = v.GetFloat("privacy", "epsilon_budget");
  return o;
}

Status ValidateRecordPrivacy(const RecordPrivacyOptions& o) {
  if (o.mode != "off" && o.mode != "dp-sgd") {
    return Status::InvalidArgument("privacy mode must be \"off\" or \"dp-sgd\", not \"" + o.mode + "\"");
  }
  if (!(o.clip > 0) || !std::isfinite(o.clip)) return Status::InvalidArgument("clip must be > 0");
  if (!(o.noise_multiplier >= 0) || !std::isfinite(o.noise_multiplier)) {
    return Status::InvalidArgument("noise_multiplier must be >= 0");
  }
  if (!(o.delta > 0 && o.delta < 1)) return Status::InvalidArgument("delta must be in (0, 1)");
  if (!(o.epsilon_budget >= 0) || !std::isfinite(o.epsilon_budget)) {
    return Status::InvalidArgument("epsilon_budget must be >= 0");
  }
  return Status::OK();
}

Result<RecordPrivacyOptions> RecordPrivacyFromOverrides(const std::vector<std::string>& overrides) {
  static const ConfigSchema* schema = [] {
    auto* s = new ConfigSchema;
    s->name = "fedmesh-node --local-only";
    s->description = "The keys --local-only takes through --set (the others have flags).";
    s->keys = RecordPrivacyKeys();
    return s;
  }();
  FM_ASSIGN_OR_RETURN(const ConfigValues values, LoadConfig(*schema, "", overrides));
  RecordPrivacyOptions o = RecordPrivacyFromConfig(values);
  FM_RETURN_IF_ERROR(ValidateRecordPrivacy(o));
  return o;
}

Result<RecordPrivacyLedger> RecordPrivacyLedger::Create(const RecordPrivacyOptions& options) {
  FM_RETURN_IF_ERROR(ValidateRecordPrivacy(options));
  FM_ASSIGN_OR_RETURN(RdpAccountant accountant, RdpAccountant::Create());
  return RecordPrivacyLedger(options, std::move(accountant));
}

Result<DpSgdOptions> RecordPrivacyLedger::TrainerOptions(std::optional<uint64_t> seed) const {
  DpSgdOptions dp;
  dp.enabled = options_.enabled();
  dp.clip = options_.clip;
  dp.noise_multiplier = options_.noise_multiplier;
  // A fresh OS-keyed stream per trainer: the noise must be unpredictable to everyone else.
  FM_ASSIGN_OR_RETURN(GaussianNoise noise, GaussianNoise::Create(seed));
  auto shared = std::make_shared<GaussianNoise>(std::move(noise));
  dp.add_noise = [shared](std::span<float> x, double stddev) { shared->Add(x, stddev); };
  return dp;
}

Result<double> RecordPrivacyLedger::EpsilonAfter(double q, int64_t steps) const {
  FM_ASSIGN_OR_RETURN(const PrivacySpent spent,
                      accountant_.EpsilonIfComposed(q, options_.noise_multiplier,
                                                    static_cast<uint64_t>(std::max<int64_t>(steps, 0)),
                                                    options_.delta));
  return spent.epsilon;
}

Status RecordPrivacyLedger::CheckBudget(double q, int64_t steps) const {
  if (options_.epsilon_budget <= 0) return Status::OK();
  FM_ASSIGN_OR_RETURN(const double after, EpsilonAfter(q, steps));
  if (after <= options_.epsilon_budget) return Status::OK();
  char text[256];
  std::snprintf(text, sizeof(text),
                "privacy budget: %lld more DP-SGD steps at q = %.6g would bring this site's "
                "epsilon to %.4g (delta %g), over its budget of %.4g (spent so far: %.4g)",
                static_cast<long long>(steps), q, after, options_.delta, options_.epsilon_budget,
                epsilon_);
  return Status::FailedPrecondition(text);
}

Status RecordPrivacyLedger::Spend(double q, int64_t steps) {
  FM_RETURN_IF_ERROR(accountant_.Compose(q, options_.noise_multiplier,
                                         static_cast<uint64_t>(std::max<int64_t>(steps, 0))));
  steps_ += steps;
  return Refresh();
}

std::map<std::string, std::string> RecordPrivacyLedger::ToAttributes() const {
  std::string rdp;
  char v[32];
  for (double x : accountant_.rdp()) {
    std::snprintf(v, sizeof(v), "%.17g", x);
    if (!rdp.empty()) rdp += ',';
    rdp += v;
  }
  return {{"privacy/rdp", rdp}, {"privacy/steps", std::to_string(steps_)}};
}

Status RecordPrivacyLedger::FromAttributes(const std::map<std::string, std::string>& attributes) {
  const auto rdp_it = attributes.find("privacy/rdp");
  const auto steps_it = attributes.find("privacy/steps");
  if (rdp_it == attributes.end() && steps_it == attributes.end()) return Status::OK();
  auto bad = [](const std::string& why) {
    return Status::Corruption("the stored privacy ledger " + why +
                              "; the epsilon this site has spent is unknown, so it will not "
                              "train: restore the node's db file from a backup");
  };
  if (rdp_it == attributes.end() || steps_it == attributes.end()) return bad("is incomplete");
  std::vector<double> rdp;
  const std::string& text = rdp_it->second;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    char* stop = nullptr;
    const double x = std::strtod(item.c_str(), &stop);
    if (item.empty() || stop != item.c_str() + item.size()) return bad("holds '" + item + "'");
    rdp.push_back(x);
    start = end + 1;
  }
  char* stop = nullptr;
  const long long steps = std::strtoll(steps_it->second.c_str(), &stop, 10);
  if (steps_it->second.empty() || *stop != '\0' || steps < 0) return bad("has a bad step count");
  if (Status s = accountant_.RestoreRdp(std::move(rdp)); !s.ok()) return bad(s.message());
  steps_ = steps;
  return Refresh();
}

Status RecordPrivacyLedger::Refresh() {
  FM_ASSIGN_OR_RETURN(const PrivacySpent spent, accountant_.Epsilon(options_.delta));
  epsilon_ = spent.epsilon;
  return Status::OK();
}

}  // namespace fedmesh
