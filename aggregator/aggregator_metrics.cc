#include "aggregator/aggregator_metrics.h"

#include <cmath>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "telemetry/metric_builders.h"

#include "storage/aggregator_store.h"

namespace fedmesh {

AggregatorMetrics::AggregatorMetrics(prometheus::Registry& r)
    : rounds_(AddCounter(r, "fedmesh_rounds_total", "Rounds closed (a new global model each).")),
      round_(AddGauge(r, "fedmesh_round", "The round open now, or the last one opened.")),
      selected_(AddGauge(r, "fedmesh_round_selected_nodes", "Nodes selected for the open round.")),
      participants_(AddGauge(r, "fedmesh_round_participants", "Updates aggregated in the last closed round.")),
      accepted_(AddCounter(r, "fedmesh_updates_accepted_total", "Node updates accepted into a round.")),
      rejections_(prometheus::BuildCounter()
                      .Name("fedmesh_rejections_total")
                      .Help("Messages from nodes refused, by cause.")
                      .Register(r)),
      tasks_failed_(AddCounter(r, "fedmesh_tasks_failed_total",
                            "Tasks nodes reported they could not serve (Reject TASK_FAILED).")),
      upload_bytes_(AddCounter(r, "fedmesh_upload_bytes_total", "Encoded update bytes aggregated (node to aggregator).")),
      upload_raw_bytes_(AddCounter(r, "fedmesh_upload_raw_bytes_total",
                                "The same updates as dense float32 (before codecs).")),
      download_bytes_(AddCounter(r, "fedmesh_download_bytes_total", "Model bytes sent to nodes with their tasks.")),
      download_raw_bytes_(AddCounter(r, "fedmesh_download_raw_bytes_total",
                                  "The same models as dense float32 (before codecs).")),
      round_seconds_(AddDurationHistogram(r, "fedmesh_round_duration_seconds", "Time from a round's opening to its close.")),
      test_accuracy_(AddGauge(r, "fedmesh_test_accuracy", "Accuracy of the last global model on the evaluation data.")),
      test_loss_(AddGauge(r, "fedmesh_test_loss", "Loss of the last global model on the evaluation data.")),
      epsilon_(AddGauge(r, "fedmesh_dp_epsilon", "Differential privacy epsilon spent so far (0 without DP).")),
      nodes_(AddGauge(r, "fedmesh_nodes_connected", "Nodes registered and connected.")),
      store_bytes_(AddGauge(r, "fedmesh_store_bytes", "Size of the aggregator's SQLite store files.")) {}

void AggregatorMetrics::RoundOpened(uint64_t round, size_t selected) {
  round_.Set(static_cast<double>(round));
  selected_.Set(static_cast<double>(selected));
}

void AggregatorMetrics::UpdateAccepted() { accepted_.Increment(); }

void AggregatorMetrics::Rejected(std::string_view cause) {
  rejections_.Add({{"cause", std::string(cause)}}).Increment();
}

void AggregatorMetrics::TaskFailed() { tasks_failed_.Increment(); }

void AggregatorMetrics::RoundClosed(const RoundMetrics& m, uint64_t store_bytes) {
  rounds_.Increment();
  participants_.Set(m.received);
  upload_bytes_.Increment(static_cast<double>(m.bytes_up));
  upload_raw_bytes_.Increment(static_cast<double>(m.bytes_up_raw));
  download_bytes_.Increment(static_cast<double>(m.bytes_down));
  download_raw_bytes_.Increment(static_cast<double>(m.bytes_down_raw));
  round_seconds_.Observe(m.wall_s);
  if (std::isfinite(m.test_accuracy)) test_accuracy_.Set(m.test_accuracy);
  if (std::isfinite(m.test_loss)) test_loss_.Set(m.test_loss);
  if (std::isfinite(m.epsilon)) epsilon_.Set(m.epsilon);
  store_bytes_.Set(static_cast<double>(store_bytes));
}

void AggregatorMetrics::NodesConnected(size_t n) { nodes_.Set(static_cast<double>(n)); }

}  // namespace fedmesh
