// The external trainer bridge's cost (issue 20): for a model of N float32 parameters, the
// time the node spends handing a fit task to the site's trainer process and taking its
// answer back (ExternalTrainer::Run: the task frame out, the answer in, every check),
// minus the trainer's own "training" (which it times and reports), next to a memcpy of
// the same bytes both ways in the same run. The trainer is bench/external_bridge_trainer.py
// (numpy only, or with --torch through fedmesh.torch into a module and back, as the
// PyTorch example does). Everything after the answer (the change, codecs, signing) is the
// node's usual path, the same as with fedmesh's own trainer.
//   build/bench/fedmesh_external_bridge [--params 46730,1000000,10000000] [--repeats 10] [--torch]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "node/external_trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"External trainer bridge overhead vs memcpy"};
  std::vector<size_t> params = {46730, 1000000, 10000000};
  int repeats = 10;
  bool torch = false;
  app.add_option("--params", params, "model sizes (float32 parameters)")->delimiter(',');
  app.add_option("--repeats", repeats, "tasks timed per size (after one warm-up)");
  app.add_flag("--torch", torch, "the trainer converts through fedmesh.torch (a torch module)");
  CLI11_PARSE(app, argc, argv);
  const std::string script =
      (std::filesystem::path(FEDMESH_SOURCE_DIR) / "bench" / "external_bridge_trainer.py").string();
  std::printf("%-10s %-8s %-12s %-12s %-12s %-12s %-10s\n", "params", "MB", "round_trip_ms", "trainer_ms",
              "bridge_ms", "memcpy_ms", "bridge/memcpy");
  for (size_t n : params) {
    fedmesh::ExternalTrainerOptions o;
    o.argv = {"/usr/bin/python3", script};
    if (torch) o.argv.push_back("--torch");
    o.connect_timeout_ms = 60000;
    o.timeout_ms = 600000;
    auto t = fedmesh::ExternalTrainer::Create(o);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      return 1;
    }
    // Four tensors, as a model has several; the last takes the remainder.
    fedmesh::trainer::TaskRequest r;
    r.kind = "fit";
    const size_t q = n / 4;
    for (int i = 0; i < 4; ++i)
      r.tensors.push_back({"layer" + std::to_string(i) + ".weight", {static_cast<int64_t>(i < 3 ? q : n - 3 * q)}});
    std::vector<float> w(n);
    std::iota(w.begin(), w.end(), 0.0f);
    for (float& x : w) x *= 1e-6f;
    std::vector<double> trip, trainer, copy;
    std::vector<float> dst(n), back(n);
    for (int i = 0; i <= repeats; ++i) {
      r.round = static_cast<uint64_t>(i + 1);
      const auto t0 = Clock::now();
      auto a = (*t)->Run(r, w);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!a.ok()) {
        std::fprintf(stderr, "task failed: %s\n", a.status().ToString().c_str());
        return 1;
      }
      if (a->values.size() != n || a->values[n - 1] != w[n - 1] + 1.0f) {
        std::fprintf(stderr, "the trainer's answer is wrong\n");
        return 1;
      }
      const auto c0 = Clock::now();
      std::memcpy(dst.data(), w.data(), n * sizeof(float));  // the weights out...
      std::memcpy(back.data(), dst.data(), n * sizeof(float));  // ...and the answer back
      const double copy_ms = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
      if (i == 0) continue;  // warm-up: process start, first-touch page faults
      trip.push_back(ms);
      trainer.push_back(1000.0 * a->metrics.at("train_seconds"));
      copy.push_back(copy_ms);
    }
    const double trip_ms = Median(trip), trainer_ms = Median(trainer), copy_ms = Median(copy);
    const double bridge_ms = trip_ms - trainer_ms;
    std::printf("%-10zu %-8.1f %-12.2f %-12.2f %-12.2f %-12.3f %-10.1f\n", n, 4.0 * n / 1e6, trip_ms,
                trainer_ms, bridge_ms, copy_ms, bridge_ms / copy_ms);
  }
  return 0;
}
