#include "aggregator/strategy_config.h"

namespace fedmesh {

std::vector<ConfigKey> RoundModeConfigKeys(int64_t default_buffer_size,
                                           const std::string& buffer_size_rule) {
  return {
      StringKey("rounds", "mode", "sync",
                "sync: rounds wait for their selected nodes; buffered: FedBuff, the selected "
                "nodes train continuously and every buffer_size updates make a new model")
          .Choices({"sync", "buffered"}),
      IntKey("rounds", "buffer_size", default_buffer_size,
             "buffered: updates per new model (K); " + buffer_size_rule)
          .Min(default_buffer_size == 0 ? 0 : 1)
          .Max(1000000),
      IntKey("rounds", "max_staleness", 10,
             "buffered: refuse updates trained from a model more than this many versions old")
          .Min(0)
          .Max(1000000),
  };
}

RoundMode ReadRoundMode(const ConfigValues& v) {
  return v.GetString("rounds", "mode") == "buffered" ? RoundMode::kBuffered
                                                     : RoundMode::kSynchronous;
}

std::vector<ConfigKey> StrategyConfigKeys() {
  const StrategyOptions d;
  return {
      FloatKey("strategy", "server_lr", d.server_lr,
               "fedavgm, fedadam, fedyogi, fedadagrad: server step size; 0 = the strategy's "
               "default (1 - server_momentum for fedavgm, 0.01 for the adaptive ones)")
          .Min(0),
      FloatKey("strategy", "server_momentum", d.server_momentum, "fedavgm: server momentum beta")
          .Min(0)
          .Max(1, true),
      FloatKey("strategy", "beta1", d.beta1, "fedadam, fedyogi, fedadagrad: first-moment decay")
          .Min(0)
          .Max(1, true),
      FloatKey("strategy", "beta2", d.beta2, "fedadam, fedyogi: second-moment decay")
          .Min(0)
          .Max(1, true),
      FloatKey("strategy", "tau", d.tau, "fedadam, fedyogi, fedadagrad: adaptivity (added to sqrt(v))")
          .Min(0, true),
      FloatKey("strategy", "trim_fraction", d.trim_fraction,
               "trimmed_mean: fraction of updates dropped at each end of every coordinate")
          .Min(0)
          .Max(0.5, true),
      FloatKey("strategy", "byzantine_fraction", d.byzantine_fraction,
               "krum, multikrum: fraction of each round's updates assumed Byzantine")
          .Min(0)
          .Max(0.5, true),
      IntKey("strategy", "multikrum_select", d.multikrum_select,
             "multikrum: updates averaged; 0 = n - f")
          .Min(0)
          .Max(1000000),
      StringKey("dp", "mode", "off",
                "Differential privacy: off; central (the aggregator clips every update and "
                "adds Gaussian noise to their sum); distributed (with [secagg]: each node adds "
                "its share of the noise before masking)")
          .Choices({"off", "central", "distributed"}),
      FloatKey("dp", "clip", d.dp.clip, "L2 bound of each update's change to the model (initial "
                                        "bound with adaptive_clip)")
          .Min(0, true),
      FloatKey("dp", "noise_multiplier", d.dp.noise_multiplier,
               "z: the noise added to the sum has standard deviation z * clip")
          .Min(0),
      BoolKey("dp", "adaptive_clip", d.dp.adaptive_clip,
              "Move the bound towards target_quantile of the update norms each round "
              "(needs noise_multiplier < clients_per_round / 10)"),
      FloatKey("dp", "target_quantile", d.dp.target_quantile,
               "adaptive_clip: the fraction of updates meant to fit under the bound")
          .Min(0, true)
          .Max(1, true),
      FloatKey("dp", "clip_lr", d.dp.clip_lr, "adaptive_clip: geometric step of the bound").Min(0, true),
      FloatKey("dp", "delta", d.dp.delta, "The delta epsilon is reported for").Min(0, true).Max(1, true),
      FloatKey("dp", "epsilon_budget", d.dp.epsilon_budget,
               "Stop before a round that would take epsilon above this; 0 = no budget")
          .Min(0),
      IntKey("dp", "population", 0,
             "Clients rounds sample from (sampling rate = clients_per_round / population); "
             "0 = fedmesh-aggregator: clients_per_round (q = 1, the cautious bound), "
             "fedmesh-sim: [sim] clients. fedmesh-aggregator opens a round only once this many "
             "nodes are connected (fewer would be sampled more often than accounted for)")
          .Min(0),
  };
}

void ReadStrategyOptions(const ConfigValues& v, uint32_t expected_clients, StrategyOptions* o) {
  o->server_lr = v.GetFloat("strategy", "server_lr");
  o->server_momentum = v.GetFloat("strategy", "server_momentum");
  o->beta1 = v.GetFloat("strategy", "beta1");
  o->beta2 = v.GetFloat("strategy", "beta2");
  o->tau = v.GetFloat("strategy", "tau");
  o->trim_fraction = v.GetFloat("strategy", "trim_fraction");
  o->byzantine_fraction = v.GetFloat("strategy", "byzantine_fraction");
  o->multikrum_select = static_cast<uint32_t>(v.GetInt("strategy", "multikrum_select"));
  DpOptions& dp = o->dp;
  dp.central = v.GetString("dp", "mode") == "central";
  dp.distributed = v.GetString("dp", "mode") == "distributed";
  dp.clip = v.GetFloat("dp", "clip");
  dp.noise_multiplier = v.GetFloat("dp", "noise_multiplier");
  dp.adaptive_clip = v.GetBool("dp", "adaptive_clip");
  dp.target_quantile = v.GetFloat("dp", "target_quantile");
  dp.clip_lr = v.GetFloat("dp", "clip_lr");
  dp.delta = v.GetFloat("dp", "delta");
  dp.epsilon_budget = v.GetFloat("dp", "epsilon_budget");
  dp.population = static_cast<uint64_t>(v.GetInt("dp", "population"));
  dp.expected_clients = expected_clients;
}

Result<std::unique_ptr<Strategy>> MakeConfiguredStrategy(const std::string& name,
                                                         const StrategyOptions& options,
                                                         const ConfigValues& values,
                                                         FieldKey strategy_key, FieldKey prox_mu_key) {
  auto strategy = MakeStrategy(name, options);
  if (strategy.ok()) return strategy;
  strategy_key.fragment = "";
  prox_mu_key.fragment = "prox_mu";
  return AttributeToKey(strategy.status(), values,
                        {prox_mu_key,
                         {"server_lr", "strategy", "server_lr"},
                         {"server_momentum", "strategy", "server_momentum"},
                         {"beta1", "strategy", "beta1"},
                         {"beta2", "strategy", "beta2"},
                         {"tau", "strategy", "tau"},
                         {"trim_fraction", "strategy", "trim_fraction"},
                         {"byzantine_fraction", "strategy", "byzantine_fraction"},
                         {"dp: population", "dp", "population"},
                         {"dp: adaptive_clip", "dp", "noise_multiplier"},
                         {"dp: noise_multiplier", "dp", "noise_multiplier"},
                         {"dp: central DP hands", "rounds", "strategy"},
                         {"dp: central and distributed", "dp", "mode"},
                         {"dp: adaptive_clip needs each", "dp", "adaptive_clip"},
                         strategy_key});
}

}  // namespace fedmesh
