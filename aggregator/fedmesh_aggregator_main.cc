// fedmesh-aggregator: runs a federation's rounds (aggregator/aggregator_service.h) from a TOML
// config, with --set overrides. Exit codes: 0 every round finished; 2 a bad config, key,
// allowlist or store that does not fit the config; 1 a runtime failure (store or
// transport broke, a round failed every retry); 128+signal after SIGINT/SIGTERM (the
// state is in the store and a restart resumes it). SIGHUP re-reads the allowlist.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "core/allocator_tuning.h"
#include "core/env.h"
#include "core/exit_code.h"
#include "aggregator/aggregator_service.h"
#include "aggregator/aggregator_config.h"
#include "telemetry/terminal_progress.h"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
std::atomic<int> g_signal{0};

// SIGINT, SIGTERM and SIGHUP are blocked in every thread (libzmq's included, which start
// later and inherit the mask) and taken by one sigwait thread, so that a signal never
// interrupts a zmq_poll with EINTR; the thread only sets flags that the event loop reads.
void StartSignalThread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::thread([set] {
    for (;;) {
      int signo = 0;
      if (sigwait(&set, &signo) != 0) continue;
      if (signo == SIGHUP) {
        g_reload.store(true);
      } else {
        g_signal.store(signo);
        g_stop.store(true);
      }
    }
  }).detach();
}

// Log lines on stderr, above the live progress line when there is one.
void SetLogger(const std::string& id, fedmesh::TerminalProgress* progress = nullptr) {
  const std::string pattern = "[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [" + id + "] %v";
  std::shared_ptr<spdlog::logger> logger;
  if (progress != nullptr) {
    logger = progress->MakeLogger("fedmesh-aggregator:" + id, pattern);
  } else {
    logger = spdlog::stderr_color_mt("fedmesh-aggregator:" + id);
    logger->set_pattern(pattern);
  }
  spdlog::set_default_logger(logger);
}


}  // namespace

int main(int argc, char** argv) {
  fedmesh::KeepLargeBuffersInHeap();  // before any thread starts (core/allocator_tuning.h)
  StartSignalThread();
  SetLogger("aggregator");
  CLI::App app{
      "fedmesh-aggregator: runs a federation's rounds. Admits only nodes whose public key is in "
      "the allowlist directory, keeps every round and accepted update in SQLite (a restart "
      "resumes the open round), and writes per-round metrics as JSON lines.\n"
      "Exit codes: 0 all rounds finished, 1 runtime failure, 2 bad config or keys, 128+N "
      "stopped by signal N. SIGHUP re-reads the allowlist."};
  std::string config_path;
  std::vector<std::string> overrides;
  app.add_option("--config", config_path, "The aggregator's TOML config file");
  app.add_option("--set", overrides, "Override a config key: section.key=value (repeatable)");
  bool stats = false;
  app.add_flag("--stats", stats,
               "Collect federated statistics before round 1 (= --set stats.enabled=true; "
               "docs/data.md)");
  std::string progress_mode = "auto";
  app.add_option("--progress", progress_mode,
                 "Live progress line (round, updates in, ETA) under the logs: auto (when "
                 "stderr is a terminal), always, never")
      ->capture_default_str();
  bool cross_eval = false;
  app.add_flag("--cross-eval", cross_eval,
               "After the last round, score every shared local-only model at every site too "
               "(= --set eval.cross_eval=true; docs/evaluation.md)");
  try {
    app.parse(argc, argv);
    if (stats) overrides.push_back("stats.enabled=true");
    if (cross_eval) overrides.push_back("eval.cross_eval=true");
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  auto mode = fedmesh::ParseProgressMode(progress_mode);
  if (!mode.ok()) {
    spdlog::error("{}", mode.status().message());
    return 2;
  }
  auto config = fedmesh::LoadAggregatorConfig(config_path, overrides);
  if (!config.ok()) {
    spdlog::error("{}", config.status().message());
    return 2;
  }
  spdlog::drop_all();
  static fedmesh::TerminalProgress progress(*mode, STDERR_FILENO);
  SetLogger(config->rounds.aggregator_id, &progress);

  fedmesh::SystemEnv env(config->model_seed ^ 0x9e3779b97f4a7c15ULL);
  fedmesh::AggregatorServiceOptions service_options;
  if (progress.enabled()) {
    service_options.progress = [](const std::string& line) { progress.Set(line); };
  }
  auto service = fedmesh::AggregatorService::Create(*config, &env, std::move(service_options));
  if (!service.ok()) {
    spdlog::error("{}", service.status().ToString());
    return fedmesh::ExitCodeFor(service.status());
  }
  std::printf("listening on %s\n", (*service)->endpoint().c_str());
  std::fflush(stdout);

  fedmesh::Status s = (*service)->Run(&g_stop, &g_reload);
  if (!s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  if (!(*service)->finished()) return 128 + g_signal.load();
  return 0;
}
