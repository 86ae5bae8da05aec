// fedmesh-sim: runs one simulated federated or gossip experiment from a TOML config (keys in
// docs/config.md, "fedmesh-sim"). Prints one progress line per round (and per federated
// evaluation) on stderr, writes per-round JSON lines to [sim] metrics and PNG plots with
// --plot DIR.
// Exit codes: 0 done, 2 bad command line or config, 1 the run failed (data, protocol).
#include <CLI/CLI.hpp>

#include <malloc.h>

#include <cstdio>
#include <string>
#include <vector>

#include "sim/plot.h"
#include "sim/sim_config.h"
#include "sim/simulation.h"

int main(int argc, char** argv) {
  // Every round allocates and frees the same large buffers (models, updates, client data,
  // wire frames: 1 MB and more each). glibc serves those from mmap and returns them on free,
  // so each reuse page-faults afresh (8% of a run's time, perf); kept on the heap instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"fedmesh-sim: many virtual clients on one machine, the real protocol code in virtual time"};
  std::string config_path, plot_dir;
  std::vector<std::string> overrides;
  bool quiet = false;
  int threads = -1;
  app.add_option("--config", config_path, "Experiment config (TOML); without it, the defaults");
  app.add_option("--set", overrides, "Override a key: section.key=value (repeatable)");
  app.add_option("--plot", plot_dir, "Write PNG plots (gnuplot) into this directory");
  app.add_option("--threads", threads, "Training workers; same as --set sim.threads=N (0 = all cores)")
      ->check(CLI::Range(0, 4096));
  app.add_flag("--quiet", quiet, "No progress lines");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (threads >= 0) overrides.push_back("sim.threads=" + std::to_string(threads));
  auto options = fedmesh::LoadSimConfig(config_path, overrides);
  if (!options.ok()) {
    std::fprintf(stderr, "fedmesh-sim: %s\n", options.status().message().c_str());
    return 2;
  }
  std::fprintf(stderr, "fedmesh-sim: %s mode, %llu clients, %u rounds, seed %llu\n",
               std::string(fedmesh::SimModeName(options->mode)).c_str(),
               static_cast<unsigned long long>(options->clients), options->rounds,
               static_cast<unsigned long long>(options->seed));
  auto report = fedmesh::RunSimulation(*options, [quiet](const std::string& line) {
    if (!quiet) std::fprintf(stderr, "%s\n", line.c_str());
  });
  if (!report.ok()) {
    std::fprintf(stderr, "fedmesh-sim: %s\n", report.status().ToString().c_str());
    return report.status().code() == fedmesh::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (!report->stopped_early.empty()) {
    std::fprintf(stderr, "fedmesh-sim: stopped after %zu rounds: %s\n", report->rounds.size(),
                 report->stopped_early.c_str());
  }
  std::fprintf(stderr, "fedmesh-sim: training %s\n", report->training.c_str());
  if (report->rounds.empty()) return 0;
  const auto& last = report->rounds.back();
  std::fprintf(stderr,
               "fedmesh-sim: done: %zu rounds, final test accuracy %s, %llu client updates in "
               "%.1f s wall (%.1f updates/s; the rounds alone %.1f s, %.1f updates/s), peak RSS %.0f MB\n",
               report->rounds.size(),
               last.test_accuracy ? std::to_string(*last.test_accuracy).c_str() : "-",
               static_cast<unsigned long long>(report->client_updates), report->wall_seconds,
               static_cast<double>(report->client_updates) / std::max(1e-9, report->wall_seconds),
               report->rounds_wall_seconds,
               static_cast<double>(report->client_updates) / std::max(1e-9, report->rounds_wall_seconds),
               static_cast<double>(report->peak_rss_bytes) / 1e6);
  if (!report->federated_evals.empty()) {
    std::fprintf(stderr, "fedmesh-sim: last %s\n",
                 report->federated_evals.back().Summary().c_str());
  }
  if (!plot_dir.empty()) {
    const std::string title = std::string(fedmesh::SimModeName(options->mode)) + ", " +
                              std::to_string(options->clients) + " clients, codec " + options->codec;
    if (auto s = fedmesh::WritePlots(report->rounds, plot_dir, title); !s.ok()) {
      std::fprintf(stderr, "fedmesh-sim: plots: %s\n", s.message().c_str());
      return 1;
    }
    std::fprintf(stderr, "fedmesh-sim: plots in %s\n", plot_dir.c_str());
  }
  return 0;
}
