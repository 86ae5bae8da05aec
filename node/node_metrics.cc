#include "node/node_metrics.h"

#include <cmath>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "telemetry/metric_builders.h"

namespace fedmesh {

NodeMetrics::NodeMetrics(prometheus::Registry& r)
    : registrations_(AddCounter(r, "fedmesh_node_registrations_total", "RegisterAcks received from the aggregator.")),
      rounds_served_(AddCounter(r, "fedmesh_node_rounds_served_total", "Rounds this node sent its update for.")),
      last_round_(AddGauge(r, "fedmesh_node_last_round_served", "The last round this node served.")),
      upload_bytes_(AddCounter(r, "fedmesh_node_upload_bytes_total", "Encoded update bytes sent to the aggregator.")),
      upload_raw_bytes_(AddCounter(r, "fedmesh_node_upload_raw_bytes_total",
                                "The same updates as dense float32 (before codecs).")),
      training_seconds_(AddDurationHistogram(r, "fedmesh_node_training_duration_seconds", "Time from a task's arrival to its update being sent.")),
      refused_(AddCounter(r, "fedmesh_node_tasks_refused_total",
                       "Tasks this node did not serve (told to the aggregator as TASK_FAILED).")),
      rejects_(AddCounter(r, "fedmesh_node_rejects_received_total", "Rejects received from the aggregator.")),
      gossip_steps_(AddGauge(r, "fedmesh_gossip_steps", "Gossip steps taken.")),
      peers_alive_(AddGauge(r, "fedmesh_gossip_peers_alive", "Peers this node believes alive.")),
      gossip_sent_(AddGauge(r, "fedmesh_gossip_sent_bytes", "Bytes sent to peers.")),
      gossip_received_(AddGauge(r, "fedmesh_gossip_received_bytes", "Bytes received from peers.")),
      test_accuracy_(AddGauge(r, "fedmesh_node_test_accuracy", "Accuracy of this node's model on its held-out data.")),
      dp_epsilon_(AddGauge(r, "fedmesh_node_dp_epsilon",
                           "Record-level DP-SGD epsilon this site has spent, for its [privacy] delta.")),
      dp_steps_(AddGauge(r, "fedmesh_node_dp_steps", "DP-SGD steps this site has trained.")) {}

void NodeMetrics::PrivacySpent(double epsilon, uint64_t steps) {
  if (std::isfinite(epsilon)) dp_epsilon_.Set(epsilon);
  dp_steps_.Set(static_cast<double>(steps));
}

void NodeMetrics::Registered() { registrations_.Increment(); }

void NodeMetrics::RoundServed(uint64_t round, uint64_t bytes, uint64_t bytes_raw, double seconds) {
  rounds_served_.Increment();
  last_round_.Set(static_cast<double>(round));
  upload_bytes_.Increment(static_cast<double>(bytes));
  upload_raw_bytes_.Increment(static_cast<double>(bytes_raw));
  training_seconds_.Observe(seconds);
}

void NodeMetrics::TaskRefused() { refused_.Increment(); }

void NodeMetrics::RejectReceived() { rejects_.Increment(); }

void NodeMetrics::GossipStatus(uint64_t steps, uint64_t peers_alive, uint64_t bytes_sent, uint64_t bytes_received,
                               double test_accuracy) {
  gossip_steps_.Set(static_cast<double>(steps));
  peers_alive_.Set(static_cast<double>(peers_alive));
  gossip_sent_.Set(static_cast<double>(bytes_sent));
  gossip_received_.Set(static_cast<double>(bytes_received));
  if (test_accuracy >= 0 && std::isfinite(test_accuracy)) test_accuracy_.Set(test_accuracy);
}

}  // namespace fedmesh
