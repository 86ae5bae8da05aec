#include "node/config/strategy_config.h"

namespace fedmesh {

std::vector<ConfigKey> StrategyConfigKeys() {
  const StrategyOptions d;
  return {
      FloatKey("strategy", "server_lr", d.server_lr,
               "fedavgm, fedadam, fedyogi, fedadagrad: server step size; 0 = the strategy's "
               "default (1.0 for fedavgm, 0.01 for the adaptive ones)")
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
  };
}

void ReadStrategyOptions(const ConfigValues& v, StrategyOptions* o) {
  o->server_lr = v.GetFloat("strategy", "server_lr");
  o->server_momentum = v.GetFloat("strategy", "server_momentum");
  o->beta1 = v.GetFloat("strategy", "beta1");
  o->beta2 = v.GetFloat("strategy", "beta2");
  o->tau = v.GetFloat("strategy", "tau");
  o->trim_fraction = v.GetFloat("strategy", "trim_fraction");
  o->byzantine_fraction = v.GetFloat("strategy", "byzantine_fraction");
  o->multikrum_select = static_cast<uint32_t>(v.GetInt("strategy", "multikrum_select"));
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
                         strategy_key});
}

}  // namespace fedmesh
