// The [strategy] config table: the options of the server optimisers and robust aggregators
// (aggregator/strategy.h StrategyOptions), shared by fedmesh-aggregator and fedmesh-sim so
// both spell, bound and document them the same way. [rounds] strategy picks the strategy
// and [rounds] prox_mu stays with it; a strategy ignores the keys it does not use.
// Thread-safety: pure functions over immutable values.
#pragma once

#include <vector>

#include "aggregator/round_engine.h"
#include "aggregator/strategy.h"
#include "core/status.h"
#include "config/config_loader.h"
#include "config/config_schema.h"

namespace fedmesh {

// [rounds] mode, buffer_size and max_staleness (RoundMode, FedBuff), shared by the
// aggregator's and the simulator's configs; they differ only in buffer_size's default and
// what it means.
std::vector<ConfigKey> RoundModeConfigKeys(int64_t default_buffer_size,
                                           const std::string& buffer_size_rule);
RoundMode ReadRoundMode(const ConfigValues& values);

// The [strategy] and [dp] keys, with StrategyOptions' defaults and ranges.
std::vector<ConfigKey> StrategyConfigKeys();
// Fills every StrategyOptions field but prox_mu from the [strategy] and [dp] keys;
// `expected_clients` (clients_per_round) becomes dp.expected_clients.
void ReadStrategyOptions(const ConfigValues& values, uint32_t expected_clients,
                         StrategyOptions* options);
// Builds the strategy `name` with `options`; MakeStrategy's errors are attributed to the
// config key that caused them ([strategy] server_lr, ..., or `strategy_key` for the name,
// `prox_mu_key` for mu).
Result<std::unique_ptr<Strategy>> MakeConfiguredStrategy(const std::string& name,
                                                         const StrategyOptions& options,
                                                         const ConfigValues& values,
                                                         FieldKey strategy_key, FieldKey prox_mu_key);

}  // namespace fedmesh
