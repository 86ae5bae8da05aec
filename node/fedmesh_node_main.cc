// fedmesh-node: the binary a site runs next to its private data.
// Modes: --local-only trains on local data alone (no network, flags only); --config FILE
// runs from a site config, with --set section.key=value overrides, until SIGINT / SIGTERM
// (then exit 0): the federated aggregator client (node/federated_client.h), or, when
// [gossip] listen is set, a serverless gossip node (node/gossip_service.h).
//
// Exit codes: 0 success; 2 bad usage or bad input (flags, data files, config);
// 1 a runtime failure after the inputs were accepted.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <vector>

#include "core/allocator_tuning.h"
#include "core/env.h"
#include "core/exit_code.h"
#include "node/node_config.h"
#include "node/federated_client.h"
#include "node/allreduce_service.h"
#include "node/split_service.h"
#include "node/gossip_service.h"
#include "node/local_training.h"
#include "telemetry/terminal_progress.h"

namespace {

using fedmesh::ExitCodeFor;
using fedmesh::kExitBadInput;
using fedmesh::kExitRuntime;

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
extern "C" void OnStopSignal(int) { g_stop.store(true); }
extern "C" void OnReloadSignal(int) { g_reload.store(true); }

// Serverless mode ([gossip] listen set): run the gossip service until a stop signal or
// [gossip] max_steps.
int RunGossip(const fedmesh::NodeConfig& config, fedmesh::Env* env) {
  auto service = fedmesh::GossipService::Create(config, env, [](const std::string& line) {
    spdlog::info("{}", line);
  });
  if (!service.ok()) {
    spdlog::error("{}", service.status().message());
    return ExitCodeFor(service.status());
  }
  spdlog::info("listening on {}", (*service)->bound_endpoint());
  // SIGHUP re-reads [gossip] allow: a removed peer is revoked at once.
  std::signal(SIGHUP, OnReloadSignal);
  fedmesh::Status s = (*service)->Run(&g_stop, &g_reload);
  if (!s.ok()) {
    spdlog::error("{}", s.message());
    return kExitRuntime;
  }
  const auto& st = (*service)->stats();
  spdlog::info("stopped: {} gossip step(s), test accuracy {:.4f}, {} bytes sent, {} received, {} "
               "message(s) dropped",
               st.steps, st.test_accuracy, st.bytes_sent, st.bytes_received, st.dropped_messages);
  return 0;
}

// Allreduce mode ([train] mode = "allreduce"): train [train] epochs with the [collective]
// group, store the model, exit 0.
int RunAllreduce(const fedmesh::NodeConfig& config, fedmesh::Env* env) {
  auto service = fedmesh::AllreduceService::Create(config, env, [](const std::string& line) {
    spdlog::info("{}", line);
  });
  if (!service.ok()) {
    spdlog::error("{}", service.status().message());
    return ExitCodeFor(service.status());
  }
  auto stats = (*service)->Run(&g_stop);
  if (!stats.ok()) {
    spdlog::error("{}", stats.status().message());
    return g_stop.load() ? 128 + SIGTERM : kExitRuntime;
  }
  spdlog::info("done: {} epoch(s), {} step(s), test accuracy {:.4f}, model sha256 {}", stats->epochs, stats->steps,
               stats->test_accuracy, stats->model_sha256);
  return 0;
}

// Split mode ([train] mode = "split"): align with the [split] peers, train this party's
// part of the model, store it, exit 0.
int RunSplit(const fedmesh::NodeConfig& config) {
  auto service = fedmesh::SplitService::Create(config, [](const std::string& line) { spdlog::info("{}", line); });
  if (!service.ok()) {
    spdlog::error("{}", service.status().message());
    return ExitCodeFor(service.status());
  }
  auto report = (*service)->Run(&g_stop);
  if (!report.ok()) {
    spdlog::error("{}", report.status().message());
    return g_stop.load() ? 128 + SIGTERM : kExitRuntime;
  }
  std::string metrics;
  for (const auto& [k, v] : report->test_metrics) metrics += fmt::format(", test {} {:.4f}", k, v);
  spdlog::info("done: {} rows aligned ({} ids here), {} step(s){}, idle {:.3f}, {:.1f} ms per step, {} bytes sent, "
               "{} received",
               report->aligned_rows, report->my_ids, report->steps, metrics, report->idle_fraction, report->step_ms,
               report->bytes_sent, report->bytes_received);
  return 0;
}

// The federated mode: load the config, run the client (or the gossip service) until a
// stop signal.
int RunFederated(const std::string& config_path, const std::vector<std::string>& overrides,
                 fedmesh::ProgressMode progress_mode) {
  auto config = fedmesh::LoadNodeConfig(config_path, overrides);
  if (!config.ok()) {
    spdlog::error("{}", config.status().message());
    return kExitBadInput;
  }
  // Log lines on stderr (as fedmesh-aggregator's), above the live progress line when there is
  // one: stdout stays free for whatever runs the node.
  static fedmesh::TerminalProgress progress(progress_mode, STDERR_FILENO);
  const std::string pattern = "[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [node " + config->node_id + "] %v";
  std::shared_ptr<spdlog::logger> logger;
  if (progress.enabled()) {
    logger = progress.MakeLogger("fedmesh", pattern);
  } else {
    logger = spdlog::stderr_color_mt("fedmesh");
    logger->set_pattern(pattern);
  }
  spdlog::set_default_logger(logger);
  fedmesh::SystemEnv env(config->training.seed);
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  if (config->gossip.enabled()) return RunGossip(*config, &env);
  if (config->collective.enabled) return RunAllreduce(*config, &env);
  if (config->split.enabled) return RunSplit(*config);
  fedmesh::FederatedClientOptions options;
  options.federation_id = config->federation_id;
  if (progress.enabled()) options.progress = [](const std::string& line) { progress.Set(line); };
  auto client = fedmesh::FederatedClient::Create(*config, options, &env, [](const std::string& line) {
    spdlog::info("{}", line);
  });
  if (!client.ok()) {
    spdlog::error("{}", client.status().message());
    return ExitCodeFor(client.status());
  }
  fedmesh::Status s = (*client)->Run(&g_stop);
  if (!s.ok()) {
    spdlog::error("{}", s.message());
    // A model this site refuses or cannot run is a configuration matter (exit 2); a
    // transport or store failure during the run is not.
    const bool config = s.code() == fedmesh::StatusCode::kFailedPrecondition ||
                        s.code() == fedmesh::StatusCode::kInvalidArgument;
    return config ? kExitBadInput : kExitRuntime;
  }
  const auto& st = (*client)->stats();
  spdlog::info("stopped: {} round(s) served, {} task(s) refused, {} reject(s) received",
               st.rounds_served, st.tasks_refused, st.rejects);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  fedmesh::KeepLargeBuffersInHeap();  // before any thread starts (core/allocator_tuning.h)
  // Errors before the node's own logger is set (a config it cannot load) go to stderr too.
  spdlog::set_default_logger(spdlog::stderr_color_mt("fedmesh-node"));
  fedmesh::LocalTrainingOptions o;
  bool local_only = false;
  std::string hidden = "256";

  CLI::App app{"fedmesh-node: trains on this site's private data; only model updates ever leave it."};
  app.set_version_flag("--version", "fedmesh-node 0.1.0");
  std::string config_path;
  std::vector<std::string> overrides;
  app.add_flag("--local-only", local_only, "Train on local data alone and evaluate (no network)");
  std::string progress_text = "auto";
  app.add_option("--progress", progress_text,
                 "Federated mode: live progress line (round, training, rounds trained) under the "
                 "logs: auto (when stdout is a terminal), always, never")
      ->capture_default_str();
  app.add_option("--config", config_path, "Federated mode: the site's TOML config file");
  app.add_option("--set", overrides, "Override a config key, section.key=value (repeatable); with "
                 "--local-only only [privacy] keys (the others have flags)");
  app.add_option("--node-id", o.node_id, "Name of this node in logs and metrics")->capture_default_str();
  app.add_option("--model", o.model.name, "Model: logreg | mlp | cnn | PATH.onnx")->capture_default_str();
  app.add_option("--save-model", o.save_model_path, "Local-only: write the trained model to FILE.onnx or FILE.npz");
  app.add_option("--hidden", hidden, "mlp hidden layer sizes, comma separated")->capture_default_str();
  app.add_option("--dropout", o.model.dropout, "Dropout before hidden Dense layers")->capture_default_str();
  app.add_option("--data", o.data.train,
                 "Training data: fashion-mnist | csv:PATH | npz:PATH | npy:X,Y | images:DIR (docs/data.md)")
      ->capture_default_str();
  app.add_option("--test-data", o.data.test, "Test data, same forms (default: the source's test split; only fashion-mnist has one)");
  app.add_option("--test-fraction", o.data.test_fraction,
                 "Without --test-data and a test split: fraction of rows held out per class for testing (0 = none)")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  app.add_option("--label-column", o.data.label_column, "CSV column holding the label");
  app.add_option("--num-classes", o.data.num_classes, "Number of classes (0 = largest label + 1)")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
  app.add_flag("--regression", o.data.regression, "The labels are float regression targets (csv, npz)");
  app.add_option("--label-values", o.data.label_values, "CSV: text labels in class order, comma separated")->delimiter(',');
  app.add_option("--features", o.data.features, "CSV: feature columns in order, comma separated (default: all but the label)")->delimiter(',');
  app.add_option("--categorical", o.data.categorical, "CSV: text feature columns to one-hot encode, comma separated")->delimiter(',');
  app.add_option("--categories", o.data.categories, "CSV: a fixed category list, column=a,b,c (repeatable)");
  app.add_option("--categorical-encoding", o.data.categorical_encoding,
                 "CSV: categorical columns as onehot (default) or ids (category indices, for an embedding)")
      ->check(CLI::IsMember({"onehot", "ids"}));
  app.add_option("--missing", o.data.missing,
                 "CSV: missing cells are an error | drop their row | impute_mean (this site's "
                 "training means in --local-only)")
      ->check(CLI::IsMember({"error", "drop", "impute_mean"}))
      ->capture_default_str();
  app.add_option("--image-height", o.data.image_height, "images: height every image is resized to")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--image-width", o.data.image_width, "images: width every image is resized to")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--image-channels", o.data.image_channels, "images: 1 (grey) or 3 (RGB)")->check(CLI::IsMember({1, 3}))->capture_default_str();
  app.add_option("--partition", o.partition.scheme, "Partition scheme: iid | dirichlet | shards | quantity")->capture_default_str();
  app.add_option("--alpha", o.partition.alpha, "Dirichlet concentration (smaller = more label skew)")->capture_default_str();
  app.add_option("--shards", o.partition.shards_per_partition, "Label shards per partition (shards scheme)")->capture_default_str();
  app.add_option("--quantity-sigma", o.partition.quantity_sigma, "Lognormal sigma of partition sizes (quantity scheme)")->capture_default_str();
  app.add_option("--num-partitions", o.partition.num_partitions, "Number of partitions the dataset is split into")->capture_default_str();
  app.add_option("--partition-seed", o.partition.seed, "Seed of the partition (same for every node)")->capture_default_str();
  app.add_option("--index", o.index, "This node's partition, in [0, num-partitions)")->capture_default_str();
  app.add_option("--epochs", o.epochs, "Passes over the local data")->capture_default_str();
  app.add_option("--batch", o.trainer.batch_size, "Mini-batch size")->capture_default_str();
  app.add_option("--lr", o.trainer.sgd.lr, "Learning rate")->capture_default_str();
  app.add_option("--momentum", o.trainer.sgd.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", o.trainer.sgd.weight_decay, "L2 weight decay")->capture_default_str();
  std::string loss = "cross_entropy";
  app.add_option("--loss", loss, "Loss: cross_entropy | bce_with_logits | mse | huber")->capture_default_str();
  app.add_option("--class-weights", o.trainer.loss.class_weights,
                 "cross_entropy: comma-separated weight per class")->delimiter(',');
  app.add_option("--pos-weight", o.trainer.loss.pos_weight, "bce_with_logits: positive-class weight")
      ->capture_default_str();
  app.add_option("--device", o.device, "Compute device: cpu | auto | cuda[:N]")->capture_default_str();
  std::string engine = "auto";
  app.add_option("--engine", engine,
                 "How a built-in model runs: graph | layers | auto (graph on the CPU, layers on a GPU)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "Compute threads (0 = all cores)")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed for model init, shuffling and dropout")->capture_default_str();
  app.add_option("--metrics", o.metrics_path, "Write one JSON line per epoch to this file");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitBadInput;
  }

