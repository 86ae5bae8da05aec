#include "aggregator/peer_rate_limiter.h"

#include <algorithm>

namespace fedmesh {

bool PeerRateLimiter::Allow(const std::string& peer, double now) {
  if (now >= next_sweep_ && options_.per_second > 0) {
    // Forget peers whose bucket has refilled: they would start full anyway.
    const double full_after = options_.burst / options_.per_second;
    std::erase_if(buckets_, [&](const auto& kv) { return now - kv.second.at >= full_after; });
    next_sweep_ = now + full_after;
  }
  auto [it, fresh] = buckets_.try_emplace(peer, Bucket{options_.burst, now});
  Bucket& b = it->second;
  if (!fresh) {
    b.tokens = std::min(options_.burst, b.tokens + (now - b.at) * options_.per_second);
    b.at = now;
  }
  if (b.tokens < 1.0) {
    ++refused_;
    return false;
  }
  b.tokens -= 1.0;
  return true;
}

bool PeerRateLimiter::HasToken(const std::string& peer, double now) const {
  auto it = buckets_.find(peer);
  if (it == buckets_.end()) return true;
  return std::min(options_.burst, it->second.tokens + (now - it->second.at) * options_.per_second) >= 1.0;
}

}  // namespace fedmesh
