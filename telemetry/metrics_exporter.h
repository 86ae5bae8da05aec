// MetricsExporter: a binary's Prometheus endpoint ([metrics] listen): the text exposition
// format at http://LISTEN/metrics. Metrics live in a prometheus-cpp registry (Debian
// prometheus-cpp-dev, core library: counters, gauges, histograms, the text serializer);
// components update them from the event loop (they are atomic) while a scrape reads them.
// The HTTP side is a small responder of its own on one thread (GET /metrics, one request
// per connection, 8 KiB request limit, 2 s read timeout): prometheus-cpp's civetweb
// exposer refused to start inside the test binaries, and a scrape needs nothing more. Every scrape also gets the process metrics the official
// client libraries export (process_resident_memory_bytes, process_virtual_memory_bytes,
// process_cpu_seconds_total, process_open_fds, process_start_time_seconds), read from
// /proc/self when scraped. Thread-safety: registry() and the metrics are thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace fedmesh {

class MetricsExporter {
 public:
  // Binds `listen` ("HOST:PORT", e.g. "127.0.0.1:9464"; port 0 = one the OS picks) and
  // serves /metrics. InvalidArgument for an address that is not HOST:PORT; Unavailable,
  // naming it, when it cannot be bound (in use, not a local address).
  static Result<std::unique_ptr<MetricsExporter>> Start(const std::string& listen);
  ~MetricsExporter();

  prometheus::Registry& registry() { return *registry_; }
  int port() const { return port_; }
  // "http://HOST:PORT/metrics" with the port actually bound.
  const std::string& url() const { return url_; }

 private:
  MetricsExporter() = default;
  void Serve();
  // Answers one connection: the metrics for GET /metrics, 404 / 405 otherwise.
  void Answer(int fd) const;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<class ProcessCollector> process_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  int port_ = 0;
  std::string url_;
};

}  // namespace fedmesh
