#include "sim/simulation.h"

#include "aggregator/eval_lines.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/json_line.h"
#include "node/fit_task_runner.h"
#include "sim/client_shards.h"
#include "sim/sim_modes.h"

namespace fedmesh {

std::string SimClientId(uint64_t index) {
  char id[16];
  std::snprintf(id, sizeof id, "c%07llu", static_cast<unsigned long long>(index));
  return id;
}

JsonLine SimRoundMetrics::ToJson() const {
  JsonLine j;
  j.Add("round", static_cast<int64_t>(round)).Add("sim_time_s", sim_time_s);
  if (test_accuracy) j.Add("test_accuracy", *test_accuracy);
  if (test_loss) j.Add("test_loss", *test_loss);
  j.Add("participants", static_cast<int64_t>(participants))
      .Add("dropped", static_cast<int64_t>(dropped))
      .Add("bytes_up", static_cast<int64_t>(bytes_up))
      .Add("bytes_down", static_cast<int64_t>(bytes_down));
  if (consensus_distance) j.Add("consensus_distance", *consensus_distance);
  if (epsilon) j.Add("epsilon", *epsilon);
  if (clip_norm) j.Add("clip_norm", *clip_norm);
  if (dp_sgd_epsilon_max) j.Add("dp_sgd_epsilon_max", *dp_sgd_epsilon_max);
  if (allreduce_s) j.Add("allreduce_s", *allreduce_s);
  if (allreduce_bound_s) j.Add("allreduce_bound_s", *allreduce_bound_s);
  if (step_s) j.Add("step_s", *step_s);
  if (idle_fraction) j.Add("idle_fraction", *idle_fraction);
  return j;
}

std::vector<JsonLine> SimFederatedEval::ToJson(uint32_t site_lines) const {
  return FederatedEvalLines(report, site_lines, [this](JsonLine& total) {
    total.Add("sim_time_s", sim_time_s)
        .Add("duration_s", report.duration_s)
        .Add("bytes_down", static_cast<int64_t>(bytes_down))
        .Add("bytes_up", static_cast<int64_t>(bytes_up));
  });
}

std::string SimFederatedEval::Summary() const {
  const FederatedEvalReport& r = report;
  char line[256];
  if (!r.total) {
    std::snprintf(line, sizeof line,
                  "round %llu federated evaluation: %zu/%u client(s) answered, below [eval] "
                  "min_sites; no federated metrics",
                  static_cast<unsigned long long>(r.round), r.sites.size(), r.asked);
    return line;
  }
  std::snprintf(line, sizeof line,
                "round %llu federated evaluation: %zu/%u client(s), %llu examples, loss %.4f",
                static_cast<unsigned long long>(r.round), r.sites.size(), r.asked,
                static_cast<unsigned long long>(r.total->num_examples), r.total->loss);
  std::string text = line;
  if (auto acc = r.total->metrics.find("accuracy"); acc != r.total->metrics.end()) {
    std::snprintf(line, sizeof line, ", accuracy %.4f", acc->second);
    text += line;
  }
  return text;
}

namespace sim_internal {

bool IsEvalRound(const SimContext& ctx, uint64_t round) {
  const SimOptions& o = ctx.options;
  return ctx.data.test.size() > 0 && (round % o.eval_every == 0 || round == o.rounds);
}

Result<EvalStats> Evaluate(SimContext& ctx, std::span<const float> params) {
  const auto& chunks = ctx.data.test_chunks;
  std::vector<EvalStats> parts(chunks.size());
  // This rank's chunks: every R-th one.
  const size_t ranks = static_cast<size_t>(ctx.ranks->size());
  const size_t rank = static_cast<size_t>(ctx.ranks->rank());
  std::vector<size_t> mine;
  for (size_t j = rank; j < chunks.size(); j += ranks) mine.push_back(j);
  FM_RETURN_IF_ERROR(ctx.workers.Run(mine.size(), [&](size_t k, Model& model) -> Status {
    FM_RETURN_IF_ERROR(model.SetParams(params));
    SeededEnv env(nullptr, 0);
    Trainer trainer(&model, ctx.options.trainer, &env);
    FM_ASSIGN_OR_RETURN(parts[mine[k]], trainer.Evaluate(chunks[mine[k]]));
    return Status::OK();
  }));
  if (ranks > 1) {
    // The figures of each chunk as raw doubles: every rank sums the same bits below.
    struct Figures {
      double loss, accuracy;
      int64_t samples;
    };
    std::vector<Figures> own;
    for (size_t j : mine) own.push_back({parts[j].loss, parts[j].accuracy, parts[j].samples});
    FM_ASSIGN_OR_RETURN(auto all, ctx.ranks->Allgather(std::span<const uint8_t>(
                                      reinterpret_cast<const uint8_t*>(own.data()),
                                      own.size() * sizeof(Figures))));
    for (size_t r = 0; r < ranks; ++r) {
      const size_t n = all[r].size() / sizeof(Figures);
      if (n * sizeof(Figures) != all[r].size() || n != (chunks.size() + ranks - 1 - r) / ranks) {
        return Status::Internal("rank " + std::to_string(r) + " evaluated a different test set");
      }
      for (size_t i = 0; i < n; ++i) {
        Figures f;
        std::memcpy(&f, all[r].data() + i * sizeof(Figures), sizeof f);
        EvalStats& p = parts[r + i * ranks];
        p.loss = f.loss;
        p.accuracy = f.accuracy;
        p.samples = f.samples;
      }
    }
  }
  EvalStats total;
  double loss = 0, correct = 0;
  for (const EvalStats& p : parts) {
    loss += p.loss * static_cast<double>(p.samples);
    correct += p.accuracy * static_cast<double>(p.samples);
    total.samples += p.samples;
  }
  if (total.samples > 0) {
    total.loss = loss / static_cast<double>(total.samples);
    total.accuracy = correct / static_cast<double>(total.samples);
  }
  return total;
}

Status TrainClient(const SimContext& ctx, Model& model, uint64_t client, uint64_t round,
                   std::vector<float>& params, std::vector<float>& velocity, double* mean_loss) {
  const SimOptions& o = ctx.options;
  const Dataset& data = ctx.data.DataOf(client);
  FM_RETURN_IF_ERROR(model.SetParams(params));
  SeededEnv env(nullptr, FitSeed(o.seed, SimClientId(client), round));
  Trainer trainer(&model, o.trainer, &env);
  if (o.trainer.sgd.momentum > 0 && velocity.size() == params.size()) {
    FM_RETURN_IF_ERROR(trainer.optimizer().SetVelocity(velocity));
  }
  EpochStats last;
  for (int e = 0; e < o.local_epochs; ++e) {
    FM_ASSIGN_OR_RETURN(last, trainer.TrainEpoch(data));
  }
  if (mean_loss != nullptr) *mean_loss = last.mean_loss;
  std::vector<float> next = model.GetParams();
  for (float v : next) {
    if (!std::isfinite(v)) {
      return Status::FailedPrecondition(SimClientId(client) + " diverged in round " +
                                        std::to_string(round) + ": lower [train] lr");
    }
  }
  params = std::move(next);
  if (o.trainer.sgd.momentum > 0) velocity = trainer.optimizer().GetVelocity();
  return Status::OK();
}

}  // namespace sim_internal

namespace {

uint64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::string Megabytes(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MB", static_cast<double>(bytes) / 1e6);
  return b;
}

// The counters every rank adds to the report at the end: client updates and peak RSS.
Status GatherRankFigures(RankGroup& ranks, SimReport& report) {
  const uint64_t own[2] = {report.client_updates, report.peak_rss_bytes};
  FM_ASSIGN_OR_RETURN(auto all, ranks.Allgather(std::span<const uint8_t>(
                                    reinterpret_cast<const uint8_t*>(own), sizeof own)));
  report.client_updates = 0;
  for (const auto& part : all) {
    if (part.size() != sizeof own) return Status::Internal("a rank sent malformed run figures");
    uint64_t theirs[2];
    std::memcpy(theirs, part.data(), sizeof theirs);
    report.client_updates += theirs[0];
    report.rank_peak_rss_bytes.push_back(theirs[1]);
  }
  return Status::OK();
}

}  // namespace

Result<SimReport> RunSimulation(const SimOptions& options,
                                const std::function<void(const std::string&)>& progress,
                                RankGroup* ranks) {
  FM_RETURN_IF_ERROR(Validate(options));
  SingleRankGroup single;
  RankGroup& group = ranks != nullptr ? *ranks : single;
  FM_RETURN_IF_ERROR(CheckShardable(options, group.size()));
  const ClientShards shards(group.rank(), group.size());
  const bool writer = group.rank() == 0;  // of the metrics file and the progress lines
  // threads = 0 means all cores: shared among the ranks on this machine.
  int threads = options.threads;
  if (threads == 0 && group.local_size() > 1) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::max(1, cores / group.local_size());
  }
  const auto t0 = std::chrono::steady_clock::now();
  // The device first: a missing GPU fails the run before the data is loaded.
  std::unique_ptr<BatchedOps> batched_ops;
  const bool batched = options.batched_clients > 0 && options.mode == SimMode::kAggregator;
  if (batched && IsOnnxModelName(options.model.name)) {
    return Status::InvalidArgument("[sim] batched_clients trains the built-in models only; set it "
                                   "to 0 to train the ONNX model " + options.model.name +
                                   " per client");
  }
  if (batched) {
    auto ops = MakeBatchedOps(options.device, threads);
    if (!ops.ok()) return ops.status().WithContext("[sim] device");
    batched_ops = std::move(*ops);
  }
  FM_ASSIGN_OR_RETURN(SimData data, LoadSimData(options, shards));
  const ModelSpec spec = data.Spec(options.model);
  FM_ASSIGN_OR_RETURN(Workspaces workers, Workspaces::Create(spec, threads));
  std::unique_ptr<BatchedTrainer> batched_trainer;
  SimReport report;
  report.training = "per client on " + std::to_string(workers.size()) + " CPU worker" +
                    (workers.size() == 1 ? "" : "s");
  if (batched) {
    const std::string ops_name = batched_ops->name();
    // Room for one round's clients (more pending at once train in further groups): the
    // buffers (weights, gradients, momentum per client) are allocated up front.
    const uint32_t capacity = std::min(options.batched_clients, options.clients_per_round);
    FM_ASSIGN_OR_RETURN(batched_trainer, BatchedTrainer::Create(spec, std::move(batched_ops),
                                                                static_cast<int>(capacity)));
    report.training = "batched, up to " + std::to_string(capacity) +
                      " clients at once on " + ops_name;
  }
  // The initial model: what fedmesh-aggregator's [model] seed gives.
  std::vector<float> initial;
  {
    auto backend = MakeCpuBackend(1);
    FM_ASSIGN_OR_RETURN(auto model, BuildModel(spec, backend.get()));
    model->InitParams(options.seed);
    initial = model->GetParams();
    if (options.privacy.enabled()) {  // a BatchNorm graph, before any client trains
      FM_RETURN_IF_ERROR(model->SupportsPerExampleClipping().WithContext("[privacy] mode"));
    }
  }
  if (group.size() > 1) {
    report.training += " on each of " + std::to_string(group.size()) + " ranks";
  }
  if (writer && !options.metrics_path.empty()) {
    std::ofstream truncate(options.metrics_path, std::ios::trunc);
    if (!truncate) return Status::InvalidArgument("cannot write metrics file '" + options.metrics_path + "'");
  }

