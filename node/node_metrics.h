// NodeMetrics: what fedmesh-node exports to Prometheus ([metrics] listen,
// telemetry/metrics_exporter.h). Aggregator mode: registrations, rounds served, tasks
// refused or failed, rejects received, bytes sent, training time (a histogram, an
// external trainer's included), the last round served, DP-SGD epsilon spent. Gossip mode: steps, peers alive,
// bytes, the last evaluation. Thread-safety: updates from the node's thread; scrapes read
// atomics.
#pragma once

#include <cstdint>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace fedmesh {

class NodeMetrics {
 public:
  explicit NodeMetrics(prometheus::Registry& registry);

  void Registered();
  // A FitResult (or masked update) sent for `round`: its encoded and dense sizes and the
  // seconds from the task's arrival to the send.
  void RoundServed(uint64_t round, uint64_t bytes, uint64_t bytes_raw, double seconds);
  void TaskRefused();
  // [privacy] dp-sgd: the site's epsilon (for its delta) and DP-SGD steps so far.
  void PrivacySpent(double epsilon, uint64_t steps);
  void RejectReceived();
  // Gossip mode, at each evaluation.
  void GossipStatus(uint64_t steps, uint64_t peers_alive, uint64_t bytes_sent, uint64_t bytes_received,
                    double test_accuracy);

 private:
  prometheus::Counter& registrations_;
  prometheus::Counter& rounds_served_;
  prometheus::Gauge& last_round_;
  prometheus::Counter& upload_bytes_;
  prometheus::Counter& upload_raw_bytes_;
  prometheus::Histogram& training_seconds_;
  prometheus::Counter& refused_;
  prometheus::Counter& rejects_;
  prometheus::Gauge& gossip_steps_;
  prometheus::Gauge& peers_alive_;
  prometheus::Gauge& gossip_sent_;
  prometheus::Gauge& gossip_received_;
  prometheus::Gauge& test_accuracy_;
  prometheus::Gauge& dp_epsilon_;
  prometheus::Gauge& dp_steps_;
};

}  // namespace fedmesh
