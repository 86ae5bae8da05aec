// fedmesh-sim: runs one simulated federated or gossip experiment from a TOML config (keys in
// docs/config.md, "fedmesh-sim"). Prints one progress line per round (and per federated
// evaluation) on stderr, writes per-round JSON lines to [sim] metrics and PNG plots with
// --plot DIR.
// Under mpirun (a build with MPI) the clients are sharded over the ranks
// (docs/simulation.md, "Over MPI"); rank 0 alone prints and writes the outputs.
// Exit codes: 0 done, 2 bad command line or config, 1 the run failed (data, protocol).
#include <CLI/CLI.hpp>

#include <malloc.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/exit_code.h"
#include "sim/client_shards.h"
#include "sim/plot.h"
#include "sim/rank_group.h"
#include "sim/sim_config.h"
#include "sim/simulation.h"
#ifdef FEDMESH_HAVE_MPI
#include "sim/mpi/rank_group.h"
#endif

namespace {

// The ranks of this run: MPI's under an MPI launcher, else this process alone. Null after
// printing why when the launcher started several ranks and this build cannot join them.
std::unique_ptr<fedmesh::RankGroup> JoinRanks(int* argc, char*** argv) {
  const int launched = fedmesh::LauncherWorldSize();
#ifdef FEDMESH_HAVE_MPI
  if (launched > 0) {
    auto group = fedmesh::MpiRankGroup::Create(argc, argv);
    if (!group.ok()) {
      std::fprintf(stderr, "fedmesh-sim: %s\n", group.status().ToString().c_str());
      return nullptr;
    }
    return std::move(*group);
  }
#else
  (void)argc;
  (void)argv;
  if (launched > 1) {
    // Each process would run the whole simulation and write the same files.
    std::fprintf(stderr,
                 "fedmesh-sim: started as one of %d MPI ranks, but this build has no MPI: "
                 "install libopenmpi-dev (scripts/setup.sh) and rebuild, or run one process\n",
                 launched);
    return nullptr;
  }
#endif
  return std::make_unique<fedmesh::SingleRankGroup>();
}

}  // namespace

int main(int argc, char** argv) {
  // Every round allocates and frees the same large buffers (models, updates, client data,
  // wire frames: 1 MB and more each). glibc serves those from mmap and returns them on free,
  // so each reuse page-faults afresh (8% of a run's time, perf); kept on the heap instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::unique_ptr<fedmesh::RankGroup> ranks = JoinRanks(&argc, &argv);
  if (ranks == nullptr) return 2;
  const bool rank0 = ranks->rank() == 0;
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
    // Every rank parses the same command line; one of them says what is wrong.
    const int rc = rank0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 1);
    return rc == 0 ? 0 : 2;
  }
  if (threads >= 0) overrides.push_back("sim.threads=" + std::to_string(threads));
  auto options = fedmesh::LoadSimConfig(config_path, overrides);
  fedmesh::Status usable = options.ok() ? fedmesh::CheckShardable(*options, ranks->size())
                                        : options.status();
  if (!usable.ok()) {
    // The same config on every rank, so every rank stops here, before any collective.
    if (rank0) std::fprintf(stderr, "fedmesh-sim: %s\n", usable.message().c_str());
    return 2;
  }
  if (rank0) {
    std::fprintf(stderr, "fedmesh-sim: %s mode, %llu clients, %u rounds, seed %llu\n",
                 std::string(fedmesh::SimModeName(options->mode)).c_str(),
                 static_cast<unsigned long long>(options->clients), options->rounds,
                 static_cast<unsigned long long>(options->seed));
    if (ranks->size() > 1) {
      std::fprintf(stderr,
                   "fedmesh-sim: clients sharded over %d MPI ranks (client c on rank c mod %d)\n",
                   ranks->size(), ranks->size());
    }
  }
  auto report = fedmesh::RunSimulation(*options, [quiet](const std::string& line) {
    if (!quiet) std::fprintf(stderr, "%s\n", line.c_str());
  }, ranks.get());
  if (!report.ok()) {
    const int rc = fedmesh::ExitCodeFor(report.status());
    if (ranks->size() > 1) {
      // This rank may have failed alone while the others wait for it in a collective.
      std::fprintf(stderr, "fedmesh-sim (rank %d of %d): %s\n", ranks->rank(), ranks->size(),
                   report.status().ToString().c_str());
      std::fflush(stderr);
      ranks->Abort(rc);
    }
    std::fprintf(stderr, "fedmesh-sim: %s\n", report.status().ToString().c_str());
    return rc;
  }
  if (!rank0) return 0;
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
  if (report->batched_train_seconds > 0) {
    std::fprintf(stderr, "fedmesh-sim: batched rounds: %.2f s in BatchedTrainer::Train, %.2f s "
                 "finishing the updates on the workers, %.2f s the rest (aggregation, evaluation)\n",
                 report->batched_train_seconds, report->batched_finish_seconds,
                 report->rounds_wall_seconds - report->batched_train_seconds -
                     report->batched_finish_seconds);
  }
  if (report->rank_peak_rss_bytes.size() > 1) {
    std::string per_rank;
    for (uint64_t b : report->rank_peak_rss_bytes) {
      per_rank += (per_rank.empty() ? "" : ", ") + std::to_string(b / 1000000) + " MB";
    }
    std::fprintf(stderr, "fedmesh-sim: peak RSS per rank: %s\n", per_rank.c_str());
  }
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
