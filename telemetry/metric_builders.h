// One-line registration of the unlabelled metrics fedmesh's binaries export, with the
// duration buckets they share (0.1 s .. 1 h: a round or a local training run).
// Thread-safety: as prometheus::Registry (safe).
#pragma once

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace fedmesh {

prometheus::Counter& AddCounter(prometheus::Registry& registry, const char* name, const char* help);
prometheus::Gauge& AddGauge(prometheus::Registry& registry, const char* name, const char* help);
// A histogram of seconds with buckets 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600.
prometheus::Histogram& AddDurationHistogram(prometheus::Registry& registry, const char* name, const char* help);

}  // namespace fedmesh
