// AggregatorMetrics: what fedmesh-aggregator exports to Prometheus ([metrics] listen,
// telemetry/metrics_exporter.h): rounds, participants, updates, rejections by cause, failed
// tasks, bytes up and down, round durations (a histogram), the last evaluation, DP epsilon
// spent, connected nodes and the store's size. The service calls it where it logs the
// same events, so the counters add up to the metrics file's lines. Names follow the
// Prometheus conventions (fedmesh_*_total counters, _seconds, _bytes).
// Thread-safety: updates from the service's thread; scrapes read atomics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "storage/aggregator_store.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace fedmesh {

class AggregatorMetrics {
 public:
  explicit AggregatorMetrics(prometheus::Registry& registry);

  void RoundOpened(uint64_t round, size_t selected);
  void UpdateAccepted();
  void Rejected(std::string_view cause);
  void TaskFailed();
  // A closed round as the metrics file records it; `store_bytes` = the SQLite files' size.
  void RoundClosed(const RoundMetrics& m, uint64_t store_bytes);
  void NodesConnected(size_t n);

 private:
  prometheus::Counter& rounds_;
  prometheus::Gauge& round_;
  prometheus::Gauge& selected_;
  prometheus::Gauge& participants_;
  prometheus::Counter& accepted_;
  prometheus::Family<prometheus::Counter>& rejections_;
  prometheus::Counter& tasks_failed_;
  prometheus::Counter& upload_bytes_;
  prometheus::Counter& upload_raw_bytes_;
  prometheus::Counter& download_bytes_;
  prometheus::Counter& download_raw_bytes_;
  prometheus::Histogram& round_seconds_;
  prometheus::Gauge& test_accuracy_;
  prometheus::Gauge& test_loss_;
  prometheus::Gauge& epsilon_;
  prometheus::Gauge& nodes_;
  prometheus::Gauge& store_bytes_;
};

}  // namespace fedmesh