  sim_internal::SimContext ctx{options, data, spec, workers, std::move(initial), {}, 0};
  ctx.batched = batched_trainer.get();
  ctx.ranks = &group;
  ctx.shards = shards;
  ctx.report = [&](const SimRoundMetrics& m) -> Status {
    report.rounds.push_back(m);
    if (!writer) return Status::OK();
    if (!options.metrics_path.empty()) {
      FM_RETURN_IF_ERROR(AppendJsonLine(options.metrics_path, m.ToJson()));
    }
    if (progress) {
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      char line[256];
      std::snprintf(line, sizeof line, "round %llu/%u  sim %.1f s  acc %s  participants %llu  dropped %llu  up %s  down %s  wall %.1f s",
                    static_cast<unsigned long long>(m.round), options.rounds, m.sim_time_s,
                    m.test_accuracy ? std::to_string(*m.test_accuracy).substr(0, 6).c_str() : "-",
                    static_cast<unsigned long long>(m.participants),
                    static_cast<unsigned long long>(m.dropped), Megabytes(m.bytes_up).c_str(),
                    Megabytes(m.bytes_down).c_str(), wall);
      std::string text = line;
      if (m.consensus_distance) {
        char b[48];
        std::snprintf(b, sizeof b, "  consensus %.3e", *m.consensus_distance);
        text += b;
      }
      progress(text);
    }
    return Status::OK();
  };
  ctx.report_eval = [&](const SimFederatedEval& e) -> Status {
    report.federated_evals.push_back(e);
    if (!writer) return Status::OK();
    if (!options.metrics_path.empty()) {
      for (const JsonLine& line : e.ToJson(options.eval_site_lines)) {
        FM_RETURN_IF_ERROR(AppendJsonLine(options.metrics_path, line));
      }
    }
    if (progress) progress(e.Summary());
    return Status::OK();
  };
  Result<std::vector<float>> final_model = Status::Internal("no mode ran");
  const auto rounds_t0 = std::chrono::steady_clock::now();
  switch (options.mode) {
    case SimMode::kAggregator: final_model = sim_internal::RunAggregatorMode(ctx); break;
    case SimMode::kGossip: final_model = sim_internal::RunGossipMode(ctx); break;
    case SimMode::kLocal: final_model = sim_internal::RunLocalMode(ctx); break;
    case SimMode::kCentral: final_model = sim_internal::RunCentralMode(ctx); break;
    case SimMode::kAllreduce: final_model = sim_internal::RunAllreduceMode(ctx); break;
    case SimMode::kSplit: final_model = sim_internal::RunSplitMode(ctx); break;
  }
  FM_RETURN_IF_ERROR(final_model.status());
  report.final_model = std::move(*final_model);
  report.client_updates = ctx.client_updates;
  report.batched_train_seconds = ctx.batched_train_seconds;
  report.batched_finish_seconds = ctx.batched_finish_seconds;
  report.stopped_early = ctx.stopped_early;
  const auto t1 = std::chrono::steady_clock::now();
  report.wall_seconds = std::chrono::duration<double>(t1 - t0).count();
  report.rounds_wall_seconds = std::chrono::duration<double>(t1 - rounds_t0).count();
  report.peak_rss_bytes = PeakRssBytes();
  if (group.size() > 1) FM_RETURN_IF_ERROR(GatherRankFigures(group, report));
  return report;
}

}  // namespace fedmesh
