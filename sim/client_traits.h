// ClientTraits: what makes one virtual client unlike another (compute speed, straggling,
// its access link, Byzantine or not, when it is online), drawn from the SimOptions'
// distributions by a generator seeded with (seed, client index). Nothing is stored per
// client, so a million registered clients cost no memory until they are sampled, and the
// same client has the same traits in every round and every run with that seed.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "sim/in_process_network.h"
#include "sim/sim_options.h"

namespace fedmesh {

struct ClientTraits {
  double samples_per_s = 1.0;  // local training speed, straggler slowdown included
  bool straggler = false;
  bool byzantine = false;
  NodeLink link;               // latency and up/down bytes per second
  uint32_t phase = 0;          // start of its availability window, in rounds
};

ClientTraits TraitsOf(const SimOptions& options, uint64_t client);

// Whether a client with `traits` is online in `round` (1-based).
bool IsAvailable(const SimOptions& options, const ClientTraits& traits, uint64_t round);

// A uniform number in [0, 1) for (seed, client, round, salt): per-round coin flips
// (dropout) that do not depend on the order events are processed in.
double ClientCoin(uint64_t seed, uint64_t client, uint64_t round, uint64_t salt);

// Whether `client` drops out of `round` ([sim] dropout): the same coin in every mode.
bool DropsOut(const SimOptions& options, uint64_t client, uint64_t round);

}  // namespace fedmesh
