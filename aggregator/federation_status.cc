#include "aggregator/federation_status.h"

#include <cmath>

namespace fedmesh {
namespace {

nlohmann::json Number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

nlohmann::json StatusToJson(const FederationStatus& s) {
  nlohmann::json sites = nlohmann::json::array();
  for (const SiteStatus& site : s.sites) {
    sites.push_back({{"name", site.name},
                     {"enrolled", site.enrolled},
                     {"connected", site.connected},
                     {"selected", site.selected},
                     {"answered", site.answered},
                     {"last_seen_unix", site.last_seen_unix > 0 ? Number(site.last_seen_unix) : nullptr},
                     {"last_round", site.last_round},
                     {"last_examples", site.last_examples},
                     {"updates", site.updates}});
  }
  nlohmann::json rounds = nlohmann::json::array();
  for (const RoundRow& r : s.rounds) {
    const RoundMetrics& m = r.metrics;
    rounds.push_back({{"round", m.round},
                      {"model_version", m.model_version},
                      {"test_accuracy", Number(m.test_accuracy)},
                      {"test_loss", Number(m.test_loss)},
                      {"train_loss", Number(r.train_loss)},
                      {"selected", m.selected},
                      {"received", m.received},
                      {"rejected", m.rejected},
                      {"bytes_up", m.bytes_up},
                      {"bytes_down", m.bytes_down},
                      {"wall_s", Number(m.wall_s)},
                      {"epsilon", Number(m.epsilon)}});
  }
  return {{"federation", s.federation_id},
          {"aggregator", s.aggregator_id},
          {"state", s.state},
          {"message", s.message},
          {"round", s.round},
          {"total_rounds", s.total_rounds},
          {"rounds_completed", s.rounds_completed},
          {"model_version", s.model_version},
          {"attempt", s.attempt},
          {"selected", s.selected},
          {"answered", s.answered},
          {"deadline_in_s", Number(s.deadline_in_s)},
          {"updated_unix", Number(s.updated_unix)},
          {"sites", std::move(sites)},
          {"rounds", std::move(rounds)}};
}

void StatusBoard::Publish(FederationStatus status) {
  auto next = std::make_shared<const FederationStatus>(std::move(status));
  std::lock_guard<std::mutex> lock(mu_);
  current_ = std::move(next);
}

std::shared_ptr<const FederationStatus> StatusBoard::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

}  // namespace fedmesh