  auto progress_mode = fedmesh::ParseProgressMode(progress_text);
  if (!progress_mode.ok()) {
    std::fprintf(stderr, "%s\n", progress_mode.status().message().c_str());
    return kExitBadInput;
  }
  if (!local_only && !config_path.empty()) return RunFederated(config_path, overrides, *progress_mode);

  auto logger = spdlog::stderr_color_mt("fedmesh");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [node " + o.node_id + "] %v");
  spdlog::set_default_logger(logger);

  if (!local_only) {
    spdlog::error("give --config FILE for federated mode or --local-only for local training");
    return kExitBadInput;
  }
  if (!config_path.empty()) {
    spdlog::error("--config belongs to federated mode; drop it with --local-only");
    return kExitBadInput;
  }
  // Keys with no flag ([privacy]) come through --set, as in federated mode.
  if (auto privacy = fedmesh::RecordPrivacyFromOverrides(overrides); privacy.ok()) {
    o.privacy = *privacy;
  } else {
    spdlog::error("{} (with --local-only, --set takes only [privacy] keys; the others have flags)",
                  privacy.status().message());
    return kExitBadInput;
  }

  o.data.split_seed = o.partition.seed;  // the held-out split follows the partition seed
  if (auto e = fedmesh::ParseBuiltinEngine(engine); e.ok()) {
    o.engine = *e;
  } else {
    spdlog::error("--engine: {}", e.status().message());
    return kExitBadInput;
  }
  if (auto kind = fedmesh::ParseLossKind(loss); kind.ok()) {
    o.trainer.loss.kind = *kind;
  } else {
    spdlog::error("--loss: {}", kind.status().message());
    return kExitBadInput;
  }
  o.model.hidden.clear();
  for (size_t start = 0; start <= hidden.size();) {
    size_t end = hidden.find(',', start);
    if (end == std::string::npos) end = hidden.size();
    const std::string tok = hidden.substr(start, end - start);
    try {
      size_t used = 0;
      const int h = std::stoi(tok, &used);
      if (used != tok.size()) throw std::invalid_argument(tok);
      o.model.hidden.push_back(h);
    } catch (const std::exception&) {
      spdlog::error("--hidden '{}': expected comma-separated positive integers such as 256,128", hidden);
      return kExitBadInput;
    }
    start = end + 1;
  }

  fedmesh::SystemEnv env(o.seed);
  auto report = fedmesh::RunLocalTraining(o, &env, [](const std::string& line) {
    spdlog::info("{}", line);
  });
  if (!report.ok()) {
    spdlog::error("{}", report.status().message());
    return ExitCodeFor(report.status());
  }
  spdlog::info("done: {} epoch(s), test accuracy {:.4f}, test loss {:.4f}, {:.0f} samples/s",
               report->epochs, report->test_accuracy, report->test_loss, report->samples_per_s);
  if (o.privacy.enabled()) {
    spdlog::info("privacy: dp-sgd, epsilon {:.4f} for delta {:g} after {} steps (clip {:g}, noise "
                 "multiplier {:g}){}", report->epsilon, o.privacy.delta, report->dp_steps,
                 o.privacy.clip, o.privacy.noise_multiplier,
                 report->stopped_by_budget.empty() ? "" : "; stopped by the budget");
  }
  return 0;
}
