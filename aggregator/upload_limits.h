// UploadLimits: the aggregator's receive limits follow the model it trains, so what a node
// can make it allocate is bounded by configuration rather than by the wire format's
// generous defaults (4 GiB per message). An update, a cross-evaluation local model or a
// secure-aggregation masked input is at most 4 bytes per parameter; codecs may add
// metadata (top-k keeps an index per value), hence a quarter more, and 1 MiB covers the
// small payloads of tiny models (secure statistics sums).
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/wire/wire_codec.h"

namespace fedmesh {

// `base` with max_payload_bytes, max_elements and max_pending_bytes lowered to what a
// model of `num_params` float32 values needs (never raised above `base`).
wire::WireLimits UploadLimits(const wire::WireLimits& base, size_t num_params);

// The shared partial-upload budget: `configured` when > 0, else (clients_per_round + 2)
// messages of limits.max_payload_bytes.
uint64_t UploadBudget(const wire::WireLimits& limits, uint64_t configured, int clients_per_round);

}  // namespace fedmesh
