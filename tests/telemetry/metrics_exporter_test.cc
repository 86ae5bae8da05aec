// MetricsExporter (telemetry/metrics_exporter.h): a real HTTP scrape of a real endpoint on
// a port the OS picks, parsed strictly and by prometheus_client; bad addresses refused.
#include "telemetry/metrics_exporter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "tests/telemetry/metrics_http.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;
using testing_util::HttpGet;
using testing_util::ParseExposition;

TEST(MetricsExporterTest, ServesRegisteredAndProcessMetrics) {
  auto e = MetricsExporter::Start("127.0.0.1:0");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_GT((*e)->port(), 0);
  EXPECT_EQ((*e)->url(), "http://127.0.0.1:" + std::to_string((*e)->port()) + "/metrics");
  auto& family = prometheus::BuildCounter().Name("fedmesh_test_things_total").Help("Things.").Register((*e)->registry());
  family.Add({{"kind", "a"}}).Increment(3);
  family.Add({{"kind", "b"}}).Increment();
  prometheus::BuildGauge().Name("fedmesh_test_level").Help("A level.").Register((*e)->registry()).Add({}).Set(2.5);

  auto body = HttpGet((*e)->port());
  ASSERT_TRUE(body.has_value());
  std::string error;
  auto samples = ParseExposition(*body, &error);
  ASSERT_TRUE(samples.has_value()) << error << "\n" << *body;
  EXPECT_EQ(samples->at("fedmesh_test_things_total{kind=\"a\"}"), 3);
  EXPECT_EQ(samples->at("fedmesh_test_things_total{kind=\"b\"}"), 1);
  EXPECT_EQ(samples->at("fedmesh_test_level"), 2.5);
  EXPECT_GT(samples->at("process_resident_memory_bytes"), 1e6);
  EXPECT_GE(samples->at("process_virtual_memory_bytes"), samples->at("process_resident_memory_bytes"));
  EXPECT_GT(samples->at("process_open_fds"), 2);
  EXPECT_GE(samples->at("process_cpu_seconds_total"), 0);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_NEAR(samples->at("process_start_time_seconds"), now, 24 * 3600);
  EXPECT_LE(samples->at("process_start_time_seconds"), now + 2);
  const std::string dir = ::testing::TempDir();
  const std::string parsed = testing_util::ParseWithPrometheusClient(*body, dir);
  if (parsed != "skip") {
    EXPECT_EQ(parsed, "") << *body;
  }
  // Only /metrics is served.
  EXPECT_FALSE(HttpGet((*e)->port(), "/other").has_value());
}

TEST(MetricsExporterTest, BadOrTakenAddressesAreRefused) {
  for (const char* bad : {"", "9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:http", ":9464"}) {
    auto e = MetricsExporter::Start(bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(e.status().message(), HasSubstr("is not HOST:PORT")) << bad;
  }
  auto first = MetricsExporter::Start("127.0.0.1:0");
  ASSERT_TRUE(first.ok());
  auto taken = MetricsExporter::Start("127.0.0.1:" + std::to_string((*first)->port()));
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(taken.status().message(), HasSubstr("cannot serve metrics on 127.0.0.1:"));
}

}  // namespace
}  // namespace fedmesh
