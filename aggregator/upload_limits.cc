#include "aggregator/upload_limits.h"

#include <algorithm>

namespace fedmesh {

wire::WireLimits UploadLimits(const wire::WireLimits& base, size_t num_params) {
  wire::WireLimits l = base;
  const uint64_t p = num_params;
  const uint64_t payload = 4 * p + p + (uint64_t{1} << 20);  // 4p, a quarter of 4p, 1 MiB
  l.max_payload_bytes = std::min(base.max_payload_bytes, payload);
  l.max_elements = std::min(base.max_elements, payload / 4);
  l.max_pending_bytes = std::min(base.max_pending_bytes, 2 * payload);
  return l;
}

uint64_t UploadBudget(const wire::WireLimits& limits, uint64_t configured, int clients_per_round) {
  if (configured > 0) return configured;
  return (static_cast<uint64_t>(std::max(clients_per_round, 0)) + 2) * limits.max_payload_bytes;
}

}  // namespace fedmesh
