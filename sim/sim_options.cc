#include "sim/sim_options.h"

#include <charconv>
#include <cmath>

#include "aggregator/strategy.h"
#include "core/batched/batched_ops.h"
#include "core/codec/codec.h"
#include "gossip/averager.h"
#include "gossip/topology.h"

namespace fedmesh {

Result<SimMode> ParseSimMode(std::string_view name) {
  if (name == "aggregator") return SimMode::kAggregator;
  if (name == "gossip") return SimMode::kGossip;
  if (name == "local") return SimMode::kLocal;
  if (name == "central") return SimMode::kCentral;
  if (name == "allreduce") return SimMode::kAllreduce;
  if (name == "split") return SimMode::kSplit;
  return Status::InvalidArgument("unknown mode \"" + std::string(name) +
                                 "\"; known: aggregator, gossip, local, central, allreduce, split");
}

std::string_view SimModeName(SimMode mode) {
  switch (mode) {
    case SimMode::kAggregator: return "aggregator";
    case SimMode::kGossip: return "gossip";
    case SimMode::kLocal: return "local";
    case SimMode::kCentral: return "central";
    case SimMode::kAllreduce: return "allreduce";
    case SimMode::kSplit: return "split";
  }
  return "?";
}

Result<Attack> ParseAttack(std::string_view name) {
  if (name == "signflip") return Attack::kSignFlip;
  if (name == "scaled") return Attack::kScaled;
  if (name == "noise") return Attack::kNoise;
  return Status::InvalidArgument("unknown attack \"" + std::string(name) +
                                 "\"; known: signflip, scaled, noise");
}

namespace {

bool ParseU64(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool Finite(double v) { return std::isfinite(v); }

}  // namespace

Result<CrashEvent> ParseCrashEvent(std::string_view text) {
  auto bad = [&] {
    return Status::InvalidArgument("crash \"" + std::string(text) +
                                   "\" is not INDEX@ROUND or INDEX@ROUND:ROUNDS_DOWN, e.g. 3@5:2");
  };
  const size_t at = text.find('@');
  if (at == std::string_view::npos) return bad();
  CrashEvent e;
  if (!ParseU64(text.substr(0, at), e.client)) return bad();
  std::string_view rest = text.substr(at + 1);
  const size_t colon = rest.find(':');
  if (!ParseU64(rest.substr(0, colon), e.round) || e.round == 0) return bad();
  if (colon != std::string_view::npos && !ParseU64(rest.substr(colon + 1), e.rounds_down)) {
    return bad();
  }
  return e;
}

StrategyOptions StrategyOptionsFor(const SimOptions& o) {
  StrategyOptions s = o.strategy_options;
  if (s.dp.expected_clients == 0) s.dp.expected_clients = o.clients_per_round;
  if (s.dp.population == 0) s.dp.population = o.clients;
  if (!s.dp.noise_seed) s.dp.noise_seed = o.seed;
  return s;
}

Result<AveragingOptions> AveragingOptionsFor(const SimOptions& o) {
  AveragingOptions a;
  FM_ASSIGN_OR_RETURN(a.protocol, ParseGossipProtocol(o.protocol));
  FM_ASSIGN_OR_RETURN(a.topology, ParseTopology(o.topology));
  a.fanout = o.fanout;
  a.codec = o.codec;
  a.choco_gamma = o.choco_gamma;
  return a;
}

Status Validate(const SimOptions& o) {
  auto bad = [](const std::string& what) { return Status::InvalidArgument(what); };
  if (o.clients < 1 || o.clients > 10'000'000) {
    return bad("clients must be in [1, 10000000], got " + std::to_string(o.clients));
  }
  if (o.clients_per_round < 1 || o.clients_per_round > o.clients) {
    return bad("clients_per_round must be in [1, clients = " + std::to_string(o.clients) +
               "], got " + std::to_string(o.clients_per_round));
  }
  if (o.rounds < 1) return bad("rounds must be >= 1");
  if (o.threads < 0) return bad("threads must be >= 0 (0 = all cores)");
  if (o.data_shards > o.clients) {
    return bad("data_shards must be <= clients (" + std::to_string(o.clients) + "), got " +
               std::to_string(o.data_shards));
  }
  if (!(o.alpha > 0) || !Finite(o.alpha)) return bad("alpha must be finite and > 0");
  if (o.eval_every < 1) return bad("eval_every must be >= 1");
  if (o.eval_clients < 1) return bad("eval_clients must be >= 1");
  if (!(o.data.test_fraction >= 0 && o.data.test_fraction < 1)) {
    return bad("test_fraction must be in [0, 1), got " + std::to_string(o.data.test_fraction));
  }
  if (o.federated_eval) {
    if (o.mode != SimMode::kAggregator) {
      return bad("federated evaluation needs mode = \"aggregator\" (the round engine sends the "
                 "evaluation tasks); set it to false in " + std::string(SimModeName(o.mode)) +
                 " mode");
    }
    if (!(o.client_test_fraction > 0 && o.client_test_fraction < 1)) {
      return bad("client_test_fraction must be in (0, 1) with federated evaluation (the "
                 "clients' held-out rows), got " + std::to_string(o.client_test_fraction));
    }
    if (o.eval_min_sites < 1) return bad("eval min_sites must be >= 1");
    if (!(o.eval_timeout_s > 0) || !Finite(o.eval_timeout_s)) {
      return bad("eval timeout_s must be finite and > 0");
    }
  }
  if (o.local_epochs < 1) return bad("local_epochs must be >= 1");
  if (o.mode == SimMode::kSplit) {
    const SplitSimOptions& sp = o.split;
    if (sp.parties < 2 || sp.parties > 16) {
      return bad("split parties must be in [2, 16], got " + std::to_string(sp.parties));
    }
    if (sp.microbatches < 1 || sp.microbatches > 1024) {
      return bad("split microbatches must be in [1, 1024], got " + std::to_string(sp.microbatches));
    }
    if (sp.cut < 1) return bad("split cut must be >= 1");
    if (sp.staleness > 1) return bad("split staleness must be 0 or 1, got " + std::to_string(sp.staleness));
    if (static_cast<int64_t>(sp.microbatches) > o.trainer.batch_size) {
      return bad("split microbatches (" + std::to_string(sp.microbatches) + ") must not exceed the batch (" +
                 std::to_string(o.trainer.batch_size) + "): every micro-batch needs a row");
    }
  }
  FM_RETURN_IF_ERROR(ValidateTrainerOptions(o.trainer));
  FM_RETURN_IF_ERROR(ValidateModelName(o.model.name));
  FM_RETURN_IF_ERROR(ValidateDeviceName(o.device));
  if (o.privacy.enabled()) {
    FM_RETURN_IF_ERROR(ValidateRecordPrivacy(o.privacy));
    if (o.mode != SimMode::kAggregator || o.batched_clients > 0 || o.device != "cpu") {
      return bad("privacy mode dp-sgd runs in aggregator mode with per-client training "
                 "(batched_clients = 0) on the cpu device");
    }
  }
  if (o.batched_clients > 0) {
    if (o.mode != SimMode::kAggregator) {
      return bad("batched_clients applies to aggregator mode only (" +
                 std::string(SimModeName(o.mode)) +
                 " mode trains one client per worker); set it to 0");
    }
    if (o.model.name != "logreg" && o.model.name != "mlp") {
      return bad("batched_clients trains models of Dense, ReLU and Dropout layers (logreg, "
                 "mlp); model " + o.model.name + " has other layers: set batched_clients = 0");
    }
    if (o.trainer.loss.kind != LossKind::kCrossEntropy || !o.trainer.loss.class_weights.empty()) {
      return bad("batched_clients trains with unweighted cross_entropy only; set batched_clients "
                 "= 0 for loss " + std::string(LossKindName(o.trainer.loss.kind)) +
                 (o.trainer.loss.class_weights.empty() ? "" : " with class_weights"));
    }
  } else if (o.device != "cpu" && o.device != "auto") {
    return bad("device " + o.device + " runs batched training only, and batched_clients is "
               "0 (per-client training runs on the CPU workers): set batched_clients >= 1 "
               "or device = \"cpu\"");
  }
  if (o.mode == SimMode::kAggregator) {
    if (o.strategy_options.dp.distributed) {
      return bad("dp mode distributed needs secure aggregation, which fedmesh-sim does not "
                 "simulate; use central");
    }
    if (o.strategy_options.dp.central && o.round_mode == RoundMode::kBuffered) {
      return Status::InvalidArgument(kDpNeedsSynchronousRounds);
    }
    FM_RETURN_IF_ERROR(MakeStrategy(o.strategy, StrategyOptionsFor(o)).status());
    if (o.min_clients > o.clients_per_round) {
      return bad("min_clients must be <= clients_per_round (" +
                 std::to_string(o.clients_per_round) + "), got " + std::to_string(o.min_clients));
    }
    if (!(o.round_timeout_s > 0) || !Finite(o.round_timeout_s)) {
      return bad("round_timeout_s must be finite and > 0");
    }
    const uint32_t half = (o.clients_per_round + 1) / 2;
    const uint32_t min_clients = o.min_clients > 0 ? o.min_clients : half;
    const uint32_t buffer = o.buffer_size > 0 ? o.buffer_size : half;
    if (o.round_mode == RoundMode::kBuffered &&
        (buffer < min_clients || buffer > o.clients_per_round)) {
      return bad("buffer_size " + std::to_string(buffer) + " must be in [min_clients, "
                 "clients_per_round] = [" + std::to_string(min_clients) + ", " +
                 std::to_string(o.clients_per_round) + "]");
    }
  }
  if (!(o.update_prediction >= 0 && o.update_prediction <= 1)) {
    return bad("update_prediction must be in [0, 1], got " + std::to_string(o.update_prediction));
  }
  if (o.update_prediction > 0 &&
      (o.mode != SimMode::kAggregator || o.round_mode != RoundMode::kSynchronous)) {
    return bad("update_prediction needs mode = \"aggregator\" with synchronous rounds; set it "
               "to 0 otherwise");
  }
  FM_RETURN_IF_ERROR(codec::Chain::Parse(o.codec).status().WithContext("codec"));
  FM_RETURN_IF_ERROR(codec::Chain::Parse(o.downlink).status().WithContext("downlink"));
  if (o.mode == SimMode::kGossip) {
    FM_ASSIGN_OR_RETURN(AveragingOptions a, AveragingOptionsFor(o));
    FM_RETURN_IF_ERROR(Validate(a));
    if (o.clients > 100000) {
      return bad("gossip mode holds every client's model: clients must be <= 100000, got " +
                 std::to_string(o.clients));
    }
  }
  for (double v : {o.compute_speed, o.up_mbps, o.down_mbps, o.straggler_slowdown}) {
    if (!(v > 0) || !Finite(v)) {
      return bad("compute_speed, up_mbps, down_mbps and straggler_slowdown must be finite and > 0");
    }
  }
  for (double v : {o.compute_sigma, o.bandwidth_sigma, o.latency_ms, o.attack_scale}) {
    if (!(v >= 0) || !Finite(v)) {
      return bad("compute_sigma, bandwidth_sigma, latency_ms and attack_scale must be finite and >= 0");
    }
  }
  struct P {
    const char* name;
    double v;
  };
  for (P p : {P{"stragglers", o.stragglers}, P{"dropout", o.dropout},
              P{"message_loss", o.message_loss}, P{"byzantine", o.byzantine}}) {
    if (!(p.v >= 0 && p.v <= 1)) {
      return bad(std::string(p.name) + " must be a probability in [0, 1], got " +
                 std::to_string(p.v));
    }
  }
  if (!(o.availability > 0 && o.availability <= 1)) {
    return bad("availability must be in (0, 1], got " + std::to_string(o.availability));
  }
  if (o.availability_period < 1) return bad("availability_period must be >= 1");
  for (const CrashEvent& c : o.crashes) {
    if (c.client >= o.clients) {
      return bad("crash of client " + std::to_string(c.client) + ": there are only " +
                 std::to_string(o.clients) + " clients (indices from 0)");
    }
  }
  return Status::OK();
}

}  // namespace fedmesh
